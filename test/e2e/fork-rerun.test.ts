/**
 * Rerun and fork (issue 17): `atomic rerun RUN` runs RUN's workflow again
 * with its inputs (and --input overrides, validated as `run` validates);
 * `atomic fork RUN --at STEP` reuses RUN's results before STEP (those side
 * effects do not happen again), runs STEP and the rest live, records where
 * it came from and leaves RUN as it was. Side effects are counted in a
 * file each step appends to. Through dist/atomic.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { copyFileSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { openJournal } from "../../src/journal/open.ts";
import { journalOf } from "../helpers/postgres.ts";
import { statusFixture } from "../status/support.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const EFFECTS = fixture("effects.ts");
const lines = (file: string) => readFileSync(file, "utf8").trim().split("\n");
const newId = (stdout: string) => /atomic show (\S+)/.exec(stdout)![1]!;

async function firstRun(label = "a") {
  const home = makeTempDir();
  const out = join(makeTempDir(), "effects.txt");
  const r = await runAtomic(["run", EFFECTS, "--input", `out=${out}`, "--input", `label=${label}`], { home });
  expect(r.code).toBe(0);
  return { home, out, id: newId(r.stdout) };
}

interface ShowJson {
  run: { id: string; inputs: Record<string, unknown>; outputs: unknown; lastSeq: number; status: string };
  status: string;
  origin?: { kind: string; runId: string; at?: { position: string; name: string } };
  steps: { position: string; name: string; status: string; reusedFrom?: string }[];
}

async function show(home: string, id: string): Promise<ShowJson> {
  const r = await runAtomic(["show", id, "--json"], { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as ShowJson;
}

e2eTest("fork --at STEP reuses the results before STEP (no side effect again), runs the rest live, records its origin; the old run is untouched", async () => {
  const { home, out, id } = await firstRun();
  expect(lines(out)).toEqual(["one:a", "two:a", "three:a", "four:a"]);
  const old = await show(home, id);

  const r = await runAtomic(["fork", id, "--at", "three"], { home });
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(`fork of ${id} at #2 (three): 2 recorded step result(s) reused`);
  // Only "three" and "four" happened again.
  expect(lines(out)).toEqual(["one:a", "two:a", "three:a", "four:a", "three:a", "four:a"]);
  const forkId = newId(r.stdout);
  expect(forkId).not.toBe(id);
  const fork = await show(home, forkId);
  expect(fork.status).toBe("completed");
  expect(fork.run.inputs).toEqual(old.run.inputs);
  expect(fork.origin).toEqual({ kind: "fork", runId: id, at: { position: "2", name: "three" } });
  expect(fork.steps.map((s) => [s.name, s.status, s.reusedFrom ?? null])).toEqual([
    ["one", "completed", id],
    ["two", "completed", id],
    ["three", "completed", null],
    ["four", "completed", null],
  ]);
  const text = await runAtomic(["show", forkId, "--all"], { home });
  expect(text.stdout).toContain(`from      fork of ${id} at #2 (three)`);
  expect(text.stdout).toContain(`tool one (reused from ${id})`);
  // The old run is as it was.
  expect(await show(home, id)).toEqual(old);
  // The API's run detail says where the fork came from (the status app over the home's journal).
  const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
  const status = statusFixture(journal);
  try {
    const detail = (await (await status.req(`/api/runs/${forkId}`)).json()) as { run: { origin?: unknown } };
    expect(detail.run.origin).toEqual({ kind: "fork", runId: id, at: { position: "2", name: "three" } });
    const oldDetail = (await (await status.req(`/api/runs/${id}`)).json()) as { run: { origin?: unknown } };
    expect(oldDetail.run.origin).toBeUndefined();
  } finally {
    await status.close();
    await journal.close();
  }

  // By position, as show prints it: "#1" goes live at "two".
  const byPosition = await runAtomic(["fork", id, "--at", "#1"], { home });
  expect(byPosition.code).toBe(0);
  expect(lines(out).slice(6)).toEqual(["two:a", "three:a", "four:a"]);
});

e2eTest("fork refuses a STEP the run does not have, naming close matches (exit 2, nothing started)", async () => {
  const { home, id } = await firstRun();
  for (const [at, near] of [
    ["thre", '"three"'],
    ["#7", '"#1"'],
  ] as const) {
    const r = await runAtomic(["fork", id, "--at", at], { home });
    expect(r.code).toBe(2);
    const err = expectOneSentenceError(r.stderr);
    expect(err.message).toBe(`run ${id} has no step ${JSON.stringify(at)}.`);
    expect(err.hint).toContain(near);
  }
  const missing = await runAtomic(["fork", id], { home });
  expect(missing.code).toBe(2);
  expect(expectOneSentenceError(missing.stderr).message).toContain("needs --at STEP");
  const runs = await runAtomic(["runs", "--json"], { home });
  expect(runs.stdout.trim().split("\n")).toHaveLength(1);
});

e2eTest("rerun runs the workflow again with the same inputs, and with --input overrides (validated like run's)", async () => {
  const { home, out, id } = await firstRun("a");
  const again = await runAtomic(["rerun", id], { home });
  expect(again.code).toBe(0);
  expect(lines(out)).toEqual(["one:a", "two:a", "three:a", "four:a", "one:a", "two:a", "three:a", "four:a"]);
  const rerun = await show(home, newId(again.stdout));
  expect(rerun.origin).toEqual({ kind: "rerun", runId: id });
  expect(rerun.run.inputs).toEqual((await show(home, id)).run.inputs);

  const changed = await runAtomic(["rerun", id, "--input", "label=b"], { home });
  expect(changed.code).toBe(0);
  expect(lines(out).slice(8)).toEqual(["one:b", "two:b", "three:b", "four:b"]);
  expect((await show(home, newId(changed.stdout))).run.inputs).toMatchObject({ label: "b", out });

  const bad = await runAtomic(["rerun", id, "--input", "big=lots"], { home });
  expect(bad.code).toBe(2);
  expect(expectOneSentenceError(bad.stderr).message).toContain('input "big" must be a number');
  const unknown = await runAtomic(["rerun", id, "--input", "nope=1"], { home });
  expect(unknown.code).toBe(2);
  expectOneSentenceError(unknown.stderr);
  expect(lines(out)).toHaveLength(12);
});

e2eTest("rerun and fork of a run whose workflow file moved run the code the run was pinned to (and say so); with --workflow, the moved file runs", async () => {
  const home = makeTempDir();
  const project = makeTempDir();
  const wf = join(project, "effects.ts");
  copyFileSync(EFFECTS, wf);
  const out = join(project, "effects.txt");
  const r = await runAtomic(["run", wf, "--input", `out=${out}`], { home });
  expect(r.code).toBe(0);
  const id = newId(r.stdout);
  const moved = join(makeTempDir(), "moved.ts");
  renameSync(wf, moved);
  const pinned = await runAtomic(["rerun", id], { home });
  expect(pinned.code).toBe(0);
  expect(pinned.stdout + pinned.stderr).toContain(`${wf} no longer exists: running the code run ${id} was pinned to (`);
  expect(lines(out)).toHaveLength(8);
  const forked = await runAtomic(["fork", id, "--at", "three"], { home });
  expect(forked.code).toBe(0);
  expect(forked.stdout + forked.stderr).toContain(`${wf} no longer exists: running the code run ${id} was pinned to (`);
  expect(lines(out)).toHaveLength(10); // "three" and "four" ran again, from the pinned code
  const again = await runAtomic(["rerun", id, "--workflow", moved], { home });
  expect(again.code).toBe(0);
  expect(lines(out)).toHaveLength(14);
});

e2eTest("fork reuses a finished child workflow and a parallel group before STEP; a group named by its position runs again whole", async () => {
  const home = makeTempDir();
  const out = join(makeTempDir(), "effects.txt");
  const r = await runAtomic(["run", fixture("forks.ts"), "--input", `out=${out}`], { home });
  expect(r.code).toBe(0);
  const id = newId(r.stdout);
  const first = lines(out);
  expect(first[0]).toBe("kid");
  expect(first.slice(1, 3).sort()).toEqual(["p1", "p2"]);
  expect(first[3]).toBe("last");

  const atLast = await runAtomic(["fork", id, "--at", "last"], { home });
  expect(atLast.code).toBe(0);
  expect(lines(out).slice(4)).toEqual(["last"]);
  const fork = await show(home, newId(atLast.stdout));
  expect(fork.status).toBe("completed");
  expect(fork.run.outputs).toEqual({ child: { kid: true } });
  expect(fork.steps.filter((s) => s.reusedFrom === id).map((s) => s.position).sort()).toEqual(["0", "1.0.0", "1.1.0"]);

  const atGroup = await runAtomic(["fork", id, "--at", "#1"], { home });
  expect(atGroup.code).toBe(0);
  expect(atGroup.stdout).toContain(`fork of ${id} at #1 (group #1): 1 recorded step result(s) reused`);
  expect(lines(out).slice(5, 7).sort()).toEqual(["p1", "p2"]);
  expect(lines(out).slice(7)).toEqual(["last"]);
});
