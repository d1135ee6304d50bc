/**
 * `--input` conversion through the real binary: ISO dates for `v.date()`
 * (a Date on the first run and on resume), decimal numbers only, repeated
 * keys refused unless the input is an array (then they accumulate), and a
 * workflow file that is not TypeScript/JavaScript refused before it runs.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, journalCounts, listRuns, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const DATED = fixture("dated.ts");

async function refused(args: string[], home: string, message: RegExp): Promise<void> {
  const r = await runAtomic(args, { home });
  expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
  expect(expectOneSentenceError(r.stderr).message).toMatch(message);
}

e2eTest("a v.date() input takes an ISO date, and the workflow gets a Date, also on resume", async () => {
  const home = makeTempDir();
  const ok = await runAtomic(["run", DATED, "--input", "when=2026-12-01", "--json"], { home });
  expect(ok.stderr).toBe("");
  expect(ok.code).toBe(0);
  const result = JSON.parse(ok.stdout.trim().split("\n").at(-1)!) as { outputs: unknown };
  expect(result.outputs).toMatchObject({ isDate: true, iso: "2026-12-01T00:00:00.000Z" });

  const zoned = await runAtomic(["run", DATED, "--input", "when=2026-12-01T10:30:00+02:00", "--json"], { home });
  expect(zoned.code).toBe(0);
  expect(JSON.parse(zoned.stdout.trim().split("\n").at(-1)!)).toMatchObject({ outputs: { iso: "2026-12-01T08:30:00.000Z" } });

  for (const bad of ["2026-02-30", "yesterday", "12/01/2026", "2026-12-01T25:00"]) {
    await refused(["run", DATED, "--input", `when=${bad}`], home, /^input "when" must be an ISO 8601 date/);
  }

  // Resumed, the stored input (JSON text) is a Date again.
  const dir = makeTempDir();
  const gate = join(dir, "gate");
  const failed = await runAtomic(["run", DATED, "--input", "when=2026-12-01"], { home, env: { GATE: gate } });
  expect(failed.code).toBe(1);
  const id = (await listRuns(home))[0]!.id as string;
  writeFileSync(gate, "");
  const resumed = await runAtomic(["resume", id, "--json"], { home });
  expect(resumed.code).toBe(0);
  expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!)).toMatchObject({ outputs: { isDate: true, iso: "2026-12-01T00:00:00.000Z" } });
});

e2eTest("numbers are decimal: 0x10, 0o7, 0b1, 007, Infinity and padded text are refused", async () => {
  const home = makeTempDir();
  for (const bad of ["0x10", "0o7", "0b1", "007", "Infinity", " 3", "1_000", ""]) {
    await refused(["run", DATED, "--input", "when=2026-12-01", "--input", `n=${bad}`], home, /^input "n" must be a (decimal )?number/);
  }
  await refused(["run", DATED, "--input", "when=2026-12-01", "--input", "n=0x10"], home, /^input "n" must be a decimal number \(like 16, -1\.5 or 1e3\), got "0x10"\.$/);
  expect(journalCounts(home).runs).toBe(0);
  for (const [text, value] of [["-1.5", -1.5], ["1e3", 1000], ["0", 0], ["42", 42]] as const) {
    const r = await runAtomic(["run", DATED, "--input", "when=2026-12-01", "--input", `n=${text}`, "--json"], { home });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!)).toMatchObject({ outputs: { n: value } });
  }
});

e2eTest("a repeated --input is refused unless the input is an array, whose values accumulate", async () => {
  const home = makeTempDir();
  await refused(["run", DATED, "--input", "when=2026-12-01", "--input", "n=1", "--input", "n=2"], home, /^input "n" is given twice\.$/);
  await refused(["run", DATED, "--input", "when=2026-12-01", "--input", "when=2026-12-02"], home, /^input "when" is given twice\.$/);
  await refused(["run", DATED, "--input", "when=2026-12-01", "--input", "counts=1", "--input", "counts=x"], home, /^input "counts" must be a number, got "x"/);
  expect(journalCounts(home).runs).toBe(0);
  const r = await runAtomic(
    ["run", DATED, "--input", "when=2026-12-01", "--input", "tags=a", "--input", "tags=b c", "--input", "counts=1", "--input", "counts=[2,3]", "--json"],
    { home },
  );
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!)).toMatchObject({ outputs: { tags: ["a", "b c"], counts: [1, 2, 3] } });
});

e2eTest("a workflow file that is not TypeScript or JavaScript is refused before anything runs", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const marker = join(dir, "ran");
  const files: Record<string, string> = {
    "flow.json": `{"name": "x"}`,
    "flow.txt": `require("fs").writeFileSync(${JSON.stringify(marker)}, "")`,
    "flow.sh": `touch ${marker}`,
    flow: `require("fs").writeFileSync(${JSON.stringify(marker)}, ""); export default 1;`,
  };
  for (const [name, text] of Object.entries(files)) {
    const path = join(dir, name);
    writeFileSync(path, text);
    await refused(["run", path], home, /is not a TypeScript or JavaScript file\.$/);
    const r = await runAtomic(["workflows", "--inputs", path], { home });
    expect(r.code).toBe(2);
  }
  expect(await Bun.file(marker).exists()).toBe(false);
  expect(journalCounts(home).runs).toBe(0);
});
