/**
 * ctx.sleep is durable: the wake-up time is checkpointed before the wait
 * and a resumed run reuses it. ctx.exit ends a run with a chosen status and
 * outputs. No duration is asserted: the tests check what the journal
 * recorded and whether the engine waited at all.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { assertResumable } from "../../src/engine/driver.ts";
import { v, workflow } from "../../src/sdk/index.ts";
import { buildRunReport } from "../../src/engine/run-report.ts";
import { deferred, engineAfterEach, waitUntil, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

const sleepy = (ms: number, after: () => void = () => {}) =>
  workflow({
    name: "sleepy",
    async run(ctx) {
      await ctx.tool("before", {}, () => "b");
      await ctx.sleep(ms, "nap");
      after();
      return ctx.tool("after", {}, () => "woke");
    },
  });

async function stopDuringSleep(fx: Parameters<Parameters<typeof withEngine>[0]>[0], ms: number) {
  const driven = await fx.start(sleepy(ms));
  const off = fx.onEvent((e) => {
    if (e.type === "step_started" && e.kind === "sleep" && e.runId === driven.runId) driven.stop("interrupted");
  });
  const first = await driven.run();
  off();
  expect(first.status).toBe("interrupted");
  const cps = await fx.checkpoints(driven.runId);
  const nap = cps.filter((e) => (e.payload as { kind: string }).kind === "sleep");
  expect(nap).toHaveLength(1);
  expect(nap[0]!.key).toBe("1");
  const wakeAt = (nap[0]!.payload as { result: { wakeAt: number } }).result.wakeAt;
  return { runId: driven.runId, wakeAt, sleepCheckpointSeq: nap[0]!.seq };
}

describe("ctx.sleep", () => {
  test("a run resumed before the wake-up time waits for the recorded wakeAt, not a new one", async () => {
    await withEngine(async (fx) => {
      const { runId, wakeAt, sleepCheckpointSeq } = await stopDuringSleep(fx, 1500);
      let wokeAt = 0;
      const resumed = await fx.resumeRun(runId, sleepy(1500, () => (wokeAt = Date.now())));
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toBe("woke");
      // The recorded checkpoint was reused: still exactly one sleep checkpoint, the same event.
      const naps = (await fx.checkpoints(runId)).filter((e) => (e.payload as { kind: string }).kind === "sleep");
      expect(naps.map((e) => e.seq)).toEqual([sleepCheckpointSeq]);
      // It did wait (the time was not up yet) and did not wake before the recorded time.
      const started = fx.eventsOf("step_started", runId).filter((e) => e.kind === "sleep");
      expect(started).toHaveLength(2);
      expect(wokeAt).toBeGreaterThanOrEqual(wakeAt - 5);
    });
  });

  test("a run resumed after the wake-up time does not sleep again and records no new sleep", async () => {
    await withEngine(async (fx) => {
      const { runId, wakeAt, sleepCheckpointSeq } = await stopDuringSleep(fx, 200);
      await waitUntil(() => Date.now() > wakeAt + 5, "the recorded wake-up time to pass");
      const startedBefore = fx.eventsOf("step_started", runId).length;
      const resumed = await fx.resumeRun(runId, sleepy(200));
      expect(resumed.status).toBe("completed");
      // No wait at all: no new step_started for the sleep, and the sleep is reported as replayed.
      expect(fx.eventsOf("step_started", runId).slice(startedBefore).filter((e) => e.kind === "sleep")).toHaveLength(0);
      const ended = fx.eventsOf("step_ended", runId).filter((e) => e.kind === "sleep");
      expect(ended.at(-1)).toMatchObject({ name: "nap", replayed: true, status: "completed" });
      const naps = (await fx.checkpoints(runId)).filter((e) => (e.payload as { kind: string }).kind === "sleep");
      expect(naps.map((e) => e.seq)).toEqual([sleepCheckpointSeq]);
    });
  });

  test("interrupted mid-sleep it reports waiting until wakeAt; resumed with the clock set back it waits only its duration, then reports woken", async () => {
    await withEngine(async (fx) => {
      const { runId, wakeAt } = await stopDuringSleep(fx, 300);
      let nap = (await buildRunReport(fx.journal, runId))!.steps.find((x) => x.name === "nap")!;
      expect(nap).toMatchObject({ status: "waiting", wakeAt, endedAt: null });

      // The wall clock ten minutes back (Date.now only: timers stay monotonic), and a step after the sleep that holds.
      const realNow = Date.now;
      const held = deferred<void>();
      Date.now = () => realNow() - 600_000;
      try {
        const wf = workflow({
          name: "sleepy",
          async run(ctx) {
            await ctx.tool("before", {}, () => "b");
            await ctx.sleep(300, "nap");
            return ctx.tool("after", {}, async () => {
              held.resolve();
              await new Promise(() => {});
            });
          },
        });
        const driven = await fx.resume(runId, wf);
        const outcome = driven.run();
        // Held only by a 300 ms timer: waiting for wakeAt - now would be ten minutes.
        await held.promise;
        driven.stop("interrupted");
        expect((await outcome).status).toBe("interrupted");
      } finally {
        Date.now = realNow;
      }
      // Everything recorded after it is "before" wakeAt, yet the sleep woke: a later step of its sequence started.
      nap = (await buildRunReport(fx.journal, runId))!.steps.find((x) => x.name === "nap")!;
      expect(nap).toMatchObject({ status: "completed", endedAt: wakeAt });
    });
  }, 60_000);

  test("sleep(0) completes; a negative or non-number duration is refused", async () => {
    await withEngine(async (fx) => {
      const zero = await fx.run(workflow({ name: "z", run: async (ctx) => (await ctx.sleep(0), "ok") }));
      expect(zero.outputs).toBe("ok");
      const neg = await fx.run(workflow({ name: "n", run: (ctx) => ctx.sleep(-1) }));
      expect(neg.status).toBe("failed");
      expect(neg.error?.code).toBe("bad_step");
      expect(neg.error?.message).toContain("non-negative");
      const nan = await fx.run(workflow({ name: "nan", run: (ctx) => ctx.sleep("5" as never) }));
      expect(nan.error?.code).toBe("bad_step");
    });
  });
});

describe("ctx.exit", () => {
  test("completed with outputs: the run ends at once and later code does not run", async () => {
    await withEngine(async (fx) => {
      let after = 0;
      const out = await fx.run(
        workflow({
          name: "exit-ok",
          outputs: v.string(),
          async run(ctx) {
            await ctx.tool("t", {}, () => 1);
            ctx.exit({ outputs: { short: "circuit" } });
            after++;
            return "never";
          },
        }),
      );
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ short: "circuit" });
      expect(after).toBe(0);
      const row = await fx.getRun(out.runId);
      expect(row.status).toBe("completed");
      expect(row.outputs).toEqual({ short: "circuit" });
    });
  });

  test("failed with a reason and outputs: resumable, and the reason is the error", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(
        workflow({
          name: "exit-failed",
          run: async (ctx) => ctx.exit({ status: "failed", reason: "nothing to do", outputs: { partial: [1, 2] } }),
        }),
      );
      expect(out.status).toBe("failed");
      expect(out.outputs).toEqual({ partial: [1, 2] });
      expect(out.error).toMatchObject({ code: "exit", message: "nothing to do" });
      const row = await fx.getRun(out.runId);
      expect(row.status).toBe("failed");
      expect(row.error?.message).toBe("nothing to do");
      expect(() => assertResumable(row)).not.toThrow();
    });
  });

  test("cancelled: final, not resumable", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(
        workflow({ name: "exit-cancel", run: async (ctx) => ctx.exit({ status: "cancelled", reason: "user said no", outputs: null }) }),
      );
      expect(out.status).toBe("cancelled");
      expect(out.error?.message).toBe("user said no");
      const row = await fx.getRun(out.runId);
      expect(row.status).toBe("cancelled");
      expect(() => assertResumable(row)).toThrow(/cancelled and cannot be resumed/);
    });
  });

  test("a non-JSON exit output fails the run clearly", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(workflow({ name: "exit-bigint", run: async (ctx) => ctx.exit({ outputs: 1n }) }));
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("not_serializable");
      expect(out.error?.message).toContain("ctx.exit");
      expect((await fx.getRun(out.runId)).status).toBe("failed");
    });
  });

  test("ctx.exit in a child ends the child; the parent gets its outputs", async () => {
    await withEngine(async (fx) => {
      const kid = workflow({ name: "kid-exit", run: async (ctx) => ctx.exit({ outputs: "from exit" }) });
      const out = await fx.run(workflow({ name: "p-exit", run: async (ctx) => ({ got: await ctx.workflow(kid, {}) }) }));
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ got: "from exit" });
    });
  });
});
