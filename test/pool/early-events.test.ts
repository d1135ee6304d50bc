/**
 * A pooled stage that a worker starts before the root's execute() for it
 * has registered (the root still writing the attempt's records while a pool
 * that came up with a resumed run claims the item at once) still gets its
 * live events: its `started` and its first output reach the stage when
 * execute() comes. Dropped, the stage stayed "queued" for as long as it
 * ran (seen on `atomic resume --tui`). Real parts: a SQLite journal, the
 * coordinator and a worker from source, a shell stage; the test waits for
 * the events to have reached the root before it calls execute().
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { EVENT } from "../../src/engine/journal-events.ts";
import { openJournal } from "../../src/journal/open.ts";
import { PoolExecutor } from "../../src/pool/pool-executor.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(removeTempDirs);

test("live events of a stage started before its execute() registered reach it when it does", async () => {
  const home = makeTempDir("atomic-pool-early-");
  const journal = await openJournal({ home, durability: "full" });
  const runId = newRunId();
  const lease = await journal.acquireLease(runId, thisProcessHolder("root"), { timeoutMs: 30_000 });
  const workId = "work-early-1";
  const request: StageRequest = {
    runId,
    stageKey: "0",
    stageName: "deploy",
    attempt: 1,
    runner: "shell",
    command: "echo deploying to staging; while :; do sleep 1; done",
    cwd: home,
    artifactDir: join(home, "artifacts", runId, "0-deploy", "attempt-1"),
    workId,
  };
  const pool = new PoolExecutor({ home, rootId: runId, rootEpoch: lease.epoch, workers: 1 });
  try {
    const workflow = { workflow: "early", path: "/early.ts", digest: "early", depth: 0 };
    const newRun = { rootId: runId, parentId: null, parentKey: null, depth: 0, workflowName: "early", workflowPath: "/early.ts", workflowDigest: "early", inputs: {} };
    // The pool boots with the run (prepare), then the stage's start record puts the item on the queue.
    pool.prepare();
    const outcomes = await journal.append(lease, [
      { runId, type: EVENT.runStarted, payload: workflow, newRun },
      { runId, type: EVENT.stepStarted, key: "0", payload: { kind: "stage", name: "deploy", attempt: 1, queued: true }, work: { id: workId, stageKey: "0", attempt: 1, descriptor: request } },
    ]);
    expect(outcomes.every((o) => o.status !== "error")).toBe(true);
    // The worker runs it and its events reach this process before any execute() asked for the item.
    const early = (pool as unknown as { earlyEvents: Map<string, RunnerEvent[][]> }).earlyEvents;
    const arrived = () => (early.get(workId) ?? []).flat();
    await waitUntil(() => arrived().some((e) => e.type === "output" && e.text.includes("deploying to staging")), 30_000, "the stage's first output to reach the root");
    const events: RunnerEvent[] = [];
    const stop = new AbortController();
    const result = pool.execute(request, stop.signal, (e) => events.push(e));
    await waitUntil(() => events.some((e) => e.type === "output"), 10_000, "the early events to be handed to the stage");
    expect(events[0]?.type).toBe("started");
    expect(events.some((e) => e.type === "output" && e.text.includes("deploying to staging"))).toBe(true);
    stop.abort("cancelled by the test");
    expect((await result).status).toBe("cancelled");
  } finally {
    await pool.close();
    await journal.releaseLease(lease);
    await journal.close();
  }
}, 60_000);
