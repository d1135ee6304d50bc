/**
 * Builtin workflows, the infrastructure: sources under src/workflows/ import
 * only the SDK; through dist/atomic a builtin is listed, described (inputs
 * with ranges and defaults, outputs), printed (--source, from the text
 * embedded in the binary), overridden by a local file of its name (and the
 * list says so), and its inputs refused by range.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, makeTempDir } from "../e2e/support.ts";

const SRC = join(import.meta.dir, "..", "..", "src", "workflows");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

test("every builtin source imports nothing but the SDK", () => {
  const files = readdirSync(SRC).filter((f) => f.endsWith(".ts"));
  expect(files.length).toBeGreaterThanOrEqual(7);
  for (const f of files) {
    const text = readFileSync(join(SRC, f), "utf8");
    const specifiers = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;]*?\bfrom\s+["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']|\brequire\s*\(\s*["']([^"']+)["']|(?:^|\n)\s*import\s+["']([^"']+)["']/g)].map(
      (m) => m[1] ?? m[2] ?? m[3] ?? m[4],
    );
    expect({ f, specifiers }).toEqual({ f, specifiers: ["atomic"] });
  }
});

e2eTest("every builtin: atomic workflows NAME shows its inputs, outputs and stages; each stage name it declares is one its source starts", async () => {
  const home = makeTempDir("atomic-bi-home-");
  const cwd = makeTempDir("atomic-bi-cwd-");
  const names = readdirSync(join(import.meta.dir, "../../src/workflows")).map((f) => f.replace(/\.ts$/, ""));
  expect(names.length).toBe(10);
  for (const name of names) {
    const json = JSON.parse((await runAtomic(["workflows", name, "--json"], { home, cwd })).stdout) as { inputs: unknown[]; outputs: unknown[]; stages: { name: string; description: string }[] };
    expect({ name, inputs: json.inputs.length > 0, outputs: json.outputs.length > 0, stages: json.stages.length > 0 }).toEqual({ name, inputs: true, outputs: true, stages: true });
    const source = readFileSync(join(import.meta.dir, "../../src/workflows", `${name}.ts`), "utf8");
    for (const declared of json.stages.flatMap((st) => st.name.split(", "))) {
      // the literal part of the name, before a number or a placeholder (judge-<criterion>, verify-NN-…)
      const prefix = declared.split(/-(?:NN|N|K|<)/)[0]!;
      expect({ name, declared, found: source.includes(`"${prefix}`) || source.includes(`\`${prefix}`) }).toEqual({ name, declared, found: true });
    }
  }
  const text = await runAtomic(["workflows", "tournament"], { home, cwd });
  expect(text.stdout).toMatch(/\nstages:\n {2}attempt-N {2}the attempts, all at once, read-only\n {2}judge-<criterion> {2}one judge per criterion/);
});

e2eTest("atomic workflows lists the builtins; NAME shows inputs with ranges and outputs; --source prints the embedded file", async () => {
  const home = makeTempDir("atomic-bi-home-");
  const cwd = makeTempDir("atomic-bi-cwd-");
  const list = await runAtomic(["workflows"], { home, cwd });
  expect(list.code).toBe(0);
  expect(list.stdout).toMatch(/fan-out-and-synthesize\s+Split a task into partitions/);
  expect(list.stdout).toMatch(/loop-until-done\s+Work on a task in iterations/);
  expect(list.stdout).toMatch(/classify-and-act\s+Classify a request/);
  expect(list.stdout).toMatch(/generate-and-filter\s+Generate candidates in parallel/);
  expect(list.stdout).toMatch(/adversarial-verification\s+Answer a task, have verifiers attack/);
  expect(list.stdout).toMatch(/tournament\s+Run attempts in parallel, score them with one judge per criterion/);
  expect(list.stdout).toMatch(/open-claude-design\s+Interview, analyse, generate an HTML preview.*\(also: design\)/);
  expect(list.stdout).toMatch(/goal\s+Pursue an objective in turns on a git branch/);
  expect(list.stdout).toMatch(/ralph\s+Research, implement and review in loops/);
  const one = await runAtomic(["workflows", "fan-out-and-synthesize"], { home, cwd });
  expect(one.stdout).not.toContain("inputs:");
  expect(one.code).toBe(0);
  expect(one.stdout).toContain("max_branches: number optional, from 1 to 12 (default 4)");
  expect(one.stdout).toContain("max_concurrency: number optional, from 1 to 12 (default 4)");
  expect(one.stdout).toMatch(/outputs:\n(.*\n)*\s+synthesis: string/);
  const json = JSON.parse((await runAtomic(["workflows", "classify-and-act", "--json"], { home, cwd })).stdout);
  expect(json.builtin).toBe(true);
  expect(json.inputs.find((i: { name: string }) => i.name === "confidence_threshold")).toMatchObject({ range: "from 0.5 to 0.99", default: 0.75 });
  expect(json.inputs.find((i: { name: string }) => i.name === "categories")).toMatchObject({ range: "1 to 8 items", default: ["analysis", "implementation", "research"] });
  const source = await runAtomic(["workflows", "loop-until-done", "--source"], { home, cwd });
  expect(source.code).toBe(0);
  expect(source.stdout).toBe(readFileSync(join(SRC, "loop-until-done.ts"), "utf8"));
});

e2eTest("a local .atomic/workflows/<name>.ts wins over the builtin, and the list says so", async () => {
  const home = makeTempDir("atomic-bi-home-");
  const cwd = makeTempDir("atomic-bi-cwd-");
  mkdirSync(join(cwd, ".atomic", "workflows"), { recursive: true });
  writeFileSync(
    join(cwd, ".atomic", "workflows", "loop-until-done.ts"),
    `import { workflow } from "atomic";\nexport default workflow({ name: "my-loop", description: "mine", async run() { return { mine: true }; } });\n`,
  );
  const list = await runAtomic(["workflows"], { home, cwd });
  expect(list.stdout).toContain("overrides the builtin loop-until-done");
  expect(list.stdout).toContain("overridden by .atomic/workflows/loop-until-done.ts");
  const r = await runAtomic(["--json", "run", "loop-until-done"], { home, cwd });
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ mine: true });
});

e2eTest("inputs out of range are refused in one sentence, before anything is recorded", async () => {
  const home = makeTempDir("atomic-bi-home-");
  const cwd = makeTempDir("atomic-bi-cwd-");
  for (const [args, message] of [
    [["run", "fan-out-and-synthesize", "--input", "prompt=x", "--input", "max_branches=13"], 'input "max_branches" must be from 1 to 12, got 13'],
    [["run", "classify-and-act", "--input", "prompt=x", "--input", "confidence_threshold=0.2"], 'input "confidence_threshold" must be from 0.5 to 0.99, got 0.2'],
    [["run", "loop-until-done", "--input", "prompt=x", "--input", "max_iterations=0"], 'input "max_iterations" must be from 1 to 20, got 0'],
    [["run", "adversarial-verification", "--input", "task=x", "--input", "verifier_count=6"], 'input "verifier_count" must be from 1 to 5, got 6'],
    [["run", "adversarial-verification", "--input", "task=x", "--input", "accept_mean=21"], 'input "accept_mean" must be from 1 to 20, got 21'],
    [["run", "tournament", "--input", "prompt=x", "--input", "num_attempts=1"], 'input "num_attempts" must be from 2 to 8, got 1'],
    [["run", "design", "--input", "prompt=x", ...Array.from({ length: 11 }, (_, i) => ["--input", `references=r${i}`]).flat()], 'input "references" must be at most 10 items, got ["r0","r1","r2","r3","r4","r5","r6","r7","r8","r9","r10"]'],
  ] as const) {
    const r = await runAtomic([...args], { home, cwd });
    expect(r.code).toBe(2);
    expect(expectOneSentenceError(r.stderr).message).toBe(`${message}.`);
  }
  const runs = await runAtomic(["runs", "--json"], { home, cwd });
  expect(runs.stdout.trim()).toBe("");
});
