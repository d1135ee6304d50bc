/**
 * buildRunReport: what `show` and `logs` know about a run, folded from the
 * journal: step statuses and attempts, stage files, child reports nested
 * under their boundary step, and the run's shown status (running, crashed).
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { buildRunReport, flattenStages, type RunReport } from "../../src/engine/run-report.ts";
import { workflow } from "../../src/sdk/index.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { aborted, deferred, engineAfterEach, shQuote, waitUntil, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

async function report(journal: Parameters<typeof buildRunReport>[0], runId: RunId): Promise<RunReport> {
  const r = await buildRunReport(journal, runId);
  expect(r).toBeDefined();
  return r!;
}

describe("buildRunReport", () => {
  test("a finished run: step statuses, attempts, stage files and a nested child", async () => {
    await withEngine(async (fx) => {
      const counter = join(makeTempDir(), "n");
      const kid = workflow({
        name: "review",
        async run(ctx) {
          await ctx.shell("security", "echo secure");
          return ctx.tool("verdict", { strict: true }, () => ({ ok: true }));
        },
      });
      const wf = workflow({
        name: "report",
        async run(ctx) {
          await ctx.tool("fetch", {}, () => "data");
          await ctx.shell("flaky", `n=$(cat ${shQuote(counter)} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${shQuote(counter)}; [ $n -ge 2 ]`, { retries: 1 });
          await ctx.shell("lint", "echo lint-out; exit 3", { failureMode: "return" });
          await ctx.tool("soft", {}, () => {
            throw new Error("nope");
          }, { retries: 0, failureMode: "return" });
          await ctx.sleep(0, "pause");
          return ctx.workflow(kid, {});
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      const r = await report(fx.journal, out.runId);
      expect(r.status).toBe("completed");
      expect(r.holder).toBeUndefined();
      expect(r.steps.map((s) => [s.position, s.kind, s.name, s.status, s.attempts])).toEqual([
        ["0", "tool", "fetch", "completed", 1],
        ["1", "stage", "flaky", "completed", 2],
        ["2", "stage", "lint", "failed", 1],
        ["3", "tool", "soft", "failed", 1],
        ["4", "sleep", "pause", "completed", 1],
        ["5", "child", "review", "completed", 1],
      ]);
      const [fetch, flaky, lint, soft, , child] = r.steps;
      expect(fetch!.result).toBe("data");
      expect(flaky!.exitCode).toBe(0);
      expect(flaky!.outputPath).toContain("attempt-2");
      expect(lint!.exitCode).toBe(3);
      expect(lint!.error?.code).toBe("exit_code");
      expect(readFileSync(lint!.outputPath!, "utf8")).toBe("lint-out\n");
      expect(soft!.error).toMatchObject({ code: "error", message: "nope" });
      expect(child!.childRunId).toBeDefined();
      expect(child!.result).toEqual({ ok: true });
      expect(child!.child?.run.id as string | undefined).toBe(child!.childRunId!);
      expect(child!.child?.run.parentId).toBe(out.runId);
      expect(child!.child?.steps.map((s) => [s.kind, s.name, s.status])).toEqual([
        ["stage", "security", "completed"],
        ["tool", "verdict", "completed"],
      ]);
      expect(flattenStages(r).map((s) => s.path)).toEqual(["flaky", "lint", "review/security"]);
      for (const s of r.steps) {
        expect(s.endedAt).not.toBeNull();
        expect(s.startedAt).not.toBeNull();
      }
    });
  });

  test("a failed stage shows failed with its error and attempts; an interrupted stage shows stopped", async () => {
    await withEngine(async (fx) => {
      const failed = await fx.run(workflow({ name: "fails", run: (ctx) => ctx.shell("bad", "echo err >&2; exit 4", { retries: 2 }) }));
      const rf = await report(fx.journal, failed.runId);
      expect(rf.status).toBe("failed");
      expect(rf.steps).toHaveLength(1);
      expect(rf.steps[0]).toMatchObject({ name: "bad", status: "failed", attempts: 3, error: { code: "exit_code" } });
      expect(rf.steps[0]!.errorPath).toBeDefined();
      expect(readFileSync(rf.steps[0]!.errorPath!, "utf8")).toBe("err\n");

      const pidFile = join(makeTempDir(), "pid");
      const driven = await fx.start(workflow({ name: "stops", run: (ctx) => ctx.shell("long", `echo $$ > ${shQuote(pidFile)}; sleep 100`) }));
      const running = driven.run();
      await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the stage to start");
      const live = await report(fx.journal, driven.runId);
      expect(live.status).toBe("running");
      expect(live.holder?.pid).toBe(process.pid);
      expect(live.steps[0]).toMatchObject({ name: "long", status: "running", attempts: 1 });
      expect(live.steps[0]!.outputPath).toBe(join(live.steps[0]!.artifactDir!, "stdout.log"));
      driven.stop("interrupted");
      await running;
      const stopped = await report(fx.journal, driven.runId);
      expect(stopped.status).toBe("interrupted");
      expect(stopped.steps[0]).toMatchObject({ name: "long", status: "stopped", endedAt: stopped.run.endedAt })
      expect(stopped.steps[0]!.endedAt).not.toBeNull();
    });
  });

  test("a crashed run shows crashed with its lease expiry, and so does its running child", async () => {
    await withEngine(async (fx) => {
      const waiting = deferred();
      const kid = workflow({
        name: "kid",
        run: (ctx) =>
          ctx.tool("waits", {}, async ({ signal }) => {
            waiting.resolve();
            await aborted(signal);
            throw new Error("stopped");
          }),
      });
      const driven = await fx.start(workflow({ name: "crashy", run: (ctx) => ctx.workflow(kid, {}) }), {}, { leaseTimeoutMs: 300 });
      const running = driven.run();
      await waiting.promise;
      driven.crash();
      await running;
      const r = await waitUntil(async () => {
        const rep = await report(fx.journal, driven.runId);
        return rep.status === "crashed" ? rep : undefined;
      }, "the run to show as crashed");
      expect(r.leaseExpiresAt).toBeGreaterThan(0);
      expect(r.steps[0]).toMatchObject({ kind: "child", status: "stopped" });
      expect(r.steps[0]!.child?.status).toBe("crashed");
    });
  });

  test("an unknown run has no report", async () => {
    await withEngine(async (fx) => {
      expect(await buildRunReport(fx.journal, "0000000000zzzzzzzz" as RunId)).toBeUndefined();
    });
  });
});
