/**
 * Replay in CI, through dist/atomic: three runs exported (`atomic export`),
 * then replayed (`atomic replay`) against the workflow changed compatibly
 * (passes, exit 0) and incompatibly (exit 1, naming the step of each run);
 * `testRun(wf, { replay })` reads the same files. Bad input: a file that
 * is not an export, a file that is not there, a run whose workflow file
 * is gone.
 */

import { afterEach, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { testRun } from "../../src/testing/test-run.ts";
import { loadWorkflowFile } from "../../src/engine/loader.ts";

afterEach(() => removeTempDirs());

const WORKFLOW = `import { workflow, v } from "atomic";
export default workflow({
  name: "pricing",
  inputs: { n: v.number() },
  async run(ctx) {
    const listed = await ctx.shell("list", ["echo", String(ctx.inputs.n)]);
    const price = await ctx.tool("price", ctx.inputs.n, () => ctx.inputs.n * 10);
    await ctx.sleep(5, "settle");
    return { listed: listed.text.trim(), price };
  },
});
`;

async function recordThree(): Promise<{ dir: string; home: string; ids: string[]; files: string[] }> {
  const dir = makeTempDir("atomic-replay-");
  const home = join(dir, "home");
  writeFileSync(join(dir, "pricing.ts"), WORKFLOW);
  const ids: string[] = [];
  const files: string[] = [];
  for (const n of [1, 2, 3]) {
    const run = await runAtomic(["run", "pricing.ts", "--input", `n=${n}`, "--in-process", "--json"], { home, cwd: dir });
    expect(run.code).toBe(0);
    const id = /"runId":"([^"]+)"/.exec(run.stdout)![1]!;
    const exported = await runAtomic(["export", id], { home, cwd: dir });
    expect(exported.code).toBe(0);
    const file = join(dir, `run-${n}.json`);
    writeFileSync(file, exported.stdout);
    ids.push(id);
    files.push(file);
  }
  return { dir, home, ids, files };
}

test("three exported runs replay against a compatible change (exit 0) and not against an incompatible one (exit 1, naming the step)", async () => {
  const { dir, home, ids, files } = await recordThree();
  // Compatible: the tool's code changed, its name and arguments did not (recorded results are replayed).
  writeFileSync(join(dir, "pricing.ts"), WORKFLOW.replace("ctx.inputs.n * 10", "ctx.inputs.n * 11"));
  const ok = await runAtomic(["replay", ...files], { home, cwd: dir });
  expect(ok.stdout).toBe(files.map((f) => `${f}: ok, 3 recorded steps replayed, same outputs\n`).join(""));
  expect(ok.code).toBe(0);
  // Incompatible: the step is renamed. Replayed from the journal by id as well as from the files.
  writeFileSync(join(dir, "pricing.ts"), WORKFLOW.replace('"price"', '"quote"'));
  const bad = await runAtomic(["replay", files[0]!, ids[1]!, files[2]!], { home, cwd: dir });
  expect(bad.code).toBe(1);
  const lines = bad.stdout.trim().split("\n").filter((l) => !l.startsWith("  hint: "));
  expect(lines).toHaveLength(3);
  for (const [i, line] of lines.entries()) {
    expect(line).toContain(`diverged: run ${ids[i]} replayed differently at step 1: the workflow now asks for tool "quote", the journal recorded tool "price"`);
  }
  expect(bad.stdout).toContain("  hint: the change breaks runs recorded before it");
  // Nothing was written: the journal still has the three runs, completed.
  const runs = await runAtomic(["runs", "--json"], { home, cwd: dir });
  const listed = runs.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; status: string; lastSeq: number });
  expect(listed.map((r) => r.status)).toEqual(["completed", "completed", "completed"]);
  expect(listed.map((r) => r.id).sort()).toEqual([...ids].sort());
});

test("testRun replays an exported file: replayed, or diverged naming the step", async () => {
  const { dir, files } = await recordThree();
  const same = (await loadWorkflowFile(join(dir, "pricing.ts"))).definition;
  const r = await testRun(same, { replay: files[0]! });
  expect(r.status).toBe("replayed");
  expect(r.steps.map((s) => [s.kind, s.name])).toEqual([
    ["stage", "list"],
    ["tool", "price"],
    ["sleep", "settle"],
  ]);
  writeFileSync(join(dir, "changed.ts"), WORKFLOW.replace('"settle"', '"rest"').replace("ctx.sleep(5", "ctx.sleep(6"));
  const changed = (await loadWorkflowFile(join(dir, "changed.ts"))).definition;
  const d = await testRun(changed, { replay: JSON.parse(readFileSync(files[1]!, "utf8")) });
  expect(d.status).toBe("diverged");
  expect(d.error?.message).toContain('at step 2: the workflow now asks for sleep "rest"');
});

test("bad input: not an export, no such file, a workflow file gone, nothing written", async () => {
  const { dir, home, files } = await recordThree();
  writeFileSync(join(dir, "other.json"), JSON.stringify({ hello: 1 }));
  const notExport = await runAtomic(["replay", "other.json"], { home, cwd: dir });
  expect(notExport.code).toBe(2);
  expect(notExport.stderr).toContain("other.json is not an atomic run export");
  expect(notExport.stderr).toContain("hint: make one with: atomic export RUN > run.json");
  const missing = await runAtomic(["replay", "nowhere.json"], { home, cwd: dir });
  expect(missing.code).toBe(2);
  expect(missing.stderr).toContain("nowhere.json is not a file");
  expect(missing.stderr).toContain("hint: write one with: atomic export RUN > run.json");
  rmSync(join(dir, "pricing.ts"));
  const gone = await runAtomic(["replay", files[0]!], { home, cwd: dir });
  expect(gone.code).toBe(2);
  expect(gone.stderr).toContain("of run");
  expect(gone.stderr).toContain("is gone");
  expect(gone.stderr).toContain("hint: name the file to replay it against: --workflow FILE");
  expect(gone.stderr).not.toContain("    at ");
});
