/**
 * Records the golden journals replayed by golden.test.ts.
 *
 *   bun test/golden/record.ts            # every golden
 *   bun test/golden/record.ts basic      # one of them
 *
 * Each golden runs its workflow with the binary in a fresh temporary home
 * (optionally killed at a fault point), then dumps the runs rows and
 * events of the root run and its child runs to
 * `test/golden/<name>.journal.json`, with the home directory replaced by
 * "<home>" and paths inside the repository made relative to it. A killed
 * recording is then resumed (after the dump) to learn the outputs replay
 * must produce.
 *
 * Re-record only on purpose: a golden journal that no longer replays means
 * runs recorded by released versions would fail to resume.
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { openJournal } from "../../src/journal/open.ts";
import type { JournalEvent, RunRecord } from "../../src/journal/runs.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { VERSION } from "../../src/shared/version.ts";
import { ROOT, atomicBin } from "../helpers/atomic.ts";

export const GOLDEN_DIR = import.meta.dir;
export const HOME_MARK = "<home>";

/** One recorded run: its runs row as recorded, and its events in seq order. */
export interface GoldenRun {
  run: Omit<RunRecord, "lastSeq" | "control" | "controlRev" | "updatedAt">;
  events: Omit<JournalEvent, "runId">[];
}

export interface GoldenJournal {
  format: 1;
  name: string;
  description: string;
  recordedWith: string;
  /** Workflow file, relative to the repository root. */
  workflow: string;
  /** Fault points armed while recording (the recorded run was killed there). */
  faultPoints: string | null;
  /** The root run's outputs once complete: what replay must return. */
  outputs: unknown;
  /** Root run first, then its child runs in creation order. */
  runs: GoldenRun[];
}

interface GoldenSpec {
  name: string;
  description: string;
  workflow: string;
  inputs: string[];
  faultPoints?: string;
}

export const GOLDENS: GoldenSpec[] = [
  {
    name: "basic",
    description: "tool steps, a durable sleep, a parallel fan-out of a shell stage and two tool steps; complete",
    workflow: "test/golden/workflows/basic.ts",
    inputs: ["topic=durability"],
  },
  {
    name: "child",
    description: "a tool step, a child workflow (tool, shell stage, tool), a tool step; complete",
    workflow: "test/golden/workflows/child.ts",
    inputs: ["goal=ship"],
  },
  {
    name: "child-in-flight",
    description:
      "the child workflow of 'child', killed right after the child's last checkpoint (before the child's end and the parent's boundary checkpoint)",
    workflow: "test/golden/workflows/child.ts",
    inputs: ["goal=ship"],
    faultPoints: "after-checkpoint:4",
  },
  {
    name: "patched",
    description: "ctx.patched(\"v2\") on a new run: the marker, then the new branch's tool steps; complete",
    workflow: "test/golden/workflows/patched.ts",
    inputs: ["topic=patches"],
  },
  {
    name: "patched-before",
    description: "the code before the ctx.patched(\"v2\") change: no marker, the old branch's tool steps; complete",
    workflow: "test/golden/workflows/patched-before.ts",
    inputs: ["topic=patches"],
  },
];

function atomic(home: string, args: string[], env: Record<string, string> = {}) {
  const r = Bun.spawnSync([atomicBin(), "--home", home, ...args], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: "1", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode ?? 128 + 9, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

async function dump(home: string, rootId: RunId): Promise<GoldenRun[]> {
  const journal = await openJournal({ home, durability: "full" });
  try {
    const runs = (await journal.listRuns({ rootsOnly: false }))
      .filter((r) => r.rootId === rootId)
      .sort((a, b) => (a.parentId === null ? -1 : b.parentId === null ? 1 : a.createdAt - b.createdAt || a.id.localeCompare(b.id)));
    const out: GoldenRun[] = [];
    for (const r of runs) {
      const { lastSeq: _l, control: _c, controlRev: _r, updatedAt: _u, ...run } = r;
      // The recording machine's environment stays out of the committed file (a run without one resumes in its own).
      const events = (await journal.readEvents(r.id)).map(({ runId: _id, ...e }) => (e.type === "run_started" ? { ...e, payload: withoutEnvironment(e.payload) } : e));
      out.push({ run, events });
    }
    return out;
  } finally {
    await journal.close();
  }
}

function withoutEnvironment(payload: unknown): unknown {
  const { env: _env, secrets: _secrets, ...rest } = payload as Record<string, unknown>;
  return rest;
}

export async function record(spec: GoldenSpec): Promise<GoldenJournal> {
  const home = mkdtempSync(join(tmpdir(), "atomic-golden-record-"));
  try {
    const file = resolve(ROOT, spec.workflow);
    const env: Record<string, string> = { GOLDEN_SIDE_FILE: join(home, "side-effects.txt") };
    if (spec.faultPoints) env.ATOMIC_FAULT_POINTS = spec.faultPoints;
    const run = atomic(home, ["--json", "run", file, ...spec.inputs.flatMap((i) => ["--input", i])], env);
    const first = JSON.parse(run.stdout.split("\n")[0] ?? "{}") as { type?: string; runId?: RunId };
    if (first.type !== "run_started" || !first.runId) throw new Error(`${spec.name}: no run started:\n${run.stdout}${run.stderr}`);
    const expected = spec.faultPoints ? 137 : 0;
    if (run.code !== expected) throw new Error(`${spec.name}: atomic run exited ${run.code}, expected ${expected}:\n${run.stderr}`);
    const runs = await dump(home, first.runId);

    let outputs = runs[0]!.run.outputs;
    if (spec.faultPoints) {
      const resumed = atomic(home, ["--json", "resume", first.runId], { GOLDEN_SIDE_FILE: env.GOLDEN_SIDE_FILE! });
      if (resumed.code !== 0) throw new Error(`${spec.name}: resume exited ${resumed.code}:\n${resumed.stderr}`);
      outputs = (JSON.parse(resumed.stdout.trim().split("\n").at(-1)!) as { outputs: unknown }).outputs;
    }
    runs[0]!.run.workflowPath = spec.workflow;
    const golden: GoldenJournal = {
      format: 1,
      name: spec.name,
      description: spec.description,
      recordedWith: VERSION,
      workflow: spec.workflow,
      faultPoints: spec.faultPoints ?? null,
      outputs,
      runs,
    };
    const text = JSON.stringify(golden)
      .replaceAll(JSON.stringify(home).slice(1, -1), HOME_MARK)
      .replaceAll(JSON.stringify(`${ROOT}/`).slice(1, -1), "")
      // The run's cwd (the checkout) as ".": the loader puts this checkout's path back (golden.test.ts).
      .replaceAll(`"cwd":${JSON.stringify(ROOT)}`, `"cwd":"."`);
    return JSON.parse(text) as GoldenJournal;
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((w) => !GOLDENS.some((g) => g.name === w));
  if (unknown.length) throw new Error(`unknown golden(s): ${unknown.join(", ")}; known: ${GOLDENS.map((g) => g.name).join(", ")}`);
  for (const spec of GOLDENS.filter((g) => wanted.length === 0 || wanted.includes(g.name))) {
    const golden = await record(spec);
    const out = join(GOLDEN_DIR, `${spec.name}.journal.json`);
    writeFileSync(out, `${JSON.stringify(golden, null, 2)}\n`);
    console.log(`recorded ${relative(ROOT, out)} (${golden.runs.map((r) => r.events.length).join("+")} events)`);
  }
}
