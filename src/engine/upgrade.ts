/**
 * What a run moved to other code (`resume --upgrade`) says when a recorded
 * step no longer replays: the nondeterminism error of the replay cursor,
 * with the call site of the step in both versions (file:line: where the
 * current code asked for its step, and the first line of the code the run
 * was pinned to that names the recorded step) and the three ways on:
 * `ctx.patched` around the change, a fork from before the step, or a plain
 * resume, which keeps the pinned code.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { NondeterminismError } from "../shared/errors.ts";
import { formatPlace, userPlace } from "../shared/user-frames.ts";

export function upgradeDivergence(info: ErrorInfo, err: NondeterminismError, rootId: string, pinned: ReadonlyMap<string, string> | undefined): ErrorInfo {
  const name = /"([^"]*)"/.exec(err.recorded)?.[1];
  const recordedAt = name !== undefined && pinned ? callSite(pinned, name) : undefined;
  const place = userPlace(err);
  const now = info.at ?? (place ? formatPlace(place) : undefined);
  const sites = [now ? `now called at ${now}` : undefined, recordedAt ? `recorded from ${recordedAt} of the pinned code` : undefined].filter(Boolean);
  const hint =
    `wrap the change in if (ctx.patched("some-id")) { new code } else { old code }, ` +
    `fork the run from before the step: atomic fork ${rootId} --at ${name ?? err.position}, ` +
    `or resume it without --upgrade: it keeps the code it is pinned to`;
  return { ...info, message: sites.length ? `${info.message} (${sites.join("; ")})` : info.message, hint };
}

/** The first `file:line` of the pinned files whose text names the step (as a string literal). */
function callSite(files: ReadonlyMap<string, string>, name: string): string | undefined {
  const quoted = [`"${name}"`, `'${name}'`, `\`${name}\``];
  for (const [path, text] of files) {
    const lines = text.split("\n");
    const n = lines.findIndex((l) => quoted.some((q) => l.includes(q)));
    if (n >= 0) return `${path}:${n + 1}`;
  }
  return undefined;
}
