/**
 * Crash tests with real processes (docs/design/journal.md): a 30-step workflow
 * (fixtures/thirty-steps.ts: 10 sequential tool steps, a parallel fan-out
 * of 10, a child workflow of 10) is SIGKILLed at 32 different points (29
 * in the first run, 3 in resuming processes), then resumed with `atomic
 * resume` until it completes.
 *
 * Kill points:
 * - named fault points in the engine: `before-checkpoint:N` dies in the
 *   window between step N's end and its checkpoint, `after-checkpoint:N`
 *   right after the checkpoint committed (hits are counted per process; the
 *   workflow's Nth checkpoint is step N-1 for the sequential parts, the
 *   31st is the child workflow's boundary step in the parent);
 * - SIGKILL from the test while a step holds inside that window (env
 *   CRASH_HOLD_AT), and at printed markers while the run goes on freely;
 * - crashes of the resuming process itself.
 *
 * After every crash the test reads what the journal recorded (`show
 * --json`) and the side-effect file, where each tool function appends its
 * idempotency key. Asserted at the end: the resume exits 0 with the
 * outputs of an uninterrupted run; a step whose checkpoint was recorded
 * before a crash never ran again; every step not recorded ran exactly once
 * more; so only a step in flight at a kill appears twice.
 *
 * Cases run in small concurrent batches (each has its own home) to keep the
 * file fast on two cores. Durations are never asserted.
 */

import { expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "thirty-steps.ts");
const STEPS = 30;
const trackHome = trackHomes();

// ---------------------------------------------------------------------------
// Helpers

interface StepReport {
  position: string;
  kind: string;
  name: string;
  status: string;
  childRunId?: string;
  child?: Report;
}
interface Report {
  run: { id: string; status: string; outputs: unknown; error: { code: string; message: string } | null };
  status: string;
  steps: StepReport[];
}

function newHome(): string {
  const home = makeTempDir("atomic-crash-");
  trackHome(home);
  return home;
}

/** The binary with `--home` on the command line, so leftover processes are findable by it. */
function atomicArgs(home: string, args: string[]): string[] {
  return ["--home", home, ...args];
}

async function show(home: string, runId: string): Promise<Report> {
  const r = await runAtomic(atomicArgs(home, ["--json", "show", runId]), { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as Report;
}

/** Idempotency keys (`<run id>:<position>`) of the tool steps the journal has checkpointed, by step name. */
function checkpointedTools(report: Report, into = new Map<string, string>()): Map<string, string> {
  for (const step of report.steps) {
    if (step.kind === "tool" && step.status === "completed") into.set(step.name, `${report.run.id}:${step.position}`);
    if (step.child) checkpointedTools(step.child, into);
  }
  return into;
}

function childRunId(report: Report): string | undefined {
  return report.steps.find((s) => s.kind === "child")?.childRunId;
}

/** The idempotency key step `n` has (or will have) in this run. */
function keyOf(n: number, rootId: string, childId: string | undefined): string | undefined {
  if (n < 10) return `${rootId}:${n}`;
  if (n < 20) return `${rootId}:10.${n - 10}.0`;
  return childId ? `${childId}:${n - 20}` : undefined;
}

function sideEffects(file: string): Map<string, number> {
  const counts = new Map<string, number>();
  if (!existsSync(file)) return counts;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (line) counts.set(line, (counts.get(line) ?? 0) + 1);
  }
  return counts;
}

/** What the journal and the side-effect file held right after a crash. */
interface Snapshot {
  report: Report;
  recorded: Map<string, string>;
  effects: Map<string, number>;
}

async function snapshot(home: string, runId: string, sideFile: string): Promise<Snapshot> {
  const report = await show(home, runId);
  // A killed driver shows as crashed, resumable at once (its process is gone).
  expect(report.status).toBe("crashed");
  return { report, recorded: checkpointedTools(report), effects: sideEffects(sideFile) };
}

interface Crash {
  /** ATOMIC_FAULT_POINTS for `atomic run`. */
  faults?: string;
  /** CRASH_HOLD_AT: the step that holds after its effect until killed. */
  hold?: number;
  /** SIGKILL when a stdout line (NDJSON) matches. */
  killAt?: RegExp;
  /** ATOMIC_FAULT_POINTS for resumes that crash again, in order. */
  resumeFaults?: string[];
  delayMs?: number;
}

interface CrashResult {
  runId: string;
  childId: string | undefined;
  crashes: Snapshot[];
  final: Report;
  effects: Map<string, number>;
}

/** Starts the workflow, kills it as `crash` says, resumes until done; checks the shared invariants. */
async function crashAndResume(label: string, crash: Crash): Promise<CrashResult> {
  const home = newHome();
  const sideFile = join(home, "side-effects.txt");
  const env: Record<string, string> = {};
  if (crash.faults) env.ATOMIC_FAULT_POINTS = crash.faults;
  if (crash.hold !== undefined) env.CRASH_HOLD_AT = String(crash.hold);
  const args = ["--json", "run", FIXTURE, "--input", `sideFile=${sideFile}`, "--input", `delayMs=${crash.delayMs ?? 2}`];
  const proc = spawnAtomic(atomicArgs(home, args), { home, env });
  const out = lineWatcher(proc.stdout);
  const stderr = new Response(proc.stderr).text();
  if (crash.hold !== undefined) await out.waitFor(new RegExp(`"message":"hold step-${crash.hold}"`));
  if (crash.killAt) await out.waitFor(crash.killAt);
  if (crash.hold !== undefined || crash.killAt) proc.kill("SIGKILL");
  await proc.exited;
  if (proc.signalCode !== "SIGKILL") {
    throw new Error(`atomic run was not killed (exit ${proc.exitCode}):\n${out.text()}\n${await stderr}`);
  }
  if (crash.faults) expect(await stderr).toContain("[fault]");

  const started = out.lines.map((l) => JSON.parse(l) as { type: string; runId: string; parentId?: string | null });
  const runId = started.find((e) => e.type === "run_started" && e.parentId === null)?.runId;
  if (!runId) throw new Error(`no run_started line before the kill:\n${out.text()}`);

  // A resumed run sees the environment it started with (CRASH_HOLD_AT too): its drives hold nowhere.
  const NO_HOLD = ["--env", "CRASH_HOLD_AT=-1"];
  const crashes = [await snapshot(home, runId, sideFile)];
  for (const faults of crash.resumeFaults ?? []) {
    const r = await runAtomic(atomicArgs(home, ["--quiet", "resume", runId, ...NO_HOLD]), { home, env: { ATOMIC_FAULT_POINTS: faults } });
    if (r.code !== 137) throw new Error(`resume with ${faults} was not killed (exit ${r.code}):\n${r.stderr}`);
    crashes.push(await snapshot(home, runId, sideFile));
  }

  const resumed = await runAtomic(atomicArgs(home, ["--quiet", "resume", runId, ...NO_HOLD]), { home });
  if (resumed.code !== 0) throw new Error(`resume exited ${resumed.code}:\n${resumed.stderr}`);
  const final = await show(home, runId);
  const effects = sideEffects(sideFile);
  const childId = childRunId(final);

  // The run completed with the outputs of an uninterrupted run.
  expect(final.status).toBe("completed");
  expect(final.run.outputs).toEqual(await baselineOutputs());

  // All 30 tool steps are recorded, each under the key its function saw.
  const recorded = checkpointedTools(final);
  expect(recorded.size).toBe(STEPS);
  for (let n = 0; n < STEPS; n++) expect(recorded.get(`step-${n}`)).toBe(keyOf(n, runId, childId)!);
  expect([...effects.keys()].sort()).toEqual([...recorded.values()].sort());

  // A step recorded before a crash never ran again.
  for (const [i, c] of crashes.entries()) {
    for (const key of c.recorded.values()) {
      if (effects.get(key) !== c.effects.get(key)) {
        throw new Error(`step ${key}, checkpointed before crash ${i + 1}, ran again after it`);
      }
    }
  }
  // Steps recorded before the first crash ran exactly once.
  for (const key of crashes[0]!.recorded.values()) expect(effects.get(key)).toBe(1);
  // A step not recorded at the last crash ran exactly once more (at most once per kill it was in flight for).
  const last = crashes.at(-1)!;
  const recordedAtLast = new Set(last.recorded.values());
  for (const key of recorded.values()) {
    if (recordedAtLast.has(key)) continue;
    expect(`${key} x${effects.get(key)}`).toBe(`${key} x${(last.effects.get(key) ?? 0) + 1}`);
  }
  for (const count of effects.values()) expect(count).toBeLessThanOrEqual(1 + crashes.length);
  return { runId, childId, crashes, final, effects };
}

let baseline: Promise<unknown> | undefined;

/** Outputs of an uninterrupted run (computed once per file, by whichever test needs it first). */
function baselineOutputs(): Promise<unknown> {
  baseline ??= (async () => {
    const home = newHome();
    const sideFile = join(home, "side-effects.txt");
    const r = await runAtomic(
      atomicArgs(home, ["--json", "run", FIXTURE, "--input", `sideFile=${sideFile}`, "--input", "delayMs=0"]),
      { home },
    );
    if (r.code !== 0) throw new Error(`uninterrupted run exited ${r.code}:\n${r.stderr}`);
    const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { type: string; outputs: unknown };
    expect(result.type).toBe("result");
    const effects = sideEffects(sideFile);
    expect(effects.size).toBe(STEPS);
    for (const count of effects.values()) expect(count).toBe(1);
    return result.outputs;
  })();
  return baseline;
}

/** Runs crash cases concurrently, each fully independent; reports every failure by its label. */
async function batch(cases: [string, Crash][], check?: (label: string, r: CrashResult) => void): Promise<void> {
  const results = await Promise.allSettled(
    cases.map(async ([label, crash]) => {
      const r = await crashAndResume(label, crash);
      check?.(label, r);
    }),
  );
  const failures = results.flatMap((r, i) => (r.status === "rejected" ? [`${cases[i]![0]}: ${(r.reason as Error).message}`] : []));
  if (failures.length) throw new Error(failures.join("\n\n"));
}

function faultAt(point: "before-checkpoint" | "after-checkpoint", hit: number): [string, Crash] {
  return [`${point}:${hit}`, { faults: `${point}:${hit}` }];
}

/** For sequential parts (steps 0-9 and the child's 20-29) the Nth checkpoint is step N-1. */
function checkSequentialFault(label: string, r: CrashResult): void {
  const [point, hitText] = label.split(":");
  const hit = Number(hitText);
  const step = hit - 1;
  const first = r.crashes[0]!;
  const key = keyOf(step, r.runId, r.childId)!;
  if (point === "before-checkpoint") {
    // Killed after step N-1's function ran, before its checkpoint: it ran again on resume.
    expect(`${label}: ${first.recorded.size} recorded`).toBe(`${label}: ${hit - 1} recorded`);
    expect(first.recorded.has(`step-${step}`)).toBe(false);
    expect(first.effects.get(key)).toBe(1);
    expect(r.effects.get(key)).toBe(2);
  } else {
    // Killed right after the checkpoint committed: the step never ran again.
    expect(`${label}: ${first.recorded.size} recorded`).toBe(`${label}: ${hit} recorded`);
    expect(first.recorded.get(`step-${step}`)).toBe(key);
    expect(r.effects.get(key)).toBe(1);
  }
}

/** Inside the fan-out several steps are in flight and commits are shared, so only bounds hold. */
function checkParallelFault(label: string, r: CrashResult): void {
  const [point, hitText] = label.split(":");
  const hit = Number(hitText);
  const recorded = r.crashes[0]!.recorded;
  expect(recorded.size).toBeGreaterThanOrEqual(10);
  if (point === "before-checkpoint") expect(recorded.size).toBeLessThanOrEqual(hit - 1);
  else expect(recorded.size).toBeGreaterThanOrEqual(hit);
  expect(recorded.size).toBeLessThanOrEqual(20);
  expect(r.crashes[0]!.report.steps.some((s) => s.kind === "child")).toBe(false);
}

// ---------------------------------------------------------------------------
// Tests

test("an uninterrupted run records every step once", async () => {
  expect(await baselineOutputs()).toMatchObject({ total: expect.any(Number) });
});

test("killed between a step's end and its checkpoint: sequential steps", async () => {
  // The first step without a delay ends in the turn its run started: run_started must be on stdout
  // before it (when --json batched it to the turn's end, this kill lost the line every time).
  const first: [string, Crash] = ["before-checkpoint:1", { faults: "before-checkpoint:1", delayMs: 0 }];
  await batch([first, faultAt("before-checkpoint", 4), faultAt("before-checkpoint", 10)], checkSequentialFault);
});

test("killed between a step's end and its checkpoint: inside the parallel fan-out", async () => {
  await batch([faultAt("before-checkpoint", 11), faultAt("before-checkpoint", 14), faultAt("before-checkpoint", 20)], checkParallelFault);
});

test("killed between a step's end and its checkpoint: inside the child workflow", async () => {
  await batch([faultAt("before-checkpoint", 21), faultAt("before-checkpoint", 25), faultAt("before-checkpoint", 30)], checkSequentialFault);
});

test("killed right after a checkpoint: sequential steps", async () => {
  await batch([faultAt("after-checkpoint", 2), faultAt("after-checkpoint", 9), faultAt("after-checkpoint", 10)], checkSequentialFault);
});

test("killed right after a checkpoint: inside the parallel fan-out", async () => {
  await batch([faultAt("after-checkpoint", 12), faultAt("after-checkpoint", 17), faultAt("after-checkpoint", 20)], checkParallelFault);
});

test("killed right after a checkpoint: inside the child workflow", async () => {
  await batch([faultAt("after-checkpoint", 23), faultAt("after-checkpoint", 29), faultAt("after-checkpoint", 30)], (label, r) => {
    checkSequentialFault(label, r);
    // The child had recorded its steps but not its end: resume replayed it under the same run id.
    const child = r.crashes[0]!.report.steps.find((s) => s.kind === "child");
    expect(child?.status).toBe("stopped");
    expect(child?.childRunId).toBe(r.childId!);
  });
});

test("killed around the child workflow's boundary checkpoint in the parent", async () => {
  // Hit 31 is the boundary step: the child has recorded all its steps and its end.
  await batch([faultAt("before-checkpoint", 31), faultAt("after-checkpoint", 31)], (label, r) => {
    const first = r.crashes[0]!;
    expect(first.recorded.size).toBe(30);
    for (const count of r.effects.values()) expect(count).toBe(1);
    const boundary = first.report.steps.find((s) => s.kind === "child")!;
    expect(boundary.child?.run.status).toBe("completed");
    expect(boundary.status).toBe(label.startsWith("before") ? "stopped" : "completed");
    // Resume kept the child's run id (replayed it, or returned its recorded outputs).
    expect(boundary.childRunId).toBe(r.childId!);
  });
});

test("SIGKILL from outside while a step's effect is done but not checkpointed", async () => {
  await batch(
    [
      ["hold step-6", { hold: 6 }],
      ["hold step-15 (fan-out)", { hold: 15 }],
      ["hold step-26 (child)", { hold: 26 }],
    ],
    (label, r) => {
      const n = Number(/step-(\d+)/.exec(label)![1]);
      const key = keyOf(n, r.runId, r.childId)!;
      const first = r.crashes[0]!;
      expect(first.recorded.has(`step-${n}`)).toBe(false);
      expect(first.effects.get(key)).toBe(1);
      expect(r.effects.get(key)).toBe(2);
      if (n !== 15) expect(first.recorded.size).toBe(n);
    },
  );
});

test("SIGKILL from outside at printed markers while the run goes on", async () => {
  // Slower steps so the kill lands mid-run wherever it lands; only the invariants are checked.
  const delayMs = 40;
  await batch([
    ["after step-3 ended", { delayMs, killAt: /"type":"step_ended".*"name":"step-3"/ }],
    ["at step-13 begin (fan-out)", { delayMs, killAt: /"message":"begin step-13"/ }],
    ["when the child run started", { delayMs, killAt: /"type":"run_started","runId":"[^"]+","parentId":"/ }],
    ["at step-24 begin (child)", { delayMs, killAt: /"message":"begin step-24"/ }],
  ]);
});

test("the resuming process crashes too, twice", async () => {
  await batch([
    ["before-checkpoint:7, then resumes killed at after-checkpoint:8 and before-checkpoint:9", {
      faults: "before-checkpoint:7",
      resumeFaults: ["after-checkpoint:8", "before-checkpoint:9"],
    }],
    ["hold step-12, then a resume killed at before-checkpoint:3", { hold: 12, resumeFaults: ["before-checkpoint:3"] }],
  ], (_label, r) => {
    expect(r.crashes.length).toBeGreaterThan(1);
    // Nothing recorded is ever lost by a later crash.
    for (let i = 1; i < r.crashes.length; i++) {
      for (const [name, key] of r.crashes[i - 1]!.recorded) expect(r.crashes[i]!.recorded.get(name)).toBe(key);
    }
  });
});
