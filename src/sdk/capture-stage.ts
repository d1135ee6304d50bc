/**
 * captureInSandbox: a page captured in headless Chromium (capturePage,
 * browser.ts) by a shell stage of its own, in a sandbox (Linux,
 * bubblewrap), so neither Chromium nor the page it loads runs in the
 * workflow's process or sees more than it needs. The stage starts this
 * binary in its role `--internal-capture-page` (capture-role.ts).
 *
 * The sandbox's policy (docs/guides/sandboxing.md):
 * - an http(s) URL: network "provider" with the URL's host:port as its only
 *   host, so the page reaches its own site (through the sandbox's gate; a
 *   loopback port is tunnelled) and nothing else: its requests to other
 *   hosts fail, and the capture shows the page without them;
 * - a local file (a path or a file:// URL): no network; the file's
 *   directory is shown read-only (its stylesheets and images beside it);
 * - both: the output directory writable; Chromium's and this binary's
 *   directories read-only when they lie outside /usr.
 *
 * Being a stage, the capture is journaled: a resumed run replays its
 * result and does not visit the page again. Failure semantics: never
 * throws; a page that does not load is `{ ok: false, error }` with
 * capturePage's one sentence and hint, and a stage that could not run
 * (no sandbox on this machine, Chromium killed) the stage's own error with
 * the last line of its stderr that says why.
 */

import { mkdirSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { reasonLine } from "../shared/reason-line.ts";
import { ROLE, selfCommand } from "../shared/self-exec.ts";
import type { CaptureJob } from "./capture-role.ts";
import type { PageCapture } from "./browser.ts";
import { sh } from "./shell.ts";
import type { WorkflowContext } from "./types.ts";

export interface SandboxedCapture {
  /** The Chromium (or Chrome) program. */
  chromium: string;
  /** Where the PNGs go: <name>-full.png, <name>-scroll-NN.png. */
  dir: string;
  /** What a local path is relative to (default: this process's directory). */
  cwd?: string;
  /** The stage's limit (default 120 s). */
  timeoutMs?: number;
}

/** The sandbox of a capture of `target`: its one host, or its file's directory; `dir` writable. */
export function captureSandbox(target: string, chromium: string, dir: string, cwd: string): { network: "provider" | "none"; hosts: string[]; read: string[]; write: string[] } {
  const read = [chromium, selfCommand(ROLE.capturePage)[0]!, ...(selfCommand(ROLE.capturePage).length > 2 ? [selfCommand(ROLE.capturePage)[1]!] : [])]
    .map((p) => dirname(realpathSync(p)))
    .filter((d) => !d.startsWith("/usr/"));
  if (/^https?:\/\//i.test(target)) {
    const url = new URL(target);
    const port = url.port || (url.protocol === "https:" ? "443" : "80");
    return { network: "provider", hosts: [`${url.hostname}:${port}`], read, write: [dir] };
  }
  const file = /^file:\/\//i.test(target) ? fileURLToPath(target) : isAbsolute(target) ? target : resolve(cwd, target);
  return { network: "none", hosts: [], read: [...read, dirname(file)], write: [dir] };
}

/** Captures `target` (a URL or a local page) as the sandboxed shell stage `name`: the PNGs, or why not. */
export async function captureInSandbox(ctx: WorkflowContext<any>, name: string, target: string, opts: SandboxedCapture): Promise<{ ok: true; value: PageCapture } | { ok: false; error: string }> {
  const cwd = opts.cwd ?? process.cwd();
  mkdirSync(opts.dir, { recursive: true });
  let sandbox: ReturnType<typeof captureSandbox>;
  try {
    sandbox = captureSandbox(target, opts.chromium, opts.dir, cwd);
  } catch (e) {
    return { ok: false, error: `the reference ${target} cannot be captured (${e instanceof Error ? e.message : String(e)}); check the address or the file, or leave it out.` };
  }
  const job: CaptureJob = { target, chromium: opts.chromium, dir: opts.dir, name, cwd };
  const r = await ctx.shell(name, sh`${selfCommand(ROLE.capturePage)} ${JSON.stringify(job)}`, { sandbox, timeoutMs: opts.timeoutMs ?? 120_000, failureMode: "return" });
  const line = r.text.trim().split("\n").at(-1) ?? "";
  try {
    const out = JSON.parse(line) as { ok: true; capture: PageCapture } | { ok: false; error: string };
    return out.ok ? { ok: true, value: out.capture } : out;
  } catch {
    // No line: the process died before writing it (the sandbox, its network helper, the runtime); its stderr says why.
    const why = reasonLine(r.errorPath);
    return { ok: false, error: `the capture of ${target} did not finish (${r.error?.message ?? `exit ${r.exitCode}`}${why ? `: ${why}` : ""}); see ${r.errorPath ?? r.outputPath}.` };
  }
}
