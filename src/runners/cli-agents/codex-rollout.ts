/**
 * A codex thread's token totals when its running turn started, read from
 * codex's own session file: for a stage that continues a thread without the
 * totals the earlier stage left (its attempt's directory is on another
 * worker host; session-totals.ts). `turn.completed.usage` is the thread's
 * running total (codex.ts), so without the earlier total the continued
 * stage would be charged the earlier turns again.
 *
 * codex 0.171.0 keeps a thread in
 * `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`: each
 * turn begins with an `event_msg` of type `task_started`, and each model
 * call adds a `token_count` whose `info.total_token_usage` is the thread's
 * total so far. `codex exec` runs one turn a process, so once that turn has
 * completed the last `task_started` is its start, and the last
 * `token_count` before it is the total it started from (none: 0). A fork's
 * file begins with its parent's events; its count goes on from them.
 *
 * The same file is the session a codex attempt leaves a copy of and a
 * stage continuing it puts back on another machine (`codexSessions`,
 * cli-session-copy.ts).
 */

import { readdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { CliSessionStore } from "./cli-session-copy.ts";
import { num, obj } from "./records.ts";

/** The totals (the `fields` of `total_token_usage`, in order) when the thread's last turn started; undefined without its file. */
export function totalsBeforeLastTurn(codexHome: string, threadId: string, fields: readonly string[]): number[] | undefined {
  const file = rolloutFile(codexHome, threadId);
  if (!file) return undefined;
  let last = fields.map(() => 0);
  let atStart: number[] | undefined;
  for (const line of readFileSync(join(codexHome, file), "utf8").split("\n")) {
    if (!line.includes('"task_started"') && !line.includes('"token_count"')) continue;
    let payload: Record<string, unknown>;
    try {
      payload = obj(obj(JSON.parse(line)).payload);
    } catch {
      continue; // a line codex was still writing
    }
    if (payload.type === "task_started") atStart = last;
    else if (payload.type === "token_count") {
      const total = obj(obj(payload.info).total_token_usage);
      if (Object.keys(total).length) last = fields.map((k) => num(total[k]));
    }
  }
  return atStart;
}

/** The thread's session file, relative to codex's home (`sessions/…/rollout-…-<thread id>.jsonl`); undefined when it has none. */
export function rolloutFile(codexHome: string, threadId: string): string | undefined {
  try {
    const file = readdirSync(join(codexHome, "sessions"), { recursive: true, encoding: "utf8" }).find((f) => f.endsWith(`-${threadId}.jsonl`));
    return file ? join("sessions", file) : undefined;
  } catch {
    return undefined;
  }
}

/** codex's store: `sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl` under its home. */
export const codexSessions: CliSessionStore = {
  root: (_req, env) => env.CODEX_HOME || join(env.HOME || homedir(), ".codex"),
  find: (root, _req, id) => rolloutFile(root, id),
  place(_root, _req, id, recorded) {
    const shaped = new RegExp(`^sessions/\\d{4}/\\d{2}/\\d{2}/rollout-[0-9T:.-]+-${id}\\.jsonl$`);
    if (shaped.test(recorded)) return recorded;
    const now = new Date().toISOString();
    return join("sessions", now.slice(0, 4), now.slice(5, 7), now.slice(8, 10), `rollout-${now.slice(0, 19).replaceAll(":", "-")}-${id}.jsonl`);
  },
};
