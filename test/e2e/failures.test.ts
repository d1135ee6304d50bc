/**
 * How failures read, through the real binary: an error thrown in workflow
 * code (or in a tool's function) names the user's file and line in its one
 * sentence, `--verbose` adds its stack; a failed stage's last stderr lines
 * are quoted under the failure line (run and show); and no internal class
 * name (StepFailedError) reaches a user, not even through `${err}` in
 * workflow code.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { STACK_LINE, cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, listRuns, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const THROWS = fixture("throws.ts");
const NOISY = fixture("stderr-fails.ts");
const INTERNAL = /StepFailedError|AtomicError|StageFailed|UsageError/;

e2eTest("an error thrown in workflow code names the file and line; --verbose prints its stack", async () => {
  const home = makeTempDir();
  const plain = await runAtomic(["run", THROWS], { home });
  expect(plain.code).toBe(1);
  expect(plain.stderr).toMatch(/^run \S+ failed: bad value 3 \(TypeError at \S*throws\.ts:6:\d+\)$/m);
  expect(plain.stderr).not.toMatch(STACK_LINE);

  const verbose = await runAtomic(["run", THROWS, "--verbose"], { home });
  expect(verbose.code).toBe(1);
  expect(verbose.stderr).toMatch(/^run \S+ failed: bad value 3 \(TypeError at \S*throws\.ts:6:\d+\)$/m);
  expect(verbose.stderr).toMatch(/^\s+TypeError: bad value 3$/m);
  expect(verbose.stderr).toContain(`at check (${THROWS}:6:`);
  expect(verbose.stderr).toContain(`(${THROWS}:15:`);

  const tool = await runAtomic(["run", THROWS], { home, env: { THROW_IN: "tool" } });
  expect(tool.code).toBe(1);
  expect(tool.stderr).toMatch(/^run \S+ failed: tool "lookup" failed after 1 attempt\(s\) \(TypeError: not retried\): bad value 7 \(TypeError at \S*throws\.ts:6:\d+\)$/m);

  // show names the place too, and --verbose there prints the recorded stack.
  const id = (await listRuns(home)).find((r) => (r.error as { message?: string } | null)?.message === "bad value 3")!.id as string;
  const show = await runAtomic(["show", id], { home });
  expect(show.stdout).toMatch(/^error\s+bad value 3 \(TypeError at \S*throws\.ts:6:\d+\)$/m);
  expect(show.stdout).not.toMatch(STACK_LINE);
  const showVerbose = await runAtomic(["show", id, "--verbose"], { home });
  expect(showVerbose.stdout).toContain(`at check (${THROWS}:6:`);
  const json = JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout) as { run: { error: { at: string } } };
  expect(json.run.error.at).toMatch(/throws\.ts:6:\d+$/);
  for (const r of [plain, verbose, tool, show]) expect(r.stdout + r.stderr).not.toMatch(INTERNAL);
});

e2eTest("a failed stage's last five stderr lines are quoted under its failure lines, in run and show", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", NOISY], { home });
  expect(r.code).toBe(1);
  const tail = ["err-line-3", "err-line-4", "err-line-5", "err-line-6", "err-line-7"];
  const quoted = (text: string) => text.split("\n").filter((l) => /^\s+stderr: /.test(l)).map((l) => l.replace(/^\s+stderr: /, ""));
  expect(r.stderr).toMatch(/^run \S+ failed: stage "noisy" failed: exited with code 3$/m);
  expect(quoted(r.stderr)).toEqual(tail);
  expect(r.stderr).not.toContain("err-line-2");
  // The progress lines (stdout) quote it where the stage failed.
  expect(r.stdout).toMatch(/stage noisy failed in \S+: exited with code 3\n {4}stderr: err-line-3\n/);
  const id = (await listRuns(home))[0]!.id as string;
  const show = await runAtomic(["show", id], { home });
  expect(quoted(show.stdout)).toEqual(tail);
  expect(r.stdout + r.stderr + show.stdout).not.toMatch(INTERNAL);
});

e2eTest("workflow code that prints or wraps an atomic error shows its sentence, not a class name", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", NOISY], { home, env: { CATCH: "1" } });
  expect(r.code).toBe(1);
  expect(r.stdout).toContain('caught: stage "noisy" failed: exited with code 3');
  expect(r.stderr).toMatch(/^run \S+ failed: wrapped: stage "noisy" failed: exited with code 3 \(at \S*stderr-fails\.ts:12:\d+\)$/m);
  expect(r.stdout + r.stderr).not.toMatch(INTERNAL);
});

e2eTest("a workflow file that throws while loading: the sentence names the line, --verbose prints the file's own stack", async () => {
  const home = makeTempDir();
  const file = join(makeTempDir(), "toplevel.ts");
  writeFileSync(file, 'import { workflow } from "atomic";\nconst x = 1;\nthrow new RangeError("top-level boom " + x);\nexport default workflow({ name: "tl", async run() {} });\n');
  const plain = await runAtomic(["run", file], { home });
  expect(plain.code).toBe(2);
  expect(expectOneSentenceError(plain.stderr).message).toMatch(/^could not load \S*toplevel\.ts at line 3, column 11: top-level boom 1\.$/);
  const verbose = await runAtomic(["run", file, "--verbose"], { home });
  expect(verbose.code).toBe(2);
  expect(verbose.stderr).toContain("RangeError: top-level boom 1\n");
  expect(verbose.stderr).toContain(`at ${file}:3:`);
  expect(verbose.stderr).not.toMatch(INTERNAL);
});
