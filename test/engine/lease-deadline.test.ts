/**
 * A driver that cannot renew its lease stops itself by its local deadline
 * (src/engine/lease-keeper.ts), whatever the reason the renewals fail: here
 * the journal answers every renewal with a storage error (a root cut off
 * from its database), which is neither a success nor a lost lease. Past the
 * deadline no tool function is called and no stage starts; the run ends
 * "interrupted" (resumable), and a resume completes it.
 */

import { afterEach, expect, test } from "bun:test";
import { workflow } from "../../src/sdk/index.ts";
import { aborted, engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

test("renewals that keep failing (not lease-lost): the driver stops at its deadline, calls no tool after it, ends resumable", async () => {
  await withEngine(async (fx) => {
    const calls: string[] = [];
    let cutOff: (() => void) | undefined;
    const wf = workflow({
      name: "cut-off",
      async run(ctx) {
        await ctx.tool("first", {}, () => calls.push("first"));
        // The driver loses its database while this step runs, which lasts until the driver stops it (at its deadline).
        await ctx.tool("long", {}, async ({ signal }) => {
          calls.push("long");
          cutOff?.();
          await aborted(signal);
          return 1;
        });
        await ctx.tool("after", {}, () => calls.push("after"));
        await ctx.shell("stage", "true");
        return { done: true };
      },
    });
    const driven = await fx.start(wf, {}, { leaseTimeoutMs: 1_000 });
    cutOff = () => driven.failRenewals();
    const outcome = await driven.run();
    expect(calls).toEqual(["first", "long"]);
    expect(outcome.status).toBe("interrupted");
    expect(outcome.error?.code).toBe("lease_lost");
    expect(outcome.error?.message).toMatch(/could not be renewed in time, so this process stopped/);
    expect(fx.eventsOf("step_started").map((e) => e.name)).not.toContain("stage");

    const resumed = await fx.resumeRun(driven.runId, wf);
    expect(resumed.status).toBe("completed");
    expect(calls).toContain("after");
  });
});
