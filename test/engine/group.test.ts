/**
 * ctx.parallel and ctx.chain: input order, the concurrency limit, failFast
 * on and off, mixed function and data steps, and replay positions that do
 * not depend on how branches interleaved (a seeded fan-out stopped halfway
 * and resumed never re-runs a checkpointed step and ends with the outputs
 * of an uninterrupted run).
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { abortableDelay } from "../../src/engine/steps/delay.ts";
import { workflow } from "../../src/sdk/index.ts";
import type { StageResult, WorkflowContext } from "../../src/sdk/types.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { aborted, deferred, engineAfterEach, processGone, seeded, shQuote, waitUntil, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

describe("ctx.parallel", () => {
  test("results come back in input order, whatever order the steps finish in", async () => {
    await withEngine(async (fx) => {
      const finished: number[] = [];
      const wf = workflow({
        name: "par-order",
        async run(ctx) {
          return ctx.parallel(
            [30, 20, 10, 0].map((ms, i) => async () => {
              const v = await ctx.tool(`t${i}`, { i }, async () => {
                await Bun.sleep(ms);
                finished.push(i);
                return `r${i}`;
              });
              return v;
            }),
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual(["r0", "r1", "r2", "r3"]);
      expect(finished).toEqual([3, 2, 1, 0]);
      const keys = (await fx.checkpoints(out.runId)).map((e) => e.key).sort();
      expect(keys).toEqual(["0.0.0", "0.1.0", "0.2.0", "0.3.0"]);
    });
  });

  test("the concurrency limit is respected", async () => {
    await withEngine(async (fx) => {
      let running = 0;
      let max = 0;
      let started = 0;
      const wf = workflow({
        name: "par-limit",
        async run(ctx) {
          return ctx.parallel(
            Array.from({ length: 10 }, (_, i) => async () =>
              ctx.tool(`t${i}`, {}, async () => {
                started++;
                max = Math.max(max, ++running);
                await Bun.sleep(5 + ((i * 7) % 11));
                running--;
                return i;
              }),
            ),
            { concurrency: 3 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(started).toBe(10);
      expect(max).toBe(3);
    });
  });

  test("failFast (default): the first failure stops new steps, cancels running ones (a stage is killed) and is the error", async () => {
    await withEngine(async (fx) => {
      const pidFile = join(makeTempDir(), "bg.pid");
      const toolWaiting = deferred();
      let toolSawAbort = false;
      const startedLate: number[] = [];
      const wf = workflow({
        name: "par-failfast",
        async run(ctx) {
          return ctx.parallel(
            [
              { name: "long-stage", shell: `sleep 100 & echo $! > ${shQuote(pidFile)}; wait` },
              async () =>
                ctx.tool("waits", {}, async ({ signal }) => {
                  toolWaiting.resolve();
                  await aborted(signal);
                  toolSawAbort = true;
                  throw new Error("aborted");
                }),
              async () => {
                await toolWaiting.promise;
                await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the stage to start");
                throw new Error("boom in step 2");
              },
              async () => {
                startedLate.push(3);
                return 3;
              },
              async () => {
                startedLate.push(4);
                return 4;
              },
            ],
            { concurrency: 3 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.message).toBe("boom in step 2");
      expect(toolSawAbort).toBe(true);
      expect(startedLate).toEqual([]);
      const pid = Number(readFileSync(pidFile, "utf8").trim());
      await waitUntil(() => processGone(pid), "the cancelled stage's background child to be gone");
      const ended = fx.eventsOf("step_ended", out.runId);
      expect(ended.find((e) => e.name === "long-stage")?.status).toBe("cancelled");
      expect(await fx.checkpoints(out.runId)).toHaveLength(0);
    });
  });

  test("failFast keeps the checkpoints of steps that finished before the failure", async () => {
    await withEngine(async (fx) => {
      const calls: Record<string, number> = {};
      let fail = true;
      const count = (name: string) => (calls[name] = (calls[name] ?? 0) + 1);
      const wf = workflow({
        name: "par-keep",
        async run(ctx) {
          const done = deferred();
          return ctx.parallel([
            async () => {
              const v = await ctx.tool("quick", {}, () => count("quick"));
              done.resolve();
              return v;
            },
            async () => {
              await done.promise;
              return ctx.tool("fails", {}, () => {
                count("fails");
                if (fail) throw new Error("fails once");
                return "ok";
              }, { retries: 0 });
            },
          ]);
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      expect((await fx.checkpoints(first.runId)).map((e) => e.key)).toEqual(["0.0.0"]);
      fail = false;
      const second = await fx.resumeRun(first.runId, wf);
      expect(second.status).toBe("completed");
      expect(second.outputs).toEqual([1, "ok"]);
      expect(calls).toEqual({ quick: 1, fails: 2 });
    });
  });

  test("failFast: false runs every step and reports each failure", async () => {
    await withEngine(async (fx) => {
      const ran: number[] = [];
      const wf = workflow({
        name: "par-all",
        async run(ctx) {
          return ctx.parallel(
            [0, 1, 2, 3, 4].map((i) => async () => {
              await Bun.sleep(i * 3);
              ran.push(i);
              if (i === 1 || i === 3) throw new Error(`step ${i} broke`);
              return ctx.tool(`t${i}`, {}, () => i);
            }),
            { failFast: false, concurrency: 2 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("group_failed");
      expect(out.error?.message).toContain("2 of 5 steps of ctx.parallel failed");
      expect(out.error?.message).toContain("#1: step 1 broke");
      expect(out.error?.message).toContain("#3: step 3 broke");
      expect(ran.sort()).toEqual([0, 1, 2, 3, 4]);
      expect((await fx.checkpoints(out.runId)).map((e) => e.key).sort()).toEqual(["0.0.0", "0.2.0", "0.4.0"]);
    });
  });

  test("failFast: false with a single failure rejects with that failure", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "par-one",
        async run(ctx) {
          return ctx.parallel(
            [{ name: "ok", shell: "true" }, { name: "bad", shell: "exit 7" }],
            { failFast: false },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("exit_code");
      expect(out.error?.message).toContain('stage "bad" failed: exited with code 7');
    });
  });

  test("function steps and data steps mix", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "par-mixed",
        async run(ctx) {
          const [a, b, c] = await ctx.parallel([
            { name: "data-stage", shell: "echo from data" },
            async () => ctx.tool("fn-tool", {}, () => "from fn"),
            async () => (await ctx.shell("fn-stage", "echo from fn stage")).text,
          ]);
          return { a: (a as StageResult).text, b, c };
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ a: "from data\n", b: "from fn", c: "from fn stage\n" });
      const keys = (await fx.checkpoints(out.runId)).map((e) => e.key).sort();
      // A data step is the branch's first step; a function step's primitives number from 0 in its branch.
      expect(keys).toEqual(["0.0.0", "0.1.0", "0.2.0"]);
    });
  });

  test("an empty group resolves to an empty list", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(workflow({ name: "par-empty", run: async (ctx) => [await ctx.parallel([]), await ctx.chain([])] }));
      expect(out.outputs).toEqual([[], []]);
    });
  });

  test("a step that is neither a function nor {name, shell|prompt} is refused", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "par-bad",
        async run(ctx) {
          return ctx.parallel([42 as never]);
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("bad_step");
    });
  });

  test("ctx.exit inside a parallel branch ends the run with the exit's status and outputs", async () => {
    await withEngine(async (fx) => {
      let after = 0;
      const wf = workflow({
        name: "par-exit",
        async run(ctx) {
          await ctx.parallel([
            async () => ctx.exit({ status: "completed", outputs: { early: true } }),
            async () => ctx.tool("sibling", {}, () => "x"),
          ]);
          after++;
          return { early: false };
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ early: true });
      expect(after).toBe(0);
    });
  });

  describe("replay positions are deterministic", () => {
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      test(`seed ${seed}: a fan-out stopped halfway and resumed re-runs nothing checkpointed and ends with the same outputs`, async () => {
        const N = 10;
        const rand = seeded(seed);
        const delay = new Map<string, number>();
        for (let i = 0; i < N; i++) for (const s of ["a", "b"]) delay.set(`${s}${i}`, Math.floor(rand() * 15));

        const makeWorkflow = (calls: Map<string, number>) =>
          workflow({
            name: "fanout",
            async run(ctx: WorkflowContext) {
              const call = (name: string, value: () => number) => async ({ signal }: { signal: AbortSignal }) => {
                calls.set(name, (calls.get(name) ?? 0) + 1);
                await abortableDelay(delay.get(name)!, signal);
                return value();
              };
              const results = await ctx.parallel(
                Array.from({ length: N }, (_, i) => async () => {
                  const a = await ctx.tool(`a${i}`, { i }, call(`a${i}`, () => i * 10));
                  const b = await ctx.tool(`b${i}`, { a }, call(`b${i}`, () => a + i + 1));
                  return [a, b];
                }),
                { concurrency: 4 },
              );
              return { results, total: (results.flat() as number[]).reduce((x, y) => x + y, 0) };
            },
          });

        await withEngine(async (fx) => {
          const baseline = await fx.run(makeWorkflow(new Map()));
          expect(baseline.status).toBe("completed");

          const firstCalls = new Map<string, number>();
          const driven = await fx.start(makeWorkflow(firstCalls));
          let done = 0;
          const off = fx.onEvent((e) => {
            if (e.type === "step_ended" && e.runId === driven.runId && e.status === "completed" && ++done === N) driven.stop("interrupted");
          });
          const first = await driven.run();
          off();
          expect(first.status).toBe("interrupted");

          const recorded = await fx.checkpoints(driven.runId);
          const recordedNames = new Set(recorded.map((e) => (e.payload as { name: string }).name));
          expect(recordedNames.size).toBeGreaterThanOrEqual(N);
          expect(recordedNames.size).toBeLessThan(2 * N);

          const resumeCalls = new Map<string, number>();
          const resumed = await fx.resumeRun(driven.runId, makeWorkflow(resumeCalls));
          expect(resumed.status).toBe("completed");
          expect(resumed.outputs).toEqual(baseline.outputs!);
          for (const name of resumeCalls.keys()) expect(recordedNames.has(name)).toBe(false);
          for (const name of delay.keys()) expect(recordedNames.has(name) || resumeCalls.get(name) === 1).toBe(true);

          // Every step sits at the position its place in the code gives it.
          const all = await fx.checkpoints(driven.runId);
          expect(all).toHaveLength(2 * N);
          for (const e of all) {
            const name = (e.payload as { name: string }).name;
            const i = Number(name.slice(1));
            expect(e.key).toBe(`0.${i}.${name[0] === "a" ? 0 : 1}`);
          }
          const replayed = fx.eventsOf("step_ended", driven.runId).filter((e) => e.replayed).map((e) => e.name);
          expect(new Set(replayed)).toEqual(recordedNames);
        });
      });
    }
  });
});

describe("ctx.chain", () => {
  test("steps run one after another, results in order", async () => {
    await withEngine(async (fx) => {
      const log: string[] = [];
      const wf = workflow({
        name: "chain",
        async run(ctx) {
          return ctx.chain([
            async () => {
              log.push("start 0");
              const v = await ctx.tool("t0", {}, async () => {
                await Bun.sleep(20);
                return "zero";
              });
              log.push("end 0");
              return v;
            },
            { name: "s1", shell: "echo one" },
            async () => {
              log.push("start 2");
              const v = await ctx.tool("t2", {}, () => "two");
              log.push("end 2");
              return v;
            },
          ]);
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      const [a, b, c] = out.outputs as [string, StageResult, string];
      expect([a, b.text, c]).toEqual(["zero", "one\n", "two"]);
      expect(log).toEqual(["start 0", "end 0", "start 2", "end 2"]);
    });
  });

  test("a failing step stops the chain: later steps never start", async () => {
    await withEngine(async (fx) => {
      const started: number[] = [];
      const wf = workflow({
        name: "chain-fail",
        async run(ctx) {
          return ctx.chain([0, 1, 2].map((i) => async () => {
            started.push(i);
            if (i === 1) throw new Error("link 1 broke");
            return i;
          }));
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.message).toBe("link 1 broke");
      expect(started).toEqual([0, 1]);
    });
  });
});
