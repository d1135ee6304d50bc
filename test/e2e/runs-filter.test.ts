/**
 * `atomic runs` filters and width, through the real binary: --status takes
 * every status the list shows (crashed and paused are derived, not stored),
 * several comma-separated; --workflow NAME; --since an age or an ISO date;
 * an empty result says "no runs match"; bad values are one sentence and a
 * hint; the table fits COLUMNS (and a narrow terminal).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { openJournal } from "../../src/journal/open.ts";
import { atomicBin, lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { journalOf } from "../helpers/postgres.ts";
import {
  HAS_SCRIPT,
  cleanupNow,
  cleanupWhenIdle,
  e2eTest,
  expectOneSentenceError,
  fixture,
  makeTempDir,
  parseNdjson,
  runCommand,
  shellQuote,
  stagePid,
  startedRunId,
} from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const DAY = 86_400_000;

/** A home with a completed run three days old ("old"), a failed one ("fresh") and a crashed run of waits.ts. */
async function mixedHome(): Promise<{ home: string; crashed: string }> {
  const home = makeTempDir();
  // The journal the binary uses for this home (a schema of the test cluster in the Postgres pass).
  const journal = await openJournal({ home, durability: "normal", ...journalOf(home) });
  await seedRun(journal, { workflow: "old", stages: 1, at: Date.now() - 3 * DAY });
  await seedRun(journal, { workflow: "a-workflow-with-a-rather-long-name", stages: 1, status: "failed" });
  await journal.close();
  const dir = makeTempDir();
  const proc = spawnAtomic(["run", fixture("waits.ts")], { home, env: { E2E_DIR: dir } });
  const out = lineWatcher(proc.stdout);
  const crashed = startedRunId(await out.waitFor(/^started run /));
  await stagePid(dir, "wait");
  proc.kill("SIGKILL");
  await proc.exited;
  return { home, crashed };
}

async function ids(args: string[], home: string): Promise<{ id: string; status: string }[]> {
  const r = await runAtomic(["runs", "--json", ...args], { home });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return parseNdjson(r.stdout).map((x) => ({ id: x.id as string, status: x.status as string }));
}

e2eTest("--status takes shown statuses, --workflow and --since filter, an empty result says no runs match", async () => {
  const { home, crashed } = await mixedHome();
  expect(await ids(["--status", "crashed"], home)).toEqual([{ id: crashed, status: "crashed" }]);
  expect((await ids(["--status", "running"], home))).toEqual([]);
  expect((await ids(["--status", "completed,failed"], home)).map((r) => r.status).sort()).toEqual(["completed", "failed"]);
  expect((await ids(["--status", "failed,crashed"], home)).map((r) => r.status)).toEqual(["crashed", "failed"]);
  expect((await ids(["--workflow", "old"], home)).map((r) => r.status)).toEqual(["completed"]);
  expect((await ids(["--workflow", "waits", "--status", "crashed"], home))).toHaveLength(1);
  expect(await ids(["--since", "2d"], home)).toHaveLength(2);
  expect(await ids(["--since", "4d"], home)).toHaveLength(3);
  expect(await ids(["--since", new Date(Date.now() - 2 * DAY).toISOString().slice(0, 10)], home)).toHaveLength(2);

  for (const args of [["--status", "paused"], ["--workflow", "nope"], ["--since", "1s", "--workflow", "old"]]) {
    const r = await runAtomic(["runs", ...args], { home });
    expect({ args, code: r.code, stderr: r.stderr, stdout: r.stdout }).toEqual({ args, code: 0, stderr: "", stdout: "no runs match; see every run with: atomic runs\n" });
  }
  const empty = await runAtomic(["runs"], { home: makeTempDir() });
  expect(empty.stdout).toMatch(/^no runs yet/);

  for (const [args, message] of [
    [["--status", "sleeping"], /^--status "sleeping" is not a status a run can have\.$/],
    [["--since", "yesterday"], /^--since "yesterday" is neither a date nor an age\.$/],
    [["--since", "2026-13-45"], /is neither a date nor an age/],
    [["--watch", "--status", "crashed"], /^--watch takes only --limit and a single stored --status\.$/],
  ] as const) {
    const r = await runAtomic(["runs", ...args], { home });
    expect({ args, code: r.code }).toEqual({ args, code: 2 });
    const { message: said, hint } = expectOneSentenceError(r.stderr);
    expect(said).toMatch(message);
    expect(hint).toBeDefined();
  }
});

e2eTest("runs fits the terminal: columns dropped and names elided when COLUMNS or the terminal is narrow", async () => {
  const { home, crashed } = await mixedHome();
  const wide = await runAtomic(["runs"], { home, env: { COLUMNS: "200" } });
  expect(wide.stdout).toMatch(/^RUN\s+STATUS\s+WORKFLOW\s+ORIGIN\s+STARTED\s+DURATION\s+STAGES\s+TOKENS\s+COST\s+CODE$/m);
  expect(wide.stdout).toContain("a-workflow-with-a-rather-long-name");
  expect(wide.stdout).toMatch(new RegExp(`^${crashed}\\s+crashed\\s+waits\\s.*driver process gone$`, "m"));
  for (const width of [80, 60, 40]) {
    const r = await runAtomic(["runs"], { home, env: { COLUMNS: String(width) } });
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(4);
    for (const line of lines) expect({ width, line, fits: line.length <= width }).toEqual({ width, line, fits: true });
    expect(r.stdout).toMatch(new RegExp(`^${crashed}\\s+crashed`, "m"));
  }
  // 64 columns: the start (its zone said) is kept, the workflow's name elided to make room.
  const narrow = await runAtomic(["runs"], { home, env: { COLUMNS: "64" } });
  expect(narrow.stdout).toMatch(/^RUN\s+STATUS\s+WORKFLOW\s+STARTED$/m);
  expect(narrow.stdout).toMatch(/ a-workf\S*… .* UTC$/m);
  expect(narrow.stdout).not.toContain("a-workflow-with-a-rather-long-name");
  // Off a terminal without COLUMNS, nothing is cut.
  const piped = await runAtomic(["runs"], { home, env: { COLUMNS: undefined } });
  expect(piped.stdout).toContain("a-workflow-with-a-rather-long-name");

  if (HAS_SCRIPT) {
    const line = `stty cols 50; exec ${[atomicBin(), "runs"].map(shellQuote).join(" ")}`;
    const r = await runCommand(["script", "-qec", line, "/dev/null"], { env: { ATOMIC_HOME: home, COLUMNS: undefined, NO_COLOR: "1", TERM: "xterm" } });
    const lines = r.stdout.replace(/\r/g, "").trimEnd().split("\n");
    expect(lines).toHaveLength(4);
    for (const l of lines) expect({ l, fits: l.length <= 50 }).toEqual({ l, fits: true });
  }
});
