/**
 * The shared rate-limit store (runners/rate-limits.ts) across real
 * processes: a back-off recorded by one process holds back another's next
 * call until its end; during the calm after it, a second process's call
 * waits for the first one's answer to start (the lock); a store that cannot
 * be written never fails a call.
 */

import { afterEach, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BUN, ROOT, killSpawned } from "../helpers/atomic.ts";
import { lineWatcher, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { rateLimitsFor } from "../../src/runners/rate-limits.ts";

const children: ReturnType<typeof Bun.spawn>[] = [];
afterEach(async () => {
  for (const c of children) c.kill("SIGKILL");
  await Promise.all(children.map((c) => c.exited));
  children.length = 0;
  await killSpawned();
  removeTempDirs();
});

/** Another process using the store of `home`: runs `body` with `limits` and `key` in scope. */
function other(home: string, body: string) {
  const code = `import { rateLimitsFor } from ${JSON.stringify(join(ROOT, "src/runners/rate-limits.ts"))};
const limits = rateLimitsFor(${JSON.stringify(join(home, "artifacts", "run1", "s"))})!;
const key = limits.key("http://127.0.0.1:1/v1", "m");
${body}`;
  const p = Bun.spawn([BUN, "-e", code], { stdout: "pipe", stderr: "inherit", stdin: "pipe" });
  children.push(p);
  return p;
}

test("a back-off recorded by one process holds back another's call until it ends; then calls go one at a time", async () => {
  const home = makeTempDir("atomic-rl-home-");
  const limits = rateLimitsFor(join(home, "artifacts", "run0", "stage"))!;
  const key = limits.key("http://127.0.0.1:1/v1", "m");
  expect(limits.waitMs(key)).toBe(0);
  const writer = other(home, "limits.backOff(key, 700);");
  expect(await writer.exited).toBe(0);
  const { until } = JSON.parse(readFileSync(join(home, "rate-limits", `${key}.json`), "utf8")) as { until: number };
  expect(limits.waitMs(key)).toBeGreaterThan(0);
  const release = await limits.acquire(key);
  expect(Date.now()).toBeGreaterThanOrEqual(until);
  // The calm: this process holds the key's lock; the other one's call waits for its release.
  // It says "held" after each wait for the lock: twice means it found the lock held twice in a row.
  const waiter = other(home, `const release = await limits.acquire(key, undefined, () => console.log("held")); console.log("got"); release();`);
  const out = lineWatcher(waiter.stdout as ReadableStream<Uint8Array>);
  await waitUntil(() => out.lines.filter((l) => l === "held").length >= 2, 30_000, "the other process to find the lock held twice");
  expect(out.lines).not.toContain("got");
  release();
  await out.waitFor(/got/);
  expect(await waiter.exited).toBe(0);
});

test("a store that cannot be written shares nothing and fails nothing; a runner outside any home has none", async () => {
  const home = makeTempDir("atomic-rl-home-");
  writeFileSync(join(home, "rate-limits"), ""); // a file where the directory would be
  const limits = rateLimitsFor(join(home, "artifacts", "run0", "stage"))!;
  const key = limits.key("http://x/v1", "m");
  limits.backOff(key, 60_000);
  expect(limits.waitMs(key)).toBe(0);
  (await limits.acquire(key))();
  expect(rateLimitsFor("/somewhere/else", {})).toBeUndefined();
});
