/**
 * Types and checking with nothing but the binary (docs/design/types-and-check.md):
 * `atomic init` and `atomic types` write the SDK's declarations, a tsconfig
 * and an example workflow that the project's own `tsc --noEmit` accepts;
 * `atomic check` type-checks with the compiler inside the binary, in a temp
 * dir with no node_modules above it, HOME an empty dir and no network;
 * `atomic run --check`; and errors thrown by workflow code name the user's
 * file, line and column.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, makeTempDir, runCommand, unprivilegedRunner } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const TSC = join(ROOT, "node_modules", ".bin", "tsc");

/** The binary with HOME (and so its compiler cache) in an empty temp dir of its own, run in `cwd`. */
function atomicIn(cwd: string) {
  const home = makeTempDir("atomic-check-home-");
  return (args: string[], prefix: string[] = []) =>
    prefix.length
      ? runCommand([...prefix, join(ROOT, "dist", "atomic"), ...args], { cwd, env: { NO_COLOR: "1", HOME: home, ATOMIC_HOME: join(home, ".atomic"), XDG_CACHE_HOME: undefined } })
      : runAtomic(args, { home: join(home, ".atomic"), cwd, env: { HOME: home, XDG_CACHE_HOME: undefined } });
}

/** The example with a type error on a line of its own: returns that line's number. */
function breakExample(dir: string, to: string): number {
  const lines = readFileSync(join(dir, ".atomic/workflows/summarize.ts"), "utf8").split("\n");
  const at = lines.findIndex((l) => l.includes("const { file, points } = ctx.inputs;")) + 1;
  lines.splice(at, 0, "    const wrong: string = points;");
  writeFileSync(join(dir, to), lines.join("\n"));
  return at + 1;
}

e2eTest("init in an empty directory: declarations, tsconfig and example; the project's tsc passes on them and names file:line:col of a type error", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  const r = await atomic(["init"]);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain("wrote .atomic/types/atomic.d.ts");
  expect(r.stdout).toContain("wrote tsconfig.json");
  expect(r.stdout).toContain("wrote .atomic/workflows/summarize.ts");
  expect(r.stdout).toContain("wrote .atomic/workflows/summarize.test.ts");
  const dts = readFileSync(join(dir, ".atomic/types/atomic.d.ts"), "utf8");
  expect(dts).toContain('declare module "atomic" {');
  // files of the user's project: the user's umask, not atomic's private one
  expect(statSync(join(dir, "tsconfig.json")).mode & 0o044).toBe(0o044);

  // the project's tsc passes on the example and its test (bun:test and atomic/testing come from the one file)
  const ok = await runCommand([TSC, "--noEmit"], { cwd: dir });
  expect(ok.stdout + ok.stderr).toBe("");
  expect(ok.code).toBe(0);
  // and the example's test passes, run by the binary alone
  const tested = await atomic(["test", ".atomic/workflows"]);
  expect(tested.stdout + tested.stderr).toContain(" 1 pass");
  expect(tested.code).toBe(0);
  // the example's test beside it is no workflow: `atomic workflows` lists the example alone
  const listed = (await atomic(["--json", "workflows"])).stdout.trim().split("\n").map((l) => JSON.parse(l) as { file: string | null; error: string | null });
  expect(listed.filter((w) => w.file !== null)).toEqual([expect.objectContaining({ file: ".atomic/workflows/summarize.ts", error: null })]);

  // One more tsc over four files at once (each file's errors are its own; one tsc start instead of four):
  // a type error in a workflow, named at its file:line:col;
  const line = breakExample(dir, ".atomic/workflows/broken.ts");
  // "atomic/testing" resolves from the same file: testRun's options are typed (crashAt is a stage or step name),
  // a sound use passes and a wrong one is flagged;
  const testing = 'import { testRun } from "atomic/testing";\nimport summarize from "./.atomic/workflows/summarize.ts";\n';
  writeFileSync(join(dir, "uses-testing.ts"), `${testing}export const run = testRun(summarize, { inputs: { file: "README.md" }, agents: { summarize: "{}" }, crashAt: "summarize" });\n`);
  writeFileSync(join(dir, "mistyped-testing.ts"), `${testing}export const run = testRun(summarize, { crashAt: 3 });\n`);
  // a misuse of the SDK's types is flagged too: a stage option that does not exist.
  writeFileSync(join(dir, "misuse.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "m", async run(ctx) { return ctx.task("s", { promt: "hi" }); } });\n');
  const bad = await runCommand([TSC, "--noEmit"], { cwd: dir });
  expect(bad.code).not.toBe(0);
  expect(bad.stderr).toBe("");
  expect(bad.stdout).toContain(`.atomic/workflows/broken.ts(${line},11): error TS2322: Type 'number' is not assignable to type 'string'.`);
  expect(bad.stdout).toMatch(/mistyped-testing\.ts\(3,\d+\): error TS2322: Type 'number' is not assignable to type 'string'/);
  expect(bad.stdout).toMatch(/misuse\.ts\(2,\d+\): error TS2561: .*'promt'/);
  // those three and nothing else: the sound use of atomic/testing passes
  expect(bad.stdout.split("\n").filter((l) => / error TS\d+:/.test(l)).map((l) => l.split("(")[0]).sort()).toEqual([".atomic/workflows/broken.ts", "mistyped-testing.ts", "misuse.ts"]);
});

e2eTest("init beside an existing tsconfig leaves it byte-identical and prints the lines to add; types rewrites the declarations", async () => {
  const dir = makeTempDir();
  const mine = '{ "compilerOptions": { "strict": false } }\n';
  writeFileSync(join(dir, "tsconfig.json"), mine);
  const atomic = atomicIn(dir);
  const r = await atomic(["init"]);
  expect(r.code).toBe(0);
  expect(readFileSync(join(dir, "tsconfig.json"), "utf8")).toBe(mine);
  expect(r.stdout).toContain("kept tsconfig.json");
  expect(r.stdout).toContain('"include": ["**/*.ts", ".atomic/**/*.ts"]');
  // the example is not overwritten by a second init either
  writeFileSync(join(dir, ".atomic/workflows/summarize.ts"), "// mine\n");
  expect((await atomic(["init"])).stdout).toContain("kept .atomic/workflows/summarize.ts");
  expect(readFileSync(join(dir, ".atomic/workflows/summarize.ts"), "utf8")).toBe("// mine\n");

  const dts = join(dir, ".atomic/types/atomic.d.ts");
  const fresh = readFileSync(dts, "utf8");
  writeFileSync(dts, "// an older atomic's declarations\n");
  const t = await atomic(["types"]);
  expect(t.code).toBe(0);
  expect(t.stdout).toMatch(/^wrote \.atomic\/types\/atomic\.d\.ts: the declarations of atomic \S+'s SDK\n$/);
  expect(readFileSync(dts, "utf8")).toBe(fresh);
});

e2eTest("init in a directory it cannot write: one sentence, a hint, exit 2", async () => {
  const base = makeTempDir();
  const runner = await unprivilegedRunner(base);
  const ro = join(base, "readonly");
  mkdirSync(ro);
  chmodSync(ro, 0o555);
  // as root (who writes anywhere) the binary runs as nobody; a path under a plain file fails for anyone
  const file = join(base, "plain");
  writeFileSync(file, "");
  const targets = runner ? [ro, join(file, "sub")] : [join(file, "sub")];
  for (const target of targets) {
    const r = runner
      ? await runCommand([...runner.prefix, runner.bin, "init", target], { cwd: base, env: { NO_COLOR: "1", HOME: base, ATOMIC_HOME: join(base, "home") } })
      : await atomicIn(base)(["init", target]);
    const err = expectOneSentenceError(r.stderr);
    expect(err.message).toMatch(/^cannot write to /);
    expect(err.hint).toContain("atomic init DIR");
    expect(r.code).toBe(2);
  }
  expect(existsSync(join(ro, ".atomic"))).toBe(false);
});

e2eTest("check with no node_modules anywhere, HOME empty and no network: ok for the example, file:line:col for a type error, exit 1", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  expect((await atomic(["init"])).code).toBe(0);
  const line = breakExample(dir, "broken.ts");
  // a workflow that uses Bun's and Node's APIs checks too (the binary carries their types)
  writeFileSync(join(dir, "bun-apis.ts"), 'import { workflow, v } from "atomic";\nimport { join } from "node:path";\nexport default workflow({ name: "io", inputs: { dir: v.string() }, async run(ctx) {\n  const path = join(ctx.inputs.dir, "x.txt");\n  await ctx.tool("write", { path }, () => Bun.write(path, process.cwd()));\n  return { path };\n} });\n');
  expect(existsSync(join(dir, "node_modules"))).toBe(false);
  const offline = process.getuid?.() === 0 ? ["unshare", "--net"] : ["unshare", "--net", "--map-root-user"];

  const ok = await atomic(["check", ".atomic/workflows/summarize.ts", "bun-apis.ts"], offline);
  expect(ok.stderr).toBe("");
  expect(ok.stdout).toBe("ok: workflow summarize (inputs file: string, points: number optional)\nok: workflow io (inputs dir: string)\n");
  expect(ok.code).toBe(0);

  const bad = await atomic(["check", "broken.ts", ".atomic/workflows/summarize.ts"], offline);
  expect(bad.stdout).toBe(`broken.ts:${line}:11: Type 'number' is not assignable to type 'string'. (TS2322)\nok: workflow summarize (inputs file: string, points: number optional)\n`);
  expect(expectOneSentenceError(bad.stderr).message).toBe("1 error in broken.ts.");
  expect(bad.code).toBe(1);
});

e2eTest("check of a non-workflow module, a syntax error and a missing import: the reason, exit 1; a missing or non-code file: exit 2", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  writeFileSync(join(dir, "plain.ts"), "export const x = 1;\n");
  writeFileSync(join(dir, "syntax.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "s", async run() { return { a: 1 ; } } });\n');
  writeFileSync(join(dir, "missing.ts"), 'import { workflow } from "atomic";\nimport { y } from "./nothere.ts";\nexport default workflow({ name: "m", async run() { return { y }; } });\n');
  writeFileSync(join(dir, "notes.txt"), "hello\n");
  const cases: [string, RegExp][] = [
    ["plain.ts", /^plain\.ts: it does not export a workflow as its default export \(end the file with: export default workflow/],
    ["syntax.ts", /^syntax\.ts:2:\d+: '[,}]' expected\. \(TS1005\)$/m],
    ["missing.ts", /^missing\.ts:2:19: Cannot find module '\.\/nothere\.ts'/],
  ];
  for (const [file, expected] of cases) {
    const r = await atomic(["check", file]);
    expect(r.stdout).toMatch(expected);
    expect(expectOneSentenceError(r.stderr).hint).toContain("atomic check again");
    expect(r.code).toBe(1);
  }
  for (const [args, message] of [
    [["check", "absent.ts"], /workflow file absent\.ts does not exist/],
    [["check", "notes.txt"], /notes\.txt is not a TypeScript or JavaScript file/],
    [["check"], /FILE/],
  ] as const) {
    const r = await atomic([...args]);
    expect(expectOneSentenceError(r.stderr).message).toMatch(message);
    expect(r.code).toBe(2);
  }
});

e2eTest("run --check refuses a workflow with a type error before anything is recorded, and runs a sound one", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  writeFileSync(join(dir, "typed.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "typed", async run(ctx) {\n  const n: number = "x";\n  return { n };\n} });\n');
  writeFileSync(join(dir, "sound.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "sound", async run(ctx) {\n  return { n: await ctx.tool("one", {}, () => 1) };\n} });\n');
  const bad = await atomic(["run", "--check", "typed.ts"]);
  expect(bad.stdout).toBe("typed.ts:3:9: Type 'string' is not assignable to type 'number'. (TS2322)\n");
  expect(bad.code).toBe(1);
  const runs = await atomic(["runs", "--json"]);
  expect(runs.stdout).toBe("");
  const good = await atomic(["run", "--check", "sound.ts", "--quiet"]);
  expect(good.code).toBe(0);
  expect(JSON.parse(good.stdout)).toEqual({ n: 1 });
});

e2eTest("errors thrown by workflow code name the user's file, line and column", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  cpSync(join(ROOT, "test/e2e/fixtures/places"), dir, { recursive: true });
  for (const [file, place] of [
    ["in-run.ts", "in-run.ts:9:51"], // a throw in run(), after a comment header and type-only lines
    ["in-tool.ts", "in-tool.ts:8:44"], // inside a ctx.tool function
    ["in-helper.ts", "helper.ts:4:24"], // in a module the workflow imports
    ["bad-call.ts", "bad-call.ts:7:15"], // atomic refusing a ctx call: the call's place
    ["crlf.ts", "crlf.ts:8:15"], // CRLF line ends
  ] as const) {
    const r = await atomic(["run", file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`[( ]at ${place.replaceAll(".", "\\.")}\\)`));
  }
  const load = await atomic(["run", "top-level.ts"]);
  expect(expectOneSentenceError(load.stderr).message).toMatch(/^could not load top-level\.ts at line 6, column \d+: /);
  expect(load.code).toBe(2);
});

e2eTest("the unpacked compiler: two first checks at once both succeed; an altered copy is unpacked again, never run", async () => {
  const dir = makeTempDir();
  const home = makeTempDir("atomic-check-home-");
  const check = () => runAtomic(["check", "sound.ts"], { home: join(home, ".atomic"), cwd: dir, env: { HOME: home, XDG_CACHE_HOME: join(home, "cache") } });
  writeFileSync(join(dir, "sound.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "sound", async run() { return {}; } });\n');
  const both = await Promise.all([check(), check()]);
  for (const r of both) expect([r.code, r.stdout]).toEqual([0, "ok: workflow sound (no inputs)\n"]);
  const cache = join(home, "cache", "atomic");
  const unpacked = readdirSync(cache).filter((f) => f.startsWith("typescript-"));
  expect(unpacked).toHaveLength(1); // no half-written or leftover folder
  const tsc = join(cache, unpacked[0]!, "tsc");
  const marker = join(dir, "ran");
  writeFileSync(tsc, `#!/bin/sh\ntouch ${marker}\n`);
  const again = await check();
  expect([again.code, again.stdout]).toEqual([0, "ok: workflow sound (no inputs)\n"]);
  expect(existsSync(marker)).toBe(false);
  expect(statSync(tsc).size).toBeGreaterThan(1_000_000);
});

e2eTest("every builtin's source (Bun, process and node: APIs included) passes atomic check; a browser global does not", async () => {
  const dir = makeTempDir();
  const atomic = atomicIn(dir);
  const names = (await atomic(["workflows", "--json"])).stdout.trim().split("\n").map((l) => JSON.parse(l) as { name: string; builtin: boolean }).filter((w) => w.builtin).map((w) => w.name);
  expect(names.length).toBeGreaterThan(5);
  for (const name of names) writeFileSync(join(dir, `${name}.ts`), (await atomic(["workflows", name, "--source"])).stdout);
  const r = await atomic(["check", ...names.map((n) => `${n}.ts`)]);
  expect(r.stderr).toBe("");
  expect(r.stdout.trim().split("\n").map((l) => l.replace(/ \(.*$/, ""))).toEqual(names.map((n) => `ok: workflow ${n}`));
  writeFileSync(join(dir, "browser.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "b", async run() { return { t: document.title }; } });\n');
  const browser = await atomic(["check", "browser.ts"]);
  expect(browser.stdout).toMatch(/^browser\.ts:2:\d+: Cannot find name 'document'/);
  expect(browser.code).toBe(1);
});
