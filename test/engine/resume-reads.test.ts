/**
 * What a resume reads and writes before its first step, on the journal of
 * withEngine (SQLite, or Postgres under ATOMIC_TEST_JOURNAL=postgres): given
 * the events the caller read before taking the lease (as `atomic resume`
 * does, to find the workflow), it reads only those appended since; and a
 * run that never started a stage (the only steps that queue work items)
 * leaves the work queue alone. Both are round trips a Postgres resume no
 * longer pays; the run completes as before.
 */

import { afterEach, expect, test } from "bun:test";
import { RootRun } from "../../src/engine/driver.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { WorkflowDefinition } from "../../src/sdk/types.ts";
import { workflow } from "../../src/sdk/index.ts";
import { engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

/** `journal` with its readEvents calls and work-queue abandons recorded. */
function recording(journal: Journal): { journal: Journal; reads: unknown[][]; abandons: number } {
  const seen = { reads: [] as unknown[][], abandons: 0 };
  const bind = <T extends object>(target: T, wrap: Record<string, (...args: never[]) => unknown>): T =>
    new Proxy(target, {
      get(t, key) {
        if (typeof key === "string" && key in wrap) return wrap[key];
        const value = Reflect.get(t, key, t) as unknown;
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(t) : value;
      },
    });
  const work = bind(journal.work, {
    abandon: (...args: Parameters<Journal["work"]["abandon"]>) => {
      seen.abandons++;
      return journal.work.abandon(...args);
    },
  });
  const wrapped = bind(journal, {
    readEvents: (...args: Parameters<Journal["readEvents"]>) => {
      seen.reads.push(args);
      return journal.readEvents(...args);
    },
  });
  return {
    journal: new Proxy(wrapped, { get: (t, key) => (key === "work" ? work : Reflect.get(t, key)) }),
    get reads() {
      return seen.reads;
    },
    get abandons() {
      return seen.abandons;
    },
  };
}

test("a resume given the events read before its lease reads only those appended since; a run without stages leaves the work queue alone", async () => {
  await withEngine(async (fx) => {
    let healthy = false;
    const wf = workflow({
      name: "resume-reads",
      async run(ctx) {
        const a = await ctx.tool("a", 1, () => 1);
        const b = await ctx.tool(
          "b",
          2,
          () => {
            if (!healthy) throw new Error("not yet");
            return 2;
          },
          { retries: 0 },
        );
        return { sum: a + b };
      },
    });
    const first = await fx.run(wf);
    expect(first.status).toBe("failed");
    const run = await fx.getRun(first.runId);
    const recorded = await fx.journal.readEvents(first.runId);

    healthy = true;
    const seen = recording(fx.journal);
    const root = await RootRun.resume({ journal: seen.journal, home: fx.home, observer: () => {} }, run, wf as WorkflowDefinition, run.workflowDigest, undefined, undefined, recorded);
    expect(seen.reads).toEqual([[first.runId, recorded.at(-1)!.seq]]);
    expect(seen.abandons).toBe(0);
    const outcome = await root.run();
    expect(outcome.status).toBe("completed");
    expect(outcome.outputs).toEqual({ sum: 3 });
  });
});
