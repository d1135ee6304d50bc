/**
 * cancelRun: a run nobody drives (crashed, interrupted, failed) is
 * cancelled on the spot with its unfinished children; a live run is asked
 * through its control row and its driver stops and records "cancelled".
 * A cancel asked while the run changes hands (a `resume --detach` leaving it
 * to the service) is applied by the drive that takes it; a resume whose
 * record was read before the run was cancelled refuses.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { cancelRun } from "../../src/engine/cancel.ts";
import { assertResumable } from "../../src/engine/driver.ts";
import { shownStatus } from "../../src/journal/run-status.ts";
import { workflow } from "../../src/sdk/index.ts";
import { newHolderId, newRunId, type RunId } from "../../src/shared/ids.ts";
import { EVENT } from "../../src/engine/journal-events.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { aborted, deferred, engineAfterEach, processGone, shQuote, waitUntil, withEngine, type Engine } from "./helpers.ts";

afterEach(engineAfterEach);

/** A root whose child waits in a tool until the run is stopped. */
function nested(waiting: { resolve(): void }) {
  const kid = workflow({
    name: "kid",
    async run(ctx) {
      await ctx.tool("done-before", {}, () => 1);
      return ctx.tool("waits", {}, async ({ signal }) => {
        waiting.resolve();
        await aborted(signal);
        throw new Error("stopped");
      });
    },
  });
  return workflow({
    name: "root",
    async run(ctx) {
      await ctx.tool("first", {}, () => "f");
      return ctx.workflow(kid, {});
    },
  });
}

async function childOf(fx: Engine, runId: RunId) {
  const [kid] = await fx.journal.listRuns({ parentId: runId, rootsOnly: false });
  expect(kid).toBeDefined();
  return kid!;
}

describe("cancelRun", () => {
  test("a crashed run (status running, lease expired) is cancelled at once, with its unfinished child", async () => {
    await withEngine(async (fx) => {
      const waiting = deferred();
      const driven = await fx.start(nested(waiting), {}, { leaseTimeoutMs: 300 });
      const running = driven.run();
      await waiting.promise;
      driven.crash(); // the next lease renewal fails: the driver stops and writes nothing more
      await running;
      expect(driven.root.stopReason).toBe("lease_lost");

      const kidBefore = await childOf(fx, driven.runId);
      expect(kidBefore.status).toBe("running");
      await waitUntil(async () => shownStatus(await fx.getRun(driven.runId), await fx.journal.getLease(driven.runId)) === "crashed", "the run to show as crashed");

      const result = await cancelRun(fx.journal, await fx.getRun(driven.runId), 5_000);
      expect(result).toEqual({ result: "cancelled", status: "cancelled" });
      const root = await fx.getRun(driven.runId);
      const kid = await fx.getRun(kidBefore.id);
      expect(root.status).toBe("cancelled");
      expect(kid.status).toBe("cancelled");
      expect(root.endedAt).not.toBeNull();
      for (const id of [root.id, kid.id]) {
        const last = (await fx.journalEvents(id)).at(-1)!;
        expect(last.type).toBe("status_changed");
        expect(last.payload).toMatchObject({ from: "running", to: "cancelled" });
      }
      expect(await fx.journal.getLease(driven.runId)).toBeUndefined();
      expect(() => assertResumable(root)).toThrow(/cannot be resumed/);
    });
  });

  test("an interrupted run is cancelled at once; its finished child keeps its status", async () => {
    await withEngine(async (fx) => {
      const quick = workflow({ name: "quick", run: (ctx) => ctx.tool("q", {}, () => "q") });
      const wf = workflow({
        name: "root-int",
        async run(ctx) {
          await ctx.workflow(quick, {});
          return ctx.tool("waits", {}, async ({ signal }) => {
            waiting.resolve();
            await aborted(signal);
            throw new Error("stopped");
          });
        },
      });
      const waiting = deferred();
      const driven = await fx.start(wf);
      const running = driven.run();
      await waiting.promise;
      driven.stop("interrupted");
      expect((await running).status).toBe("interrupted");
      const result = await cancelRun(fx.journal, await fx.getRun(driven.runId), 5_000);
      expect(result.result).toBe("cancelled");
      expect((await fx.getRun(driven.runId)).status).toBe("cancelled");
      expect((await childOf(fx, driven.runId)).status).toBe("completed");
    });
  });

  test("a live run is asked through its control row: the driver stops its steps and records cancelled", async () => {
    await withEngine(async (fx) => {
      const waiting = deferred();
      const pidFile = join(makeTempDir(), "bg.pid");
      const kid = workflow({
        name: "kid-live",
        async run(ctx) {
          return ctx.parallel([
            () => ctx.tool("waits", {}, async ({ signal }) => {
              waiting.resolve();
              await aborted(signal);
              throw new Error("stopped");
            }),
            { name: "stage", shell: `sleep 100 & echo $! > ${shQuote(pidFile)}; wait` },
          ]);
        },
      });
      const driven = await fx.start(workflow({ name: "root-live", run: (ctx) => ctx.workflow(kid, {}) }));
      const running = driven.run();
      await waiting.promise;
      await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the stage to start");

      const result = await cancelRun(fx.journal, await fx.getRun(driven.runId), 20_000);
      expect(result).toEqual({ result: "cancelled", status: "cancelled" });
      const outcome = await running;
      expect(outcome.status).toBe("cancelled");
      expect(driven.root.stopReason).toBe("cancelled");
      const root = await fx.getRun(driven.runId);
      expect(root.status).toBe("cancelled");
      expect(root.control).toBeNull();
      expect((await childOf(fx, driven.runId)).status).toBe("cancelled");
      const pid = Number(readFileSync(pidFile, "utf8").trim());
      await waitUntil(() => processGone(pid), "the stage's background child to be gone");
      expect(await fx.journal.getLease(driven.runId)).toBeUndefined();
    });
  });

  test("cancelling a run nobody drives abandons the stage executions its last driver queued", async () => {
    await withEngine(async (fx) => {
      // A driver that enqueued two stages and died (its lease expired): the items are still on the queue.
      const rootId = newRunId();
      const holder = { holderId: newHolderId("root"), host: "elsewhere", pid: 1, pidStart: 0 };
      const lease = await fx.journal.acquireLease(rootId, holder, { timeoutMs: 1_000 });
      const newRun = { rootId, parentId: null, parentKey: null, depth: 0, workflowName: "gone", workflowPath: "/gone.ts", workflowDigest: "d", inputs: {} };
      await fx.journal.append(lease, [
        { runId: rootId, type: EVENT.runStarted, payload: {}, newRun },
        { runId: rootId, type: "step_started", key: "0", payload: {}, work: { id: "q-1", stageKey: "0", attempt: 1, descriptor: {} } },
        { runId: rootId, type: "step_started", key: "1", payload: {}, work: { id: "q-2", stageKey: "1", attempt: 1, descriptor: {} } },
      ]);
      expect(await fx.journal.work.claim("w-gone", 30_000, { rootId, epoch: lease.epoch })).toBeDefined();
      await waitUntil(async () => shownStatus((await fx.getRun(rootId))!, await fx.journal.getLease(rootId)) === "crashed", "the lease to expire");

      const result = await cancelRun(fx.journal, await fx.getRun(rootId), 0);
      expect(result).toEqual({ result: "cancelled", status: "cancelled" });
      expect((await fx.journal.work.list(rootId)).map((w) => w.state)).toEqual(["abandoned", "abandoned"]);
    });
  });

  test("a completed run or a child run is refused", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(workflow({ name: "r", run: (ctx) => ctx.workflow(workflow({ name: "c", run: async () => 1 }), {}) }));
      expect(out.status).toBe("completed");
      await expect(cancelRun(fx.journal, await fx.getRun(out.runId), 0)).rejects.toMatchObject({ code: "already_ended" });
      const kid = await childOf(fx, out.runId);
      await expect(cancelRun(fx.journal, kid, 0)).rejects.toMatchObject({ code: "not_root" });
    });
  });

  /** A run interrupted in a tool that waits until the run is stopped. */
  async function interrupted(fx: Engine, name: string) {
    const waiting = deferred();
    const wf = workflow({
      name,
      run: (ctx) =>
        ctx.tool("waits", {}, async ({ signal }) => {
          waiting.resolve();
          await aborted(signal);
          throw new Error("stopped");
        }),
    });
    const driven = await fx.start(wf);
    const running = driven.run();
    await waiting.promise;
    driven.stop("interrupted");
    expect((await running).status).toBe("interrupted");
    return { wf, runId: driven.runId };
  }

  test("a cancel asked of a drive that let the run go before applying it is applied by the next drive", async () => {
    await withEngine(async (fx) => {
      const { wf, runId } = await interrupted(fx, "handed-over");
      // As cancelRun asks while a live holder has the lease (resume --detach between its run_resumed and handing
      // the run to the service): only the row says it; that holder lets the run go without applying it.
      await fx.journal.requestControl(runId, "cancel");
      const outcome = (await fx.resume(runId, wf)).run();
      await waitUntil(async () => (await fx.getRun(runId)).status === "cancelled", "the resumed drive to apply the cancel asked before it");
      expect((await outcome).status).toBe("cancelled");
      const run = await fx.getRun(runId);
      expect(run.status).toBe("cancelled");
      expect(run.control).toBeNull();
    });
  });

  test("a resume whose record was read before the run was cancelled refuses, and the run stays cancelled", async () => {
    await withEngine(async (fx) => {
      const { wf, runId } = await interrupted(fx, "read-before");
      const read = await fx.getRun(runId); // the service's drive reads the run, then loads its workflow
      expect((await cancelRun(fx.journal, await fx.getRun(runId), 0)).result).toBe("cancelled"); // nobody held it then
      await expect(fx.resume(runId, wf, {}, read)).rejects.toThrow(/was cancelled and cannot be resumed/);
      expect((await fx.getRun(runId)).status).toBe("cancelled");
      expect(await fx.journal.getLease(runId)).toBeUndefined();
    });
  });
});
