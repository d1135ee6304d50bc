/**
 * Bad input through the real binary: each mistake a user can make gets one
 * `error: ...` sentence (plus an optional `hint: ...` line), no stack trace
 * unless --verbose, exit code 2, and leaves the journal as it was: no run,
 * event or lease row added, and a database atomic must not touch (corrupt,
 * newer schema) keeps its exact bytes.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import {
  STACK_LINE,
  cleanupNow,
  cleanupWhenIdle,
  e2eTest,
  expectOneSentenceError,
  fixture,
  journalCounts,
  listRuns,
  makeTempDir,
  runCommand,
  snapshotDir,
  unprivilegedRunner,
} from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const TYPED = fixture("typed.ts");
const GOOD_INPUTS = ["--input", "count=3", "--input", "level=low", "--input", "label=hi"];

/** A home holding one completed run of typed.ts. */
async function seededHome(): Promise<{ home: string; runId: string }> {
  const home = makeTempDir();
  const r = await runAtomic(["run", TYPED, ...GOOD_INPUTS], { home });
  expect(r.code).toBe(0);
  const [run] = await listRuns(home);
  return { home, runId: run!.id as string };
}

/** Runs atomic, expects exit 2 with one error sentence matching `message`, and returns the parts. */
async function expectUsageError(args: string[], home: string, message: RegExp, cwd?: string, env?: Record<string, string>) {
  const r = await runAtomic(args, { home, ...(cwd ? { cwd } : {}), ...(env ? { env } : {}) });
  const parts = expectOneSentenceError(r.stderr);
  expect(parts.message).toMatch(message);
  expect(r.stdout).toBe("");
  expect(r.code).toBe(2);
  return parts;
}

/** A fresh home stays without any run, event or lease. */
async function expectNothingWritten(home: string): Promise<void> {
  expect(journalCounts(home)).toEqual({ runs: 0, events: 0, leases: 0 });
  expect(await listRuns(home)).toEqual([]);
}

// ---------------------------------------------------------------- the workflow file

e2eTest("a missing workflow file is one sentence naming it, exit 2, nothing written", async () => {
  const home = makeTempDir();
  const parts = await expectUsageError(["run", "no-such-workflow.ts"], home, /no-such-workflow\.ts does not exist/);
  expect(parts.hint).toBeDefined();
  await expectNothingWritten(home);
});

e2eTest("a file with a syntax error names the file and the line", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const file = join(dir, "broken.ts");
  writeFileSync(
    file,
    ['import { workflow } from "atomic";', "", "export default workflow({", '  name: "broken",', "  async run(ctx) { const x = ; return x; },", "});", ""].join("\n"),
  );
  const parts = await expectUsageError(["run", file], home, /broken\.ts.*line 5/);
  expect(parts.hint).toMatch(/fix the file/);
  await expectNothingWritten(home);
});

e2eTest("a file without a default-exported workflow is refused", async () => {
  const home = makeTempDir();
  const parts = await expectUsageError(["run", fixture("no-default.ts")], home, /no-default\.ts does not export a workflow as its default export/);
  expect(parts.hint).toMatch(/export default workflow/);
  await expectNothingWritten(home);
});

// ---------------------------------------------------------------- inputs

const INPUT_CASES: { name: string; args: string[]; message: RegExp; hint?: RegExp }[] = [
  { name: "an unknown input", args: [...GOOD_INPUTS, "--input", "colour=red"], message: /no input named "colour"/, hint: /count, level, label, loud/ },
  { name: "a missing input", args: ["--input", "count=3", "--input", "level=low"], message: /input "label" is required/, hint: /--input label=/ },
  { name: "a non-number for a number input", args: ["--input", "count=many", "--input", "level=low", "--input", "label=x"], message: /input "count" must be a number, got "many"/ },
  { name: "a value outside a picklist", args: ["--input", "count=1", "--input", "level=medium", "--input", "label=x"], message: /input "level" must be one of "low", "high", got "medium"/ },
  { name: "a non-boolean for a boolean input", args: [...GOOD_INPUTS, "--input", "loud=maybe"], message: /input "loud" must be true or false, got "maybe"/ },
  { name: "an --input without =", args: [...GOOD_INPUTS, "--input", "count"], message: /--input "count" is not of the form key=value/ },
];

for (const c of INPUT_CASES) {
  e2eTest(`${c.name} is a usage error naming the key, nothing written`, async () => {
    const home = makeTempDir();
    const parts = await expectUsageError(["run", TYPED, ...c.args], home, c.message);
    expect(parts.hint).toMatch(c.hint ?? /atomic workflows --inputs/);
    await expectNothingWritten(home);
  });
}

e2eTest("--inputs-json: a missing file, a non-object, a mistyped value, a missing value", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const array = join(dir, "array.json");
  writeFileSync(array, "[1, 2, 3]\n");
  const notJson = join(dir, "not.json");
  writeFileSync(notJson, "count: 3\n");
  const mistyped = join(dir, "mistyped.json");
  writeFileSync(mistyped, JSON.stringify({ count: "three", level: "low", label: "x" }));
  const good = join(dir, "good.json");
  writeFileSync(good, JSON.stringify({ count: 3, level: "high", label: "x" }));
  await Promise.all([
    expectUsageError(["run", TYPED, "--inputs-json", join(dir, "absent.json")], home, /cannot read the inputs file .*absent\.json/),
    expectUsageError(["run", TYPED, "--inputs-json", array], home, /array\.json is not a JSON object/),
    expectUsageError(["run", TYPED, "--inputs-json", notJson], home, /not\.json is not a JSON object/),
    expectUsageError(["run", TYPED, "--inputs-json", mistyped], home, /input "count" is invalid/),
    expectUsageError(["run", TYPED, "--inputs-json"], home, /--inputs-json needs a value/),
    // --input converts and overrides what the file says, and is checked the same way
    expectUsageError(["run", TYPED, "--inputs-json", good, "--input", "level=max"], home, /input "level" must be one of/),
  ]);
  await expectNothingWritten(home);
});

// ---------------------------------------------------------------- the command line

e2eTest("an unknown option, an unknown command and a missing value are usage errors", async () => {
  const home = makeTempDir();
  await Promise.all([
    expectUsageError(["run", TYPED, ...GOOD_INPUTS, "--wrokers", "4"], home, /unknown option --wrokers for atomic run/),
    expectUsageError(["runs", "--colour"], home, /unknown option --colour for atomic runs/),
    expectUsageError(["frobnicate"], home, /unknown command "frobnicate"/),
    expectUsageError(["run"], home, /FILE/),
    expectUsageError(["show"], home, /RUN/),
    expectUsageError(["runs", "--limit"], home, /--limit needs a value/),
    expectUsageError(["logs", "0000", "--stage"], home, /--stage needs a value/),
    expectUsageError(["--home"], home, /--home needs a value/),
    expectUsageError(["--durability", "sometimes", "runs"], home, /--durability must be "full" or "normal"/),
  ]);
  await expectNothingWritten(home);
});

e2eTest("a bad ATOMIC_JOURNAL_RETRY_MS is refused on the SQLite journal too: one sentence and a hint, exit 2, nothing written", async () => {
  const home = makeTempDir();
  for (const value of ["soon", "-1", "0", "1e99"]) {
    const parts = await expectUsageError(["run", TYPED, ...GOOD_INPUTS], home, new RegExp(`^ATOMIC_JOURNAL_RETRY_MS must be a whole number of milliseconds from 1 to 86400000 \\(a day\\), got "${value}"\\.$`), undefined, { ATOMIC_JOURNAL_RETRY_MS: value });
    expect(parts.hint).toBe("for example ATOMIC_JOURNAL_RETRY_MS=15000 (the default), or unset it");
  }
  await expectNothingWritten(home);
});

e2eTest("a bad ATOMIC_HOST_LOST_MS is refused the same way: one sentence and a hint, exit 2, nothing written", async () => {
  const home = makeTempDir();
  for (const value of ["soon", "1999", "-1", "2.5e3", "86400001"]) {
    const parts = await expectUsageError(["run", TYPED, ...GOOD_INPUTS], home, new RegExp(`^ATOMIC_HOST_LOST_MS must be a whole number of milliseconds from 2000 \\(two heartbeats\\) to 86400000 \\(a day\\), got "${value}"\\.$`), undefined, { ATOMIC_HOST_LOST_MS: value });
    expect(parts.hint).toBe("for example ATOMIC_HOST_LOST_MS=10000 (the default), or unset it");
  }
  await expectNothingWritten(home);
});

// ---------------------------------------------------------------- run ids

e2eTest("an unknown run id is refused by show, logs, resume and cancel; nothing written", async () => {
  const { home } = await seededHome();
  const before = journalCounts(home);
  for (const cmd of ["show", "logs", "resume", "cancel"]) {
    const parts = await expectUsageError([cmd, "zzzzzzzzzz"], home, /no run with id zzzzzzzzzz/);
    expect(parts.hint).toMatch(/atomic runs/);
  }
  expect(journalCounts(home)).toEqual(before);
});

e2eTest("a prefix shared by two root runs is ambiguous", async () => {
  const { home, runId } = await seededHome();
  const second = await runAtomic(["run", TYPED, ...GOOD_INPUTS, "--quiet"], { home });
  expect(second.code).toBe(0);
  const ids = (await listRuns(home)).map((r) => String(r.id));
  expect(ids).toContain(runId);
  let common = 0;
  while (ids[0]![common] === ids[1]![common]) common++;
  expect(common).toBeGreaterThan(0); // ids start with the clock
  const ambiguous = await expectUsageError(["show", ids[0]!.slice(0, common)], home, /more than one run id starts with/);
  // both candidates are listed
  expect(ambiguous.hint).toContain(`did you mean`);
  for (const id of ids.slice(0, 2)) expect(ambiguous.hint).toContain(id);
});

e2eTest("a mistyped command or builtin name gets did-you-mean candidates", async () => {
  const home = makeTempDir();
  const [command, builtin, named, unlike] = await Promise.all([
    expectUsageError(["resme", "01m8rf"], home, /unknown command "resme"/),
    expectUsageError(["workflows", "--source", "ralf"], home, /no builtin workflow named "ralf"/),
    expectUsageError(["run", "fan-out-and-synthesise"], home, /workflow file fan-out-and-synthesise does not exist/),
    expectUsageError(["zzzzzzzzzz"], home, /unknown command "zzzzzzzzzz"/),
  ]);
  expect(command.hint).toMatch(/did you mean atomic resume\b/);
  expect(builtin.hint).toMatch(/did you mean ralph\?/);
  expect(named.hint).toMatch(/did you mean fan-out-and-synthesize\?/);
  expect(unlike.hint).toBe("see atomic --help");
  await expectNothingWritten(home);
});

e2eTest("resume or cancel of a completed run is refused; nothing written", async () => {
  const { home, runId } = await seededHome();
  const before = journalCounts(home);
  const resume = await expectUsageError(["resume", runId], home, new RegExp(`run ${runId} already completed`));
  expect(resume.hint).toMatch(new RegExp(`atomic show ${runId}`));
  await expectUsageError(["cancel", runId], home, new RegExp(`run ${runId} already completed`));
  expect(journalCounts(home)).toEqual(before);
  const [run] = await listRuns(home);
  expect(run!.status).toBe("completed");
});

e2eTest("logs of a stage the run does not have is refused", async () => {
  const { home, runId } = await seededHome();
  const parts = await expectUsageError(["logs", runId, "--stage", "nope"], home, /has no stage named "nope"/);
  expect(parts.hint).toMatch(new RegExp(`atomic show ${runId}`));
});

// ---------------------------------------------------------------- the database

e2eTest("a corrupt database file (not SQLite) is refused and left byte for byte", async () => {
  const home = makeTempDir();
  const db = join(home, "atomic.db");
  writeFileSync(db, Buffer.from("this is not a SQLite database, just some text\n".repeat(200)));
  const before = snapshotDir(home);
  for (const args of [["runs"], ["run", TYPED, ...GOOD_INPUTS], ["show", "0000"], ["runs", "--json"]]) {
    const r = await runAtomic(args, { home });
    expect(r.code).toBe(2);
    if (args.includes("--json")) {
      const [line, ...rest] = r.stdout.trim().split("\n");
      expect(rest).toEqual([]);
      expect(JSON.parse(line!)).toMatchObject({ type: "error", code: "storage_corrupt", exitCode: 2 });
      expect(r.stderr).toBe("");
    } else {
      const parts = expectOneSentenceError(r.stderr);
      expect(parts.message).toMatch(/atomic\.db is not an atomic database/);
      expect(parts.hint).toMatch(/--home/);
      expect(r.stdout).toBe("");
    }
  }
  expect(snapshotDir(home)).toEqual(before);
});

e2eTest("a database of another program (SQLite without our tables) is refused untouched", async () => {
  const home = makeTempDir();
  const path = join(home, "atomic.db");
  const db = new Database(path, { create: true });
  db.run("create table notes (body text)");
  db.run("insert into notes values ('mine')");
  db.close();
  const before = snapshotDir(home);
  const r = await runAtomic(["runs"], { home });
  expect(r.code).toBe(2);
  expect(expectOneSentenceError(r.stderr).message).toMatch(/not an atomic database/);
  expect(snapshotDir(home)).toEqual(before);
});

e2eTest("a database from a newer schema is refused and never altered", async () => {
  const home = makeTempDir();
  // A real journal (with one run), then stamped as written by a future version.
  const seed = await runAtomic(["run", TYPED, ...GOOD_INPUTS], { home });
  expect(seed.code).toBe(0);
  const db = new Database(join(home, "atomic.db"));
  db.run("update meta set value = '99' where key = 'schema_version'");
  db.close();
  const before = snapshotDir(home);
  for (const args of [["runs"], ["run", TYPED, ...GOOD_INPUTS], ["show", "0"], ["resume", "0"]]) {
    const r = await runAtomic(args, { home });
    const parts = expectOneSentenceError(r.stderr);
    expect(parts.message).toMatch(/schema version 99, newer than version \d+ that this atomic knows/);
    expect(parts.hint).toMatch(/upgrade atomic/);
    expect(r.code).toBe(2);
  }
  expect(snapshotDir(home)).toEqual(before);
});

e2eTest("--home on a read-only directory is one sentence, exit 2, nothing created", async () => {
  const base = makeTempDir();
  const runner = await unprivilegedRunner(base);
  if (!runner) {
    console.warn("skipped: no way to run as a user who cannot write a 0555 directory");
    return;
  }
  const workflowFile = join(base, "typed.ts");
  copyFileSync(TYPED, workflowFile);
  chmodSync(workflowFile, 0o644);
  const ro = join(base, "readonly-home");
  mkdirSync(ro);
  chmodSync(ro, 0o555);
  const atomic = (args: string[]) =>
    runCommand([...runner.prefix, runner.bin, ...args], { cwd: base, env: { NO_COLOR: "1", ATOMIC_HOME: undefined } });

  // the user can run the binary at all (so what follows is about the home, not permissions)
  expect((await atomic(["version"])).code).toBe(0);
  for (const args of [
    ["--home", ro, "runs"],
    ["--home", ro, "run", workflowFile, ...GOOD_INPUTS],
    ["--home", join(ro, "sub"), "runs"],
  ]) {
    const r = await atomic(args);
    const parts = expectOneSentenceError(r.stderr);
    expect(parts.message).toMatch(/cannot (write the journal|create the atomic home)/);
    expect(parts.hint).toMatch(/writable --home/);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
  }
  // a bad input is still reported as such before the home is touched
  const bad = await atomic(["--home", ro, "run", workflowFile, "--input", "count=x"]);
  expect(expectOneSentenceError(bad.stderr).message).toMatch(/input "count" must be a number/);
  expect(readdirSync(ro)).toEqual([]);
});

// ---------------------------------------------------------------- --verbose and --json

e2eTest("--verbose adds the stack trace; without it there is none", async () => {
  const home = makeTempDir();
  const plain = await runAtomic(["run", TYPED, "--input", "count=many"], { home });
  expect(plain.code).toBe(2);
  expect(plain.stderr).not.toMatch(STACK_LINE);
  const verbose = await runAtomic(["run", TYPED, "--input", "count=many", "--verbose"], { home });
  expect(verbose.code).toBe(2);
  expect(verbose.stderr).toMatch(/^error: input "count" must be a number/m);
  expect(verbose.stderr).toMatch(STACK_LINE);
});

e2eTest("with --json an error is one JSON object on stdout and nothing on stderr", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["--json", "run", TYPED, "--input", "level=medium"], { home });
  expect(r.code).toBe(2);
  expect(r.stderr).toBe("");
  const lines = r.stdout.trim().split("\n");
  expect(lines).toHaveLength(1);
  expect(JSON.parse(lines[0]!)).toMatchObject({ type: "error", code: "bad_input", exitCode: 2, hint: expect.any(String) });
  await expectNothingWritten(home);
});
