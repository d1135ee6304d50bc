/**
 * `atomic test` through the binary: a user's test file (fixtures/review-test.ts,
 * copied as review.test.ts) that scripts two agents, a sleep of 30 days, an
 * ask and a crash then resume passes with bun test's summary and exit 0; a
 * wrong expectation fails with exit 1; no test files is one sentence, a
 * hint and exit 2. The directory has no node_modules and HOME is empty:
 * "atomic" and "atomic/testing" come from the binary.
 */

import { afterEach, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const FIXTURES = join(import.meta.dir, "fixtures");

afterEach(() => removeTempDirs());

function project(): { dir: string; home: string } {
  const dir = makeTempDir("atomic-test-cmd-");
  copyFileSync(join(FIXTURES, "review.ts"), join(dir, "review.ts"));
  copyFileSync(join(FIXTURES, "review-test.ts"), join(dir, "review.test.ts"));
  const home = join(dir, ".home");
  mkdirSync(home);
  return { dir, home };
}

function kitCopies(): string[] {
  return readdirSync(tmpdir()).filter((n) => n.startsWith("atomic-test-kit-"));
}

test("a test of two agents, a 30-day sleep, an ask and a crash then resume passes", async () => {
  const { dir, home } = project();
  const before = kitCopies();
  const r = await runAtomic(["test"], { home, cwd: dir, env: { HOME: home } });
  const all = r.stdout + r.stderr;
  expect(all).toContain("(pass) two agents, 30 days of sleep, an answer, a crash and a resume");
  expect(all).toContain(" 1 pass");
  expect(all).toContain(" 0 fail");
  expect(r.code).toBe(0);
  // The kit's copy is gone with the command.
  expect(kitCopies()).toEqual(before);
});

test("a wrong expectation fails with bun test's summary and exit 1", async () => {
  const { dir, home } = project();
  const r = await runAtomic(["test", join(dir, "review.test.ts")], { home, cwd: dir, env: { HOME: home, WRONG: "1" } });
  const all = r.stdout + r.stderr;
  expect(all).toContain("(fail) two agents, 30 days of sleep, an answer, a crash and a resume");
  expect(all).toContain(' "Long."');
  expect(all).toContain(" 1 fail");
  expect(r.code).toBe(1);
});

test("no test files: one sentence, a hint, exit 2", async () => {
  const { home } = project();
  const empty = makeTempDir("atomic-test-empty-");
  const r = await runAtomic(["test", empty], { home, cwd: empty });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain(`no test files in ${empty}`);
  expect(r.stderr).toContain("hint: a test file is named like review.test.ts");
  expect(r.stderr).not.toContain("    at ");
});
