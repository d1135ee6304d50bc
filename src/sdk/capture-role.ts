/**
 * The internal role `--internal-capture-page`: capturePage (browser.ts)
 * in a process of its own, which a sandboxed shell stage starts
 * (capture-stage.ts), so Chromium and the page it loads run inside the
 * stage's sandbox rather than in the workflow's process.
 *
 * Its one argument is the capture as JSON ({ target, chromium, dir, name,
 * cwd }). The page's requests go through the sandbox's provider gate
 * (HTTPS_PROXY inside), which lets through only the hosts the stage names;
 * Chromium's own sandbox is off (atomic's contains it, and nested user
 * namespaces are not always allowed). The outcome is one line of JSON on
 * stdout, `{ ok: true, capture }` or `{ ok: false, error }` (the
 * PageCaptureError's sentence), written to fd 1 directly: internal roles
 * never use process.stdout (shared/raw-stderr.ts). Exit code 0 either way
 * once the line is written.
 */

import { writeSync } from "node:fs";
import { systemValue } from "../shared/config/environment.ts";
import { capturePage, type CaptureOptions } from "./browser.ts";

export interface CaptureJob {
  target: string;
  chromium: string;
  dir: string;
  name: string;
  cwd: string;
}

export async function capturePageMain(argv: string[]): Promise<void> {
  let line: string;
  try {
    const job = JSON.parse(argv[0] ?? "") as CaptureJob;
    const proxy = systemValue("HTTPS_PROXY") ?? systemValue("HTTP_PROXY");
    const opts: CaptureOptions = { chromium: job.chromium, dir: job.dir, name: job.name, cwd: job.cwd, chromiumSandbox: false, ...(proxy ? { proxy } : {}) };
    line = JSON.stringify({ ok: true, capture: await capturePage(job.target, opts) });
  } catch (e) {
    line = JSON.stringify({ ok: false, error: e instanceof Error ? e.message : String(e) });
  }
  writeSync(1, line + "\n");
  process.exit(0);
}
