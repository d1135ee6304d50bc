/**
 * The determinism rule: a resumed run must ask, at each recorded position,
 * for the step the journal recorded there. A different name, kind or
 * arguments, or a workflow that returns leaving recorded steps unvisited,
 * fails the run with one NondeterminismError (position, expected vs
 * recorded). New steps after the recorded ones are fine.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { workflow } from "../../src/sdk/index.ts";
import type { WorkflowContext } from "../../src/sdk/types.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { engineAfterEach, withEngine, type Engine } from "./helpers.ts";

afterEach(engineAfterEach);

/** Records tools "a" and "b" at positions 0 and 1, then fails at position 2 so the run can be resumed. */
async function recordedRun(fx: Engine): Promise<RunId> {
  const out = await fx.run(
    workflow({
      name: "det",
      async run(ctx) {
        await ctx.tool("a", { n: 1 }, () => "A");
        await ctx.tool("b", { n: 2 }, () => "B");
        await ctx.tool("c", {}, () => {
          throw new Error("c fails in the first run");
        }, { retries: 0 });
        return "done";
      },
    }),
  );
  expect(out.status).toBe("failed");
  return out.runId;
}

function variant(body: (ctx: WorkflowContext, calls: string[]) => Promise<unknown>) {
  const calls: string[] = [];
  return { calls, wf: workflow({ name: "det", run: (ctx) => body(ctx, calls) }) };
}

const tool = (ctx: WorkflowContext, calls: string[], name: string, args: unknown) =>
  ctx.tool(name, args, () => {
    calls.push(name);
    return name.toUpperCase();
  });

describe("nondeterminism", () => {
  test("a different step name at a recorded position fails the run, naming position, expected and recorded", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf, calls } = variant(async (ctx, calls) => {
        await tool(ctx, calls, "a", { n: 1 });
        await tool(ctx, calls, "renamed", { n: 2 });
        return "x";
      });
      const out = await fx.resumeRun(runId, wf);
      expect(out.status).toBe("failed");
      expect(out.error?.name).toBe("NondeterminismError");
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 1");
      expect(out.error?.message).toContain('asks for tool "renamed"');
      expect(out.error?.message).toContain('recorded tool "b"');
      expect(out.error?.hint).toBeTruthy();
      expect(calls).toEqual([]);
      const row = await fx.getRun(runId);
      expect(row.status).toBe("failed");
      expect(row.error?.code).toBe("nondeterminism");

      // The failed replay changed nothing: the original code still resumes.
      const fixed = variant(async (ctx, calls) => {
        await tool(ctx, calls, "a", { n: 1 });
        await tool(ctx, calls, "b", { n: 2 });
        return tool(ctx, calls, "c", {});
      });
      const again = await fx.resumeRun(runId, fixed.wf);
      expect(again.status).toBe("completed");
      expect(fixed.calls).toEqual(["c"]);
    });
  });

  test("a different kind at a recorded position fails the run", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf } = variant(async (ctx) => ctx.shell("a", "echo should not run"));
      const out = await fx.resumeRun(runId, wf);
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0");
      expect(out.error?.message).toContain('asks for stage "a"');
      expect(out.error?.message).toContain('recorded tool "a"');
      expect(fx.eventsOf("stage_output", runId)).toHaveLength(0);
    });
  });

  test("different arguments at a recorded position fail the run, and the message tells the two apart", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf, calls } = variant(async (ctx, calls) => tool(ctx, calls, "a", { n: 99 }));
      const out = await fx.resumeRun(runId, wf);
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0");
      const m = /asks for (.*), the journal recorded (.*)$/.exec(out.error!.message);
      expect(m).not.toBeNull();
      expect(m![1]).toContain('tool "a"');
      expect(m![2]).toContain('tool "a"');
      expect(m![1]).not.toBe(m![2]!);
      expect(calls).toEqual([]);
    });
  });

  test("a workflow that returns early, leaving recorded steps unvisited, fails the run", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf } = variant(async (ctx, calls) => {
        await tool(ctx, calls, "a", { n: 1 });
        return "short";
      });
      const out = await fx.resumeRun(runId, wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 1");
      expect(out.error?.message).toContain("no step (the workflow returned)");
      expect(out.error?.message).toContain('tool "b"');
    });
  });

  test("adding new steps after the recorded ones is allowed", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf, calls } = variant(async (ctx, calls) => {
        const a = await tool(ctx, calls, "a", { n: 1 });
        const b = await tool(ctx, calls, "b", { n: 2 });
        const c = await tool(ctx, calls, "c", {});
        const d = await tool(ctx, calls, "d-new", {});
        const e = (await ctx.shell("e-new", "echo E")).text.trim();
        return [a, b, c, d, e];
      });
      const out = await fx.resumeRun(runId, wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual(["A", "B", "C", "D-NEW", "E"]);
      expect(calls).toEqual(["c", "d-new"]);
    });
  });

  test("a stage recorded as started but never finished runs again with the code's new arguments; another stage there is checked", async () => {
    await withEngine(async (fx) => {
      const first = await fx.run(workflow({ name: "det-stage", run: (ctx) => ctx.shell("build", "exit 1") }));
      expect(first.status).toBe("failed");
      // Fix-and-continue: the same stage with other arguments is not a divergence, it never completed.
      const changedName = await fx.resumeRun(first.runId, workflow({ name: "det-stage", run: (ctx) => ctx.shell("compile", "exit 1") }));
      expect(changedName.error?.message).toContain('asks for stage "compile"');
      expect(changedName.error?.message).toContain('recorded stage "build"');
      const out = await fx.resumeRun(first.runId, workflow({ name: "det-stage", run: async (ctx) => (await ctx.shell("build", "echo fixed")).text.trim() }));
      expect(out.status).toBe("completed");
      expect(out.outputs).toBe("fixed");
    });
  });

  test("a changed step inside a parallel branch names the branch position", async () => {
    await withEngine(async (fx) => {
      const first = await fx.run(
        workflow({
          name: "det-par",
          run: async (ctx) =>
            ctx.parallel([
              () => ctx.tool("x", {}, () => 1),
              () => ctx.tool("y", {}, () => {
                throw new Error("y fails first");
              }, { retries: 0 }),
            ], { failFast: false }),
        }),
      );
      expect(first.status).toBe("failed");
      const out = await fx.resumeRun(
        first.runId,
        workflow({
          name: "det-par",
          run: async (ctx) => ctx.parallel([() => ctx.tool("x-renamed", {}, () => 1), () => ctx.tool("y", {}, () => 2)]),
        }),
      );
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0.0.0");
    });
  });

  test("a single step where a parallel group was recorded fails before the step runs, and the run stays resumable", async () => {
    await withEngine(async (fx) => {
      let gates = 0;
      const original = (calls: string[]) =>
        workflow({
          name: "det-group",
          run: async (ctx) => {
            const r = await ctx.parallel([() => tool(ctx, calls, "x", {}), () => tool(ctx, calls, "y", {})]);
            await ctx.tool("gate", {}, () => {
              calls.push("gate");
              if (++gates === 1) throw new Error("gate fails once");
            }, { retries: 0 });
            return r;
          },
        });
      const first = await fx.run(original([]));
      expect(first.status).toBe("failed");

      const { wf, calls } = variant(async (ctx, calls) => tool(ctx, calls, "z", {}));
      const out = await fx.resumeRun(first.runId, wf);
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0");
      expect(calls).toEqual([]);

      const calls2: string[] = [];
      const again = await fx.resumeRun(first.runId, original(calls2));
      expect(again.status).toBe("completed");
      expect(again.outputs).toEqual(["X", "Y"]);
      expect(calls2).toEqual(["gate"]);
    });
  });

  test("a parallel group where a single step was recorded fails before any branch runs", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf, calls } = variant(async (ctx, calls) => ctx.parallel([() => tool(ctx, calls, "p", {})]));
      const out = await fx.resumeRun(runId, wf);
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0");
      expect(out.error?.message).toContain('recorded tool "a"');
      expect(calls).toEqual([]);
    });
  });

  test("workflow code that catches the error cannot replay past it: the run still fails with nondeterminism", async () => {
    await withEngine(async (fx) => {
      // Recorded: "a" at 0 (checkpointed), then "b" at 1 failed (not checkpointed).
      const first = await fx.run(
        workflow({
          name: "det-catch",
          async run(ctx) {
            await ctx.tool("a", {}, () => "A");
            return ctx.tool("b", {}, () => {
              throw new Error("b fails");
            }, { retries: 0 });
          },
        }),
      );
      expect(first.status).toBe("failed");
      const swallow = (fallback: boolean) =>
        variant(async (ctx, calls) => {
          try {
            return await tool(ctx, calls, "renamed", {});
          } catch {
            return fallback ? tool(ctx, calls, "fallback", {}) : "swallowed";
          }
        });
      for (const fallback of [false, true]) {
        const { wf, calls } = swallow(fallback);
        const out = await fx.resumeRun(first.runId, wf);
        expect(out.status).toBe("failed");
        expect(out.error?.code).toBe("nondeterminism");
        expect(out.error?.message).toContain("at step 0");
        expect(out.error?.message).toContain('asks for tool "renamed"');
        expect(calls).toEqual([]);
      }
    });
  });

  test("a divergence wrapped by a group (failFast: false) still fails the run with nondeterminism", async () => {
    await withEngine(async (fx) => {
      let fails = 0;
      const body = (names: [string, string]) =>
        workflow({
          name: "det-wrap",
          run: async (ctx) => {
            await ctx.parallel([() => ctx.tool(names[0], {}, () => 1), () => ctx.tool(names[1], {}, () => 2)]);
            return ctx.tool("gate", {}, () => {
              if (++fails === 1) throw new Error("gate fails once");
            }, { retries: 0 });
          },
        });
      const first = await fx.run(body(["p", "q"]));
      expect(first.status).toBe("failed");
      const changed = workflow({
        name: "det-wrap",
        run: async (ctx) =>
          ctx.parallel([() => ctx.tool("p2", {}, () => 1), () => ctx.tool("q2", {}, () => 2)], { failFast: false }),
      });
      const out = await fx.resumeRun(first.runId, changed);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("nondeterminism");
      expect(out.error?.message).toContain("at step 0.0.0");
    });
  });

  test("a changed workflow file is announced with a warning on resume", async () => {
    await withEngine(async (fx) => {
      const runId = await recordedRun(fx);
      const { wf } = variant(async (ctx, calls) => {
        await tool(ctx, calls, "a", { n: 1 });
        await tool(ctx, calls, "b", { n: 2 });
        return tool(ctx, calls, "c", {});
      });
      const out = await fx.resumeRun(runId, wf, { digest: "sha256:other" });
      expect(out.status).toBe("completed");
      expect(fx.eventsOf("warning", runId).map((e) => e.message).join("\n")).toContain("changed since this run started");
      const resumedEvents = (await fx.journalEvents(runId)).filter((e) => e.type === "run_resumed");
      expect(resumedEvents.at(-1)!.payload).toMatchObject({ digestChanged: true, digest: "sha256:other" });
    });
  });
});
