/**
 * The binary carries everything it loads: run with the repository's
 * node_modules hidden (a tmpfs mounted over it in a mount namespace of the
 * test's own, so nothing outside the spawned process sees the change), it
 * still captures a page in headless Chromium. playwright-core, embedded in
 * the binary, used to read its package.json from the build machine's
 * node_modules when it loaded, so a page capture failed wherever that path
 * was missing: on a user's machine, and inside the capture's own sandbox
 * when the checkout lay under a hidden /tmp (scripts/build.ts says how both
 * files are now inlined).
 */

import { afterAll, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, atomicBin } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { heavyTest } from "../e2e/support.ts";

const CHROMIUM = Bun.which("chromium");
const UNSHARE = Bun.which("unshare");

afterAll(() => removeTempDirs());

heavyTest("a page capture works with the build machine's node_modules hidden from the binary", async () => {
  expect(CHROMIUM).not.toBeNull();
  expect(UNSHARE).not.toBeNull();
  const dir = makeTempDir("atomic-self-contained-");
  const page = join(dir, "page.html");
  writeFileSync(page, "<!doctype html><title>Self-contained</title><h1>hello</h1>");
  const job = JSON.stringify({ target: page, chromium: CHROMIUM, dir, name: "page", cwd: dir });
  const modules = join(ROOT, "node_modules");
  const proc = Bun.spawn(
    [UNSHARE!, "--mount", "--", "sh", "-c", 'mount -t tmpfs none "$1" && test -z "$(ls -A "$1")" && shift && exec "$@"', "sh", modules, atomicBin(), "--internal-capture-page", job],
    { stdout: "pipe", stderr: "pipe" },
  );
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
  const outcome = JSON.parse(stdout) as { ok: boolean; error?: string; capture?: { title: string; full: string } };
  expect(outcome.error).toBeUndefined();
  expect(outcome.ok).toBe(true);
  expect(outcome.capture!.title).toBe("Self-contained");
  expect(existsSync(outcome.capture!.full)).toBe(true);
}, 60_000);
