/**
 * captureInSandbox (src/sdk/capture-stage.ts) through dist/atomic and real
 * bubblewrap, when the capture's process dies before it writes its answer:
 * the "Chromium" here is a script that SIGKILLs the capture process that
 * started it (as the OOM killer would), so the stage's shell says "Killed"
 * on its stderr. The one sentence quotes that line and names the stage's
 * stderr.log, which holds it. A page on 127.0.0.1:3128, the port of the
 * sandbox's own proxy, gets as far as Chromium too: the network helper
 * inside takes another port for the proxy rather than dying on the second
 * listen (the stage exited 1 before its command ran, its stderr Bun's
 * "error: listen EADDRINUSE: address already in use 127.0.0.1:3128").
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WORKFLOW = join(import.meta.dir, "fixtures", "capture.ts");
const WHY = "Killed";

async function capture(target: string): Promise<{ error: string }> {
  const home = makeTempDir("atomic-capture-home-");
  const cwd = makeTempDir("atomic-capture-cwd-");
  writeFileSync(join(cwd, "page.html"), "<!doctype html><title>A page</title>\n");
  // playwright starts it as a child of the capture process, which it kills
  const chromium = join(cwd, "chromium");
  writeFileSync(chromium, "#!/bin/sh\nkill -KILL $PPID\n");
  chmodSync(chromium, 0o755);
  const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `target=${target}`, "--input", `chromium=${chromium}`, "--input", `dir=${join(cwd, "shots")}`], { home, cwd });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
}

e2eTest("a capture that dies before its answer: the sentence quotes its stderr's last line that says why and names the log", async () => {
  const out = await capture("page.html");
  const m = /^the capture of page\.html did not finish \(exited with code 137: (.*)\); see (\S+)\.$/.exec(out.error);
  expect(m?.slice(1)).toEqual([WHY, expect.stringMatching(/\/stderr\.log$/)]);
  expect(readFileSync(m![2]!, "utf8")).toContain(WHY);
});

e2eTest("a page on 127.0.0.1:3128, the sandbox proxy's own port, is tunnelled like any other: the capture gets as far as Chromium", async () => {
  const out = await capture("http://127.0.0.1:3128/page");
  expect(out.error).toMatch(new RegExp(`^the capture of http://127\\.0\\.0\\.1:3128/page did not finish \\(exited with code 137: ${WHY}\\); see \\S+/stderr\\.log\\.$`));
});
