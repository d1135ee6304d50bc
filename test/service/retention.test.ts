/**
 * The service applies the retention setting (issue 17): with
 * `retention.olderThan` in the home's config, `atomic serve` deletes the
 * finished runs older than that when it becomes the active service (and
 * daily after), logs what it freed, and leaves other runs alone. Through
 * dist/atomic.
 */

import { expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { newSetup, serviceCleanup, startService } from "./support.ts";

serviceCleanup();

const EFFECTS = join(import.meta.dir, "..", "e2e", "fixtures", "effects.ts");

test("the service deletes finished runs older than retention.olderThan and says what it freed", async () => {
  const s = newSetup();
  const out = join(s.home, "effects.txt");
  for (let i = 0; i < 2; i++) {
    const r = await runAtomic(["run", EFFECTS, "--input", `out=${out}`], { home: s.home });
    expect(r.code).toBe(0);
  }
  const failed = await runAtomic(["run", join(import.meta.dir, "..", "e2e", "fixtures", "fails.ts")], { home: s.home });
  expect(failed.code).toBe(1);
  writeFileSync(join(s.home, "config.json"), JSON.stringify({ retention: { olderThan: "0s", status: ["completed"] } }));
  const service = startService(s);
  const [event] = (await waitUntil(() => (service.events("retention").length ? service.events("retention") : undefined), 60_000, "the retention pass")) as Record<string, unknown>[];
  expect(event!.runs).toBe(2);
  expect(String(event!.message)).toContain("retention deleted 2 run(s)");
  const runs = await runAtomic(["runs", "--json"], { home: s.home });
  expect(runs.stdout.trim().split("\n").map((l) => (JSON.parse(l) as { status: string }).status)).toEqual(["failed"]);
  expect(readFileSync(out, "utf8").split("\n").filter(Boolean)).toHaveLength(8);
}, 120_000);

test("a retention setting that is not an age is refused in one sentence naming the key", async () => {
  const s = newSetup();
  writeFileSync(join(s.home, "config.json"), JSON.stringify({ retention: { olderThan: "3x" } }));
  const r = await runAtomic(["serve", "--port", "0"], { home: s.home, timeoutMs: 30_000 });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain('"retention.olderThan" in');
  expect(r.stderr).toContain("must be an age like 90m, 12h, 30d or 2w");
});
