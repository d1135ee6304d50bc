/**
 * A workflow that calls the SDK wrongly, through dist/atomic: `atomic run`
 * says so in one sentence with a hint, no stack, and exits 2 (a usage
 * error, src/cli/drive.ts); the steps recorded before it stay recorded and
 * the run is failed, so a fixed file can be resumed with --upgrade.
 * (continueAsNew's misuse is in continue-as-new.test.ts.)
 */

import { afterAll, afterEach, expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

e2eTest("ctx.patched with an id used twice: one sentence and a hint, exit 2, the step before it kept", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("patched-twice.ts")], { home });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain('the patch id "v2" was already used in this run (ctx.patched asks each id once)');
  expect(r.stderr).toMatch(/^hint: /m);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  const runs = (await runAtomic(["--json", "runs"], { home })).stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; status: string });
  expect(runs.map((x) => x.status)).toEqual(["failed"]);
  const shown = JSON.parse((await runAtomic(["--json", "show", runs[0]!.id], { home })).stdout) as { steps?: { name: string; status: string }[] };
  expect(JSON.stringify(shown)).toContain('"first"');
});
