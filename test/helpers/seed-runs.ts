/**
 * Writes finished runs straight into a journal, the way the engine records
 * them (run_started, a stage's step_started and checkpoint with its stage
 * index rows, status_changed; the stages one fan-out, each branch one stage
 * or several one after another),
 * without running anything: for status-page tests and benchmarks that need
 * many runs, or one run with many stages, quickly. Stage output files are
 * written under `artifactsDir` when given.
 */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EVENT } from "../../src/engine/journal-events.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { Usage } from "../../src/sdk/types.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";

export interface SeedOptions {
  workflow?: string;
  /** Stages run as one fan-out (ctx.parallel) of this many branches. */
  stages: number;
  /** Steps in each branch, one after another (default 1): `stage-N`, then `stage-N.2`, `stage-N.3`, … */
  steps?: number;
  /** How the run ended. */
  status?: "completed" | "failed";
  artifactsDir?: string;
  /** When the run started (ms); the stages start 1 ms apart and take 100 ms each, overlapping like a fan-out. */
  at?: number;
  /** Each stage's runner (recorded with its start) and usage (in its result), as an agent stage's. */
  agent?: { runner: string; usage: Usage };
  /** The local service recovered the run while its first stage ran: a run_resumed by the service after that stage's start. */
  recovered?: boolean;
}

export async function seedRun(journal: Journal, opts: SeedOptions): Promise<RunId> {
  const runId = newRunId();
  const lease = await journal.acquireLease(runId, thisProcessHolder("seed"), { timeoutMs: 30_000 });
  const t0 = opts.at ?? Date.now();
  const workflow = opts.workflow ?? "seeded";
  const entries: AppendEntry[] = [
    {
      runId,
      type: EVENT.runStarted,
      at: t0,
      payload: { workflow, path: `/seed/${workflow}.ts`, digest: "seed", depth: 0 },
      newRun: {
        rootId: runId,
        parentId: null,
        parentKey: null,
        depth: 0,
        workflowName: workflow,
        workflowPath: `/seed/${workflow}.ts`,
        workflowDigest: "seed",
        inputs: { stages: opts.stages },
      },
    },
  ];
  const steps = opts.steps ?? 1;
  for (let i = 0; i < opts.stages; i++) for (let j = 0; j < steps; j++) {
    const key = `0.${i}.${j}`;
    const name = j === 0 ? `stage-${i}` : `stage-${i}.${j + 1}`;
    const step = { kind: "stage" as const, name, args: j === 0 ? `seed-${i}` : `seed-${i}-${j}` };
    const started = t0 + 1 + i + j * 100;
    const artifactDir = join(opts.artifactsDir ?? "/nonexistent", runId, `${key}-${name}`, "attempt-1");
    if (opts.artifactsDir) {
      mkdirSync(artifactDir, { recursive: true });
      writeFileSync(join(artifactDir, "stdout.log"), `output of ${name}\n`);
      writeFileSync(join(artifactDir, "stderr.log"), "");
    }
    const result = {
      status: "completed",
      text: `output of ${name}\n`,
      exitCode: 0,
      outputPath: join(artifactDir, "stdout.log"),
      errorPath: join(artifactDir, "stderr.log"),
      ...(opts.agent ? { usage: opts.agent.usage, runner: opts.agent.runner } : {}),
    };
    entries.push(
      {
        runId,
        type: EVENT.stepStarted,
        key,
        at: started,
        payload: { ...step, attempt: 1, artifactDir, ...(opts.agent ? { runner: opts.agent.runner } : {}) },
        stage: { key, path: name, name, kind: "stage", state: "running", attempt: 1 },
      },
      ...(opts.recovered && i === 0 && j === 0 ? [{ runId, type: EVENT.runResumed, at: started + 50, payload: { drivenBy: "service" } }] : []),
      {
        runId,
        type: EVENT.checkpoint,
        key,
        at: started + 100,
        payload: { ...step, result, startedAt: started },
        stage: { key, path: name, name, kind: "stage", state: "finished", attempt: 1, outcome: "completed" },
      },
    );
  }
  const status = opts.status ?? "completed";
  const endedAt = t0 + 120 + opts.stages + (steps - 1) * 100;
  entries.push({
    runId,
    type: EVENT.statusChanged,
    at: endedAt,
    payload: { from: "running", to: status, ...(status === "failed" ? { error: { name: "Seeded", code: "seeded", message: "seeded failure" } } : {}) },
    patch: {
      status,
      outputs: status === "completed" ? { stages: opts.stages } : null,
      error: status === "failed" ? { name: "Seeded", code: "seeded", message: "seeded failure" } : null,
      endedAt,
      clearControl: true,
    },
  });
  for (let i = 0; i < entries.length; i += 500) {
    const outcomes = await journal.append(lease, entries.slice(i, i + 500));
    const bad = outcomes.find((o) => o.status === "error");
    if (bad) throw new Error(`seeding run ${runId} failed: ${JSON.stringify(bad)}`);
  }
  await journal.releaseLease(lease);
  return runId;
}
