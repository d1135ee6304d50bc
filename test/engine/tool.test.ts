/**
 * ctx.tool: a memoized side effect. Checkpointed results replay without
 * calling fn; the idempotency key is stable across attempts and resumes;
 * retries back off; exhausted retries fail the run without a checkpoint;
 * failureMode "return" checkpoints the failure; timeouts and stops abort
 * fn's signal; values are JSON round-tripped on the first run too.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { NonRetryableError, workflow } from "../../src/sdk/index.ts";
import { remainingMs } from "../../src/engine/steps/sleep.ts";
import type { ToolResult } from "../../src/sdk/types.ts";
import { aborted, deferred, engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

describe("ctx.tool", () => {
  test("a checkpointed result replays on resume without calling fn again", async () => {
    await withEngine(async (fx) => {
      const calls = { a: 0, b: 0 };
      let failB = true;
      const wf = workflow({
        name: "tool-replay",
        async run(ctx) {
          const a = await ctx.tool("a", { n: 1 }, () => {
            calls.a++;
            return { value: 41 };
          });
          const b = await ctx.tool(
            "b",
            {},
            () => {
              calls.b++;
              if (failB) throw new Error("b is down");
              return a.value + 1;
            },
            { retries: 0 },
          );
          return { a, b };
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      expect(first.error?.code).toBe("tool_failed");
      expect(calls).toEqual({ a: 1, b: 1 });

      failB = false;
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual({ a: { value: 41 }, b: 42 });
      expect(calls).toEqual({ a: 1, b: 2 });
      const replayed = fx.eventsOf("step_ended", first.runId).filter((e) => e.replayed);
      expect(replayed.map((e) => e.name)).toEqual(["a"]);
      expect((await fx.getRun(first.runId)).status).toBe("completed");
    });
  });

  test("the idempotency key is the same across retries and resumes", async () => {
    await withEngine(async (fx) => {
      const seen: { key: string; attempt: number }[] = [];
      let calls = 0;
      const wf = workflow({
        name: "tool-key",
        async run(ctx) {
          await ctx.tool("warmup", null, () => 1);
          return ctx.tool(
            "charge",
            { amount: 5 },
            ({ idempotencyKey, attempt }) => {
              seen.push({ key: idempotencyKey, attempt });
              // Two failing attempts in the first run, one more after resume, then success.
              if (++calls <= 3) throw new Error(`flaky #${calls}`);
              return "charged";
            },
            { retries: 1, backoffMs: 1 },
          );
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      const second = await fx.resumeRun(first.runId, wf);
      expect(second.status).toBe("completed");
      expect(second.outputs).toBe("charged");
      expect(seen.map((s) => s.attempt)).toEqual([1, 2, 1, 2]);
      expect(new Set(seen.map((s) => s.key))).toEqual(new Set([`${first.runId}:1`]));
    });
  });

  test("retries with backoff: two failures then success is three attempts numbered 1..3", async () => {
    await withEngine(async (fx) => {
      const attempts: number[] = [];
      const wf = workflow({
        name: "tool-retry",
        async run(ctx) {
          return ctx.tool(
            "flaky",
            {},
            ({ attempt }) => {
              attempts.push(attempt);
              if (attempt < 3) throw new Error(`attempt ${attempt} failed`);
              return `ok on ${attempt}`;
            },
            { backoffMs: 5, maxBackoffMs: 10 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toBe("ok on 3");
      expect(attempts).toEqual([1, 2, 3]);
      const cps = await fx.checkpoints(out.runId);
      expect(cps).toHaveLength(1);
      expect((cps[0]!.payload as { result: unknown }).result).toEqual({ value: "ok on 3" });
    });
  });

  test("exhausted retries fail the run with tool_failed, leave no checkpoint, and resume runs the step again", async () => {
    await withEngine(async (fx) => {
      let calls = 0;
      let healthy = false;
      const wf = workflow({
        name: "tool-exhausted",
        async run(ctx) {
          return ctx.tool(
            "always-fails",
            {},
            () => {
              calls++;
              if (!healthy) throw new Error("service unavailable");
              return "fine";
            },
            { retries: 2, backoffMs: 1 },
          );
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      expect(first.error?.code).toBe("tool_failed");
      expect(first.error?.message).toContain("after 3 attempt(s)");
      expect(first.error?.message).toContain("service unavailable");
      expect(calls).toBe(3);
      expect(await fx.checkpoints(first.runId)).toHaveLength(0);
      const row = await fx.getRun(first.runId);
      expect(row.status).toBe("failed");
      expect(row.error?.code).toBe("tool_failed");

      healthy = true;
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(calls).toBe(4);
    });
  });

  test('failureMode "return" checkpoints {ok:false, error} and replays it', async () => {
    await withEngine(async (fx) => {
      let calls = 0;
      let failLater = true;
      const wf = workflow({
        name: "tool-return",
        async run(ctx) {
          const r: ToolResult<string> = await ctx.tool(
            "soft",
            {},
            () => {
              calls++;
              throw Object.assign(new Error("quota exceeded"), { code: "quota" });
            },
            { retries: 0, failureMode: "return" },
          );
          await ctx.tool(
            "later",
            {},
            () => {
              if (failLater) throw new Error("later fails once");
            },
            { retries: 0 },
          );
          return r;
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      expect(calls).toBe(1);
      const cps = await fx.checkpoints(first.runId);
      expect(cps).toHaveLength(1);
      expect((cps[0]!.payload as { result: unknown }).result).toEqual({ error: { code: "quota", message: "quota exceeded" } });

      failLater = false;
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual({ ok: false, error: { code: "quota", message: "quota exceeded" } });
      expect(calls).toBe(1);
    });
  });

  test('failureMode "return" wraps a success as {ok:true, value}', async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "tool-return-ok",
        async run(ctx) {
          return ctx.tool("fine", {}, () => 7, { failureMode: "return" });
        },
      });
      const out = await fx.run(wf);
      expect(out.outputs).toEqual({ ok: true, value: 7 });
    });
  });

  test("timeoutMs aborts the attempt's signal and counts as a failed attempt", async () => {
    await withEngine(async (fx) => {
      const reasons: unknown[] = [];
      const wf = workflow({
        name: "tool-timeout",
        async run(ctx) {
          return ctx.tool(
            "slow",
            {},
            async ({ signal, attempt }) => {
              if (attempt === 2) return "second attempt in time";
              reasons.push(await aborted(signal));
              throw new Error("gave up");
            },
            { timeoutMs: 50, retries: 1, backoffMs: 1 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toBe("second attempt in time");
      expect(reasons).toHaveLength(1);
      expect(String((reasons[0] as Error).message)).toContain("timed out after 50 ms");
    });
  });

  test("a tool that only times out fails the run naming the timeout", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "tool-timeout-fail",
        async run(ctx) {
          return ctx.tool("hang", {}, ({ signal }) => aborted(signal).then(() => "late"), { timeoutMs: 30, retries: 0 });
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("tool_failed");
      expect(out.error?.message).toContain("timed out after 30 ms");
    });
  });

  test("stopping the run fires fn's signal; the step is not checkpointed and runs again on resume", async () => {
    await withEngine(async (fx) => {
      const called = deferred();
      let calls = 0;
      let sawAbort = false;
      const keys: string[] = [];
      const wf = workflow({
        name: "tool-stop",
        async run(ctx) {
          return ctx.tool("wait", {}, async ({ signal, idempotencyKey }) => {
            keys.push(idempotencyKey);
            if (++calls > 1) return "done";
            called.resolve();
            await aborted(signal);
            sawAbort = true;
            throw new Error("aborted");
          });
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      await called.promise;
      driven.stop("interrupted");
      const first = await running;
      expect(first.status).toBe("interrupted");
      expect(sawAbort).toBe(true);
      expect(await fx.checkpoints(driven.runId)).toHaveLength(0);
      expect((await fx.getRun(driven.runId)).status).toBe("interrupted");

      const resumed = await fx.resumeRun(driven.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toBe("done");
      expect(calls).toBe(2);
      expect(keys[0]).toBe(keys[1]!);
    });
  });

  test("a crash between fn's end and its checkpoint re-runs fn on resume with the same idempotency key", async () => {
    await withEngine(async (fx) => {
      const keys: string[] = [];
      const wf = workflow({
        name: "tool-crash",
        async run(ctx) {
          return ctx.tool("effect", { x: 1 }, ({ idempotencyKey }) => {
            keys.push(idempotencyKey);
            return "effect done";
          });
        },
      });
      const driven = await fx.start(wf);
      driven.crashOn((e) => e.type === "checkpoint");
      await driven.run();
      expect(driven.crashed).toBe(true);
      expect(await fx.checkpoints(driven.runId)).toHaveLength(0);
      expect((await fx.getRun(driven.runId)).status).toBe("running");

      const resumed = await fx.resumeRun(driven.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(keys).toHaveLength(2);
      expect(keys[0]).toBe(keys[1]!);
    });
  });

  test("a value that is not JSON (BigInt, cyclic) fails clearly without retrying", async () => {
    for (const [label, make] of [
      ["bigint", () => ({ big: 10n })],
      ["cyclic", () => {
        const o: Record<string, unknown> = {};
        o.self = o;
        return o;
      }],
    ] as const) {
      await withEngine(async (fx) => {
        let calls = 0;
        const wf = workflow({
          name: `tool-json-${label}`,
          async run(ctx) {
            return ctx.tool("weird", {}, () => {
              calls++;
              return make();
            });
          },
        });
        const out = await fx.run(wf);
        expect(out.status).toBe("failed");
        expect(out.error?.code).toBe("not_serializable");
        expect(out.error?.message).toContain('tool "weird"');
        expect(out.error?.message).toContain("cannot be stored as JSON");
        expect(calls).toBe(1);
        expect(await fx.checkpoints(out.runId)).toHaveLength(0);
      });
    }
  });

  test("values are JSON round-tripped on the first run too (a Date comes back as a string)", async () => {
    await withEngine(async (fx) => {
      const seen: unknown[] = [];
      const when = new Date("2024-05-06T07:08:09.000Z");
      const wf = workflow({
        name: "tool-json",
        async run(ctx) {
          const v = await ctx.tool("now", {}, () => ({ when, nothing: undefined, list: [1, undefined] }));
          seen.push(v);
          return v;
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      const expected = { when: "2024-05-06T07:08:09.000Z", list: [1, null] };
      expect(seen[0]).toEqual(expected);
      expect(typeof (seen[0] as { when: unknown }).when).toBe("string");
      expect(Object.keys(seen[0] as object)).toEqual(["when", "list"]);
      expect(out.outputs).toEqual(expected);
    });
  });

  test("ctx.replaying is true only while recorded steps remain to be replayed", async () => {
    await withEngine(async (fx) => {
      const seen: boolean[][] = [];
      let failB = true;
      const wf = workflow({
        name: "tool-replaying",
        async run(ctx) {
          const marks = [ctx.replaying];
          await ctx.tool("a", {}, () => 1);
          marks.push(ctx.replaying);
          seen.push(marks);
          return ctx.tool("b", {}, () => {
            if (failB) throw new Error("once");
            return 2;
          }, { retries: 0 });
        },
      });
      const first = await fx.run(wf);
      failB = false;
      await fx.resumeRun(first.runId, wf);
      expect(seen).toEqual([
        [false, false],
        [true, false],
      ]);
    });
  });

  test("a tool returning undefined replays as undefined", async () => {
    await withEngine(async (fx) => {
      let failAfter = true;
      const got: unknown[] = [];
      const wf = workflow({
        name: "tool-undefined",
        async run(ctx) {
          got.push(await ctx.tool("void", {}, () => undefined));
          await ctx.tool("after", {}, () => {
            if (failAfter) throw new Error("once");
          }, { retries: 0 });
          return "end";
        },
      });
      const first = await fx.run(wf);
      failAfter = false;
      await fx.resumeRun(first.runId, wf);
      expect(got).toEqual([undefined, undefined]);
    });
  });
});

describe("ctx.tool retry rules", () => {
  test("a NonRetryableError and a TypeError without a code are not retried; an error with a code (fetch's) is", async () => {
    await withEngine(async (fx) => {
      const calls = { permanent: 0, bug: 0, network: 0 };
      const wf = workflow({
        name: "tool-retry-rules",
        async run(ctx) {
          const opts = { backoffMs: 1, failureMode: "return" as const };
          const permanent = await ctx.tool("permanent", {}, () => {
            calls.permanent++;
            throw new NonRetryableError("gone for good", { code: "not_found" });
          }, opts);
          const bug = await ctx.tool("bug", {}, () => {
            calls.bug++;
            return (null as unknown as { x: number }).x;
          }, opts);
          const network = await ctx.tool("network", {}, () => {
            calls.network++;
            throw Object.assign(new TypeError("Unable to connect"), { code: "ECONNREFUSED" });
          }, opts);
          return { permanent, bug, network };
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(calls).toEqual({ permanent: 1, bug: 1, network: 3 });
      expect((out.outputs as { permanent: ToolResult<unknown> }).permanent).toEqual({ ok: false, error: { code: "not_found", message: "gone for good" } });
    });
  });
});

describe("ctx.sleep remainder", () => {
  test("a resumed sleep waits until its wake-up time, never longer than its duration, never negative", () => {
    expect(remainingMs(10_000, 60_000, 4_000)).toBe(6_000);
    // The clock set back ten minutes: only the duration.
    expect(remainingMs(60_000, 60_000, -600_000)).toBe(60_000);
    // The clock set forward past the wake-up time: nothing.
    expect(remainingMs(60_000, 60_000, 700_000)).toBe(0);
  });
});
