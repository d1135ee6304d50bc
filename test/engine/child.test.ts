/**
 * ctx.workflow: a child workflow is a run of its own (own id, parent and
 * root recorded), its inputs are validated, nesting stops at depth 3, an
 * interrupted child resumes under the same id replaying its finished steps,
 * and a finished child's outputs are checkpointed in the parent.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { v, workflow } from "../../src/sdk/index.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { aborted, deferred, engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

const greet = workflow({
  name: "greet",
  inputs: { who: v.string(), punct: v.optional(v.string(), "!") },
  outputs: v.object({ greeting: v.string() }),
  async run(ctx) {
    const greeting = await ctx.tool("compose", { who: ctx.inputs.who }, () => `hello ${ctx.inputs.who}${ctx.inputs.punct}`);
    return { greeting };
  },
});

describe("ctx.workflow", () => {
  test("a child gets its own run id, with parentId, rootId and depth recorded; its outputs come back", async () => {
    await withEngine(async (fx) => {
      const parent = workflow({
        name: "parent",
        async run(ctx) {
          const a = await ctx.workflow(greet, { who: "ada" });
          return { a, childInputs: null };
        },
      });
      const out = await fx.run(parent);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ a: { greeting: "hello ada!" }, childInputs: null });

      const children = await fx.journal.listRuns({ parentId: out.runId, rootsOnly: false });
      expect(children).toHaveLength(1);
      const child = children[0]!;
      expect(child.id).not.toBe(out.runId);
      expect(child.parentId).toBe(out.runId);
      expect(child.rootId).toBe(out.runId);
      expect(child.depth).toBe(1);
      expect(child.parentKey).toBe("0");
      expect(child.workflowName).toBe("greet");
      expect(child.inputs).toEqual({ who: "ada", punct: "!" });
      expect(child.status).toBe("completed");
      expect(child.outputs).toEqual({ greeting: "hello ada!" });
      // The child's steps are journaled under its own id.
      expect((await fx.checkpoints(child.id)).map((e) => e.key)).toEqual(["0"]);
      const parentCps = await fx.checkpoints(out.runId);
      expect(parentCps).toHaveLength(1);
      expect(parentCps[0]!.payload).toMatchObject({ kind: "child", name: "greet", result: { greeting: "hello ada!" }, childRunId: child.id });
      expect(fx.eventsOf("step_started", out.runId)[0]).toMatchObject({ kind: "child", childRunId: child.id });
      expect((await fx.getRun(out.runId)).parentId).toBeNull();
    });
  });

  test("a missing child input fails clearly, naming the key", async () => {
    await withEngine(async (fx) => {
      const parent = workflow({
        name: "parent-missing",
        async run(ctx) {
          return ctx.workflow(greet, {});
        },
      });
      const out = await fx.run(parent);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("missing_input");
      expect(out.error?.message).toContain('child workflow "greet"');
      expect(out.error?.message).toContain('input "who" is required');
      expect(await fx.journal.listRuns({ parentId: out.runId, rootsOnly: false })).toHaveLength(0);
    });
  });

  test("a bad or unknown child input is refused, naming the key", async () => {
    await withEngine(async (fx) => {
      const bad = await fx.run(workflow({ name: "p-bad", run: (ctx) => ctx.workflow(greet, { who: 42 as never }) }));
      expect(bad.error?.code).toBe("bad_input");
      expect(bad.error?.message).toContain('input "who" is invalid');
      const unknown = await fx.run(workflow({ name: "p-unknown", run: (ctx) => ctx.workflow(greet, { who: "x", colour: "red" } as never) }));
      expect(unknown.error?.code).toBe("unknown_input");
      expect(unknown.error?.message).toContain('"colour"');
    });
  });

  test("nesting is limited to depth 3: a fourth level fails with child_depth", async () => {
    await withEngine(async (fx) => {
      const reached: number[] = [];
      const leaf = workflow({
        name: "leaf",
        async run(ctx) {
          reached.push(4);
          return ctx.tool("leaf-tool", {}, () => "too deep");
        },
      });
      const level = (n: number, inner: ReturnType<typeof workflow>) =>
        workflow({
          name: `level${n}`,
          async run(ctx) {
            reached.push(n);
            return ctx.workflow(inner, {});
          },
        });
      // root (depth 0) -> level1 -> level2 -> level3 (depth 3) -> leaf (depth 4)
      const l3 = level(3, leaf);
      const root = level(0, level(1, level(2, l3)));
      const out = await fx.run(root);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("child_depth");
      expect(out.error?.message).toContain("depth 4");
      expect(out.error?.message).toContain("the limit is 3");
      expect(reached).toEqual([0, 1, 2, 3]);

      // Depth 3 itself is allowed.
      const fine = workflow({ name: "fine", run: (ctx) => ctx.tool("deep", {}, () => "deep enough") });
      const ok = await fx.run(level(0, level(1, level(2, fine))));
      expect(ok.status).toBe("completed");
      expect(ok.outputs).toBe("deep enough");
      const depths: number[] = [];
      let id: RunId = ok.runId;
      for (;;) {
        const [c] = await fx.journal.listRuns({ parentId: id, rootsOnly: false });
        if (!c) break;
        depths.push(c.depth);
        expect(c.rootId).toBe(ok.runId);
        id = c.id;
      }
      expect(depths).toEqual([1, 2, 3]);
    });
  });

  test("a child interrupted mid-way resumes under the same id, replaying its finished steps", async () => {
    await withEngine(async (fx) => {
      const calls = { first: 0, second: 0 };
      const waiting = deferred();
      const child = workflow({
        name: "kid",
        async run(ctx) {
          const a = await ctx.tool("first", {}, () => ++calls.first);
          const b = await ctx.tool("second", {}, async ({ signal }) => {
            if (++calls.second === 1) {
              waiting.resolve();
              await aborted(signal);
              throw new Error("stopped");
            }
            return 20;
          });
          return { a, b };
        },
      });
      const parent = workflow({
        name: "parent-resume",
        async run(ctx) {
          const r = await ctx.workflow(child, {});
          return { child: r };
        },
      });
      const driven = await fx.start(parent);
      const running = driven.run();
      await waiting.promise;
      driven.stop("interrupted");
      const first = await running;
      expect(first.status).toBe("interrupted");
      const [kid] = await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false });
      expect(kid!.status).toBe("interrupted");

      const resumed = await fx.resumeRun(driven.runId, parent);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual({ child: { a: 1, b: 20 } });
      expect(calls).toEqual({ first: 1, second: 2 });
      const kids = await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false });
      expect(kids.map((k) => k.id)).toEqual([kid!.id]);
      expect(kids[0]!.status).toBe("completed");
      const kidResumed = fx.eventsOf("run_started", kid!.id);
      expect(kidResumed.map((e) => e.resumed)).toEqual([false, true]);
      expect(fx.eventsOf("step_ended", kid!.id).filter((e) => e.replayed).map((e) => e.name)).toEqual(["first"]);
      const types = (await fx.journalEvents(kid!.id)).map((e) => e.type);
      expect(types.filter((t) => t === "run_resumed")).toHaveLength(1);
    });
  });

  test("a finished child's outputs are checkpointed in the parent: resume does not run the child again", async () => {
    await withEngine(async (fx) => {
      let composed = 0;
      let childRuns = 0;
      let failAfter = true;
      const counted = workflow({
        name: "counted",
        inputs: { n: v.number() },
        async run(ctx) {
          childRuns++;
          return ctx.tool("double", { n: ctx.inputs.n }, () => {
            composed++;
            return ctx.inputs.n * 2;
          });
        },
      });
      const parent = workflow({
        name: "parent-cp",
        async run(ctx) {
          const d = await ctx.workflow(counted, { n: 21 }, { name: "doubler" });
          await ctx.tool("after", {}, () => {
            if (failAfter) throw new Error("after fails once");
          }, { retries: 0 });
          return d;
        },
      });
      const first = await fx.run(parent);
      expect(first.status).toBe("failed");
      failAfter = false;
      const resumed = await fx.resumeRun(first.runId, parent);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toBe(42);
      expect(composed).toBe(1);
      expect(childRuns).toBe(1);
      const ended = fx.eventsOf("step_ended", first.runId).filter((e) => e.kind === "child");
      expect(ended.map((e) => [e.name, e.replayed])).toEqual([["doubler", false], ["doubler", true]]);
    });
  });

  test("a child that failed resumes under the same id: its finished steps replay, the failed one runs again", async () => {
    await withEngine(async (fx) => {
      const calls = { ok: 0, flaky: 0 };
      const kid = workflow({
        name: "kid-fails",
        async run(ctx) {
          const a = await ctx.tool("ok", {}, () => ++calls.ok);
          const b = await ctx.tool("flaky", {}, () => {
            if (++calls.flaky === 1) throw new Error("first time fails");
            return "b";
          }, { retries: 0 });
          return [a, b];
        },
      });
      const parent = workflow({ name: "p-kid-fails", run: (ctx) => ctx.workflow(kid, {}) });
      const first = await fx.run(parent);
      expect(first.status).toBe("failed");
      expect(first.error?.code).toBe("tool_failed");
      const [k1] = await fx.journal.listRuns({ parentId: first.runId, rootsOnly: false });
      expect(k1!.status).toBe("failed");

      const resumed = await fx.resumeRun(first.runId, parent);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual([1, "b"]);
      expect(calls).toEqual({ ok: 1, flaky: 2 });
      const kids = await fx.journal.listRuns({ parentId: first.runId, rootsOnly: false });
      expect(kids.map((k) => [k.id, k.status])).toEqual([[k1!.id, "completed"]]);
    });
  });

  test("children started in parallel and interrupted each resume under their own id", async () => {
    await withEngine(async (fx) => {
      const calls = new Map<string, number>();
      const bump = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1);
      const stopNow = deferred();
      let waitingKids = 0;
      const kid = workflow({
        name: "pkid",
        inputs: { tag: v.string() },
        async run(ctx) {
          const tag = ctx.inputs.tag;
          await ctx.tool("one", { tag }, () => bump(`${tag}:one`));
          return ctx.tool("two", { tag }, async ({ signal }) => {
            bump(`${tag}:two`);
            if (calls.get(`${tag}:two`) === 1) {
              if (++waitingKids === 2) stopNow.resolve();
              await aborted(signal);
              throw new Error("stopped");
            }
            return `${tag} done`;
          });
        },
      });
      const parent = workflow({
        name: "p-par-kids",
        run: (ctx) =>
          ctx.parallel([
            () => ctx.workflow(kid, { tag: "x" }, { name: "kid-x" }),
            () => ctx.workflow(kid, { tag: "y" }, { name: "kid-y" }),
          ]),
      });
      const driven = await fx.start(parent);
      const running = driven.run();
      await stopNow.promise;
      driven.stop("interrupted");
      expect((await running).status).toBe("interrupted");
      const before = (await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false })).map((k) => k.id).sort();
      expect(before).toHaveLength(2);

      const resumed = await fx.resumeRun(driven.runId, parent);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual(["x done", "y done"]);
      const after = await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false });
      expect(after.map((k) => k.id).sort()).toEqual(before);
      expect(after.every((k) => k.status === "completed")).toBe(true);
      expect(Object.fromEntries(calls)).toEqual({ "x:one": 1, "y:one": 1, "x:two": 2, "y:two": 2 });
    });
  });

  test("a crash after the child finished but before the parent's checkpoint replays the child without re-running its steps", async () => {
    await withEngine(async (fx) => {
      let calls = 0;
      const kid = workflow({ name: "kid-done", run: (ctx) => ctx.tool("work", {}, () => ++calls) });
      const parent = workflow({ name: "p-crash", run: async (ctx) => ({ got: await ctx.workflow(kid, {}) }) });
      const driven = await fx.start(parent);
      driven.crashOn((e) => e.type === "checkpoint" && e.runId === driven.runId);
      await driven.run();
      expect(driven.crashed).toBe(true);
      const [k] = await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false });
      expect(k!.status).toBe("completed");
      expect(await fx.checkpoints(driven.runId)).toHaveLength(0);

      const resumed = await fx.resumeRun(driven.runId, parent);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual({ got: 1 });
      expect(calls).toBe(1);
      expect((await fx.journal.listRuns({ parentId: driven.runId, rootsOnly: false })).map((r) => r.id)).toEqual([k!.id]);
    });
  });

  test("a failed child fails the parent with the child's code and run id", async () => {
    await withEngine(async (fx) => {
      const broken = workflow({
        name: "broken",
        async run(ctx) {
          return ctx.shell("bad", "exit 5");
        },
      });
      const out = await fx.run(workflow({ name: "p-broken", run: (ctx) => ctx.workflow(broken, {}) }));
      expect(out.status).toBe("failed");
      const [kid] = await fx.journal.listRuns({ parentId: out.runId, rootsOnly: false });
      expect(kid!.status).toBe("failed");
      expect(out.error?.code).toBe("exit_code");
      expect(out.error?.message).toContain(kid!.id);
      expect(out.error?.hint).toContain(`atomic show ${kid!.id}`);
    });
  });

  test("ctx.workflow refuses something that is not a workflow", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(workflow({ name: "p-notwf", run: (ctx) => ctx.workflow({ name: "x" } as never, {}) }));
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("bad_step");
    });
  });
});
