/**
 * ctx.shell / ctx.task: real /bin/sh stages. Output lands in files under
 * the run's artifact directory; a failed stage is journaled (step_failed),
 * not checkpointed, and runs again on resume; retries, failureMode
 * "return", timeouts and stops kill the whole process group.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { workflow } from "../../src/sdk/index.ts";
import type { StageResult } from "../../src/sdk/types.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { engineAfterEach, processGone, shQuote, waitUntil, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

const readPid = (file: string) => Number(readFileSync(file, "utf8").trim());

describe("ctx.shell", () => {
  test("stdout and stderr go to files under the run's artifacts; the result has text, exitCode, outputPath", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "shell-basic",
        async run(ctx) {
          return ctx.shell("greet", "echo hello; echo oops >&2; printf 'second line\\n'");
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      const r = out.outputs as StageResult;
      expect(r.status).toBe("completed");
      expect(r.exitCode).toBe(0);
      expect(r.text).toBe("hello\nsecond line\n");
      expect(r.outputPath.startsWith(join(fx.home, "artifacts", out.runId))).toBe(true);
      expect(r.outputPath).toContain("attempt-1");
      expect(readFileSync(r.outputPath, "utf8")).toBe("hello\nsecond line\n");
      expect(readFileSync(r.errorPath!, "utf8")).toBe("oops\n");
      const streamed = fx.eventsOf("stage_output", out.runId);
      expect(streamed.filter((e) => e.stream === "stderr").map((e) => e.text).join("")).toBe("oops\n");
      const cps = await fx.checkpoints(out.runId);
      expect(cps).toHaveLength(1);
      expect((cps[0]!.payload as { result: StageResult }).result.text).toBe(r.text);
    });
  });

  test("a non-zero exit fails the run, records step_failed without a checkpoint, and resume runs it again", async () => {
    await withEngine(async (fx) => {
      const dir = makeTempDir();
      const marker = join(dir, "marker");
      const counter = join(dir, "runs");
      let before = 0;
      const wf = workflow({
        name: "shell-fail-resume",
        async run(ctx) {
          await ctx.tool("before", {}, () => ++before);
          // First run: leaves the marker and fails; second run: the marker is there, succeed.
          return ctx.shell(
            "build",
            `echo x >> ${shQuote(counter)}; if [ -f ${shQuote(marker)} ]; then echo built; else touch ${shQuote(marker)}; echo broken >&2; exit 3; fi`,
          );
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      expect(first.error?.code).toBe("exit_code");
      expect(first.error?.message).toContain('stage "build" failed: exited with code 3');
      const events = await fx.journalEvents(first.runId);
      const failed = events.filter((e) => e.type === "step_failed");
      expect(failed).toHaveLength(1);
      expect(failed[0]!.key).toBe("1");
      expect((failed[0]!.payload as { error: { code: string } }).error.code).toBe("exit_code");
      expect(events.filter((e) => e.type === "checkpoint").map((e) => e.key)).toEqual(["0"]);

      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      const r = resumed.outputs as StageResult;
      expect(r.text).toBe("built\n");
      // Attempts number on across the resume, each in its own directory.
      expect(r.outputPath).toContain("attempt-2");
      expect(readFileSync(counter, "utf8")).toBe("x\nx\n");
      expect(before).toBe(1);
    });
  });

  test("retries: a stage failing twice then passing takes three attempts", async () => {
    await withEngine(async (fx) => {
      const counter = join(makeTempDir(), "n");
      const wf = workflow({
        name: "shell-retries",
        async run(ctx) {
          return ctx.shell(
            "flaky",
            `n=$(cat ${shQuote(counter)} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${shQuote(counter)}; echo "try $n $ATOMIC_ATTEMPT"; [ $n -ge 3 ]`,
            { retries: 2 },
          );
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect((out.outputs as StageResult).text).toBe("try 3 3\n");
      const events = await fx.journalEvents(out.runId);
      expect(events.filter((e) => e.type === "step_started").map((e) => (e.payload as { attempt: number }).attempt)).toEqual([1, 2, 3]);
      expect(events.filter((e) => e.type === "step_failed")).toHaveLength(2);
    });
  });

  test("retries run out: the run fails after retries + 1 attempts", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "shell-retries-out",
        async run(ctx) {
          return ctx.shell("never", "exit 1", { retries: 1 });
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      const events = await fx.journalEvents(out.runId);
      expect(events.filter((e) => e.type === "step_started")).toHaveLength(2);
      expect(events.filter((e) => e.type === "step_failed")).toHaveLength(2);
      expect(events.filter((e) => e.type === "checkpoint")).toHaveLength(0);
    });
  });

  test('failureMode "return": the failed result is checkpointed and replayed', async () => {
    await withEngine(async (fx) => {
      const counter = join(makeTempDir(), "n");
      let failAfter = true;
      const wf = workflow({
        name: "shell-return",
        async run(ctx) {
          const r = await ctx.shell("lint", `echo x >> ${shQuote(counter)}; echo warn; exit 2`, { failureMode: "return" });
          await ctx.tool("after", {}, () => {
            if (failAfter) throw new Error("once");
          }, { retries: 0 });
          return { status: r.status, exitCode: r.exitCode, code: r.error?.code, text: r.text };
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      failAfter = false;
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toEqual({ status: "failed", exitCode: 2, code: "exit_code", text: "warn\n" });
      expect(readFileSync(counter, "utf8")).toBe("x\n");
    });
  });

  test("timeoutMs kills the stage's whole process group, background children included", async () => {
    await withEngine(async (fx) => {
      const pidFile = join(makeTempDir(), "bg.pid");
      const wf = workflow({
        name: "shell-timeout",
        async run(ctx) {
          return ctx.shell("hang", `sleep 100 & echo $! > ${shQuote(pidFile)}; wait`, { timeoutMs: 300 });
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("timeout");
      expect(out.error?.message).toContain("timed out after 300 ms");
      const pid = readPid(pidFile);
      await waitUntil(() => processGone(pid), `background sleep ${pid} to be gone`);
    });
  });

  test("a stage that exits leaving a background child behind: the child is killed with its group", async () => {
    await withEngine(async (fx) => {
      const pidFile = join(makeTempDir(), "bg.pid");
      const wf = workflow({
        name: "shell-orphan",
        run: (ctx) => ctx.shell("leaves-child", `sleep 100 & echo $! > ${shQuote(pidFile)}; echo done`),
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect((out.outputs as StageResult).text).toBe("done\n");
      const pid = readPid(pidFile);
      await waitUntil(() => processGone(pid), `background sleep ${pid} to be gone`);
    });
  });

  test("stopping the run kills the running stage's process group; resume runs the stage again", async () => {
    await withEngine(async (fx) => {
      const dir = makeTempDir();
      const pidFile = join(dir, "bg.pid");
      const shPidFile = join(dir, "sh.pid");
      const wf = workflow({
        name: "shell-cancel",
        async run(ctx) {
          return ctx.shell(
            "long",
            `if [ -f ${shQuote(pidFile)} ]; then echo again; exit 0; fi; echo $$ > ${shQuote(shPidFile)}; sleep 100 & echo $! > ${shQuote(pidFile)}; wait`,
          );
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the stage to start");
      driven.stop("interrupted");
      const first = await running;
      expect(first.status).toBe("interrupted");
      for (const pid of [readPid(pidFile), readPid(shPidFile)]) {
        await waitUntil(() => processGone(pid), `stage process ${pid} to be gone`);
      }
      const ended = fx.eventsOf("step_ended", driven.runId);
      expect(ended.map((e) => e.status)).toEqual(["cancelled"]);
      expect(await fx.checkpoints(driven.runId)).toHaveLength(0);

      const resumed = await fx.resumeRun(driven.runId, wf);
      expect(resumed.status).toBe("completed");
      expect((resumed.outputs as StageResult).text).toBe("again\n");
    });
  });

  test("a stage that ignores SIGTERM is killed anyway when it times out", async () => {
    await withEngine(async (fx) => {
      const pidFile = join(makeTempDir(), "sh.pid");
      const wf = workflow({
        name: "shell-stubborn",
        async run(ctx) {
          return ctx.shell("stubborn", `trap '' TERM; echo $$ > ${shQuote(pidFile)}; sleep 100`, { timeoutMs: 200 });
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("timeout");
      const pid = readPid(pidFile);
      await waitUntil(() => processGone(pid), `stubborn stage ${pid} to be gone`);
    });
  });

  test("a crash of the driver (lost lease) kills the running stage and records nothing more", async () => {
    await withEngine(async (fx) => {
      const pidFile = join(makeTempDir(), "bg.pid");
      const wf = workflow({
        name: "shell-crash",
        async run(ctx) {
          return ctx.shell("long", `sleep 100 & echo $! > ${shQuote(pidFile)}; wait`);
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the stage to start");
      const before = (await fx.journalEvents(driven.runId)).length;
      driven.crash();
      driven.stop("lease_lost");
      await running;
      await waitUntil(() => processGone(readPid(pidFile)), "the background sleep to be gone");
      expect(await fx.journalEvents(driven.runId)).toHaveLength(before);
      expect((await fx.getRun(driven.runId)).status).toBe("running");
    });
  });

  test("env and cwd options reach the stage, with the ATOMIC_* variables", async () => {
    await withEngine(async (fx) => {
      const cwd = realpathSync(makeTempDir());
      const wf = workflow({
        name: "shell-env",
        async run(ctx) {
          return ctx.shell("where", 'pwd; echo "$GREETING"; echo "$ATOMIC_STAGE $ATOMIC_STAGE_KEY $ATOMIC_ATTEMPT"; echo "$ATOMIC_RUN_ID"', {
            cwd,
            env: { GREETING: "hi there" },
          });
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect((out.outputs as StageResult).text).toBe(`${cwd}\nhi there\nwhere 0 1\n${out.runId}\n`);
    });
  });
});

describe("ctx.task", () => {
  test("a shell task behaves like ctx.shell", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "task-shell",
        async run(ctx) {
          return (await ctx.task("t", { shell: "echo via task" })).text;
        },
      });
      const out = await fx.run(wf);
      expect(out.outputs).toBe("via task\n");
    });
  });

  test("a prompt whose runner cannot work here fails clearly, naming the runner, before anything runs", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "task-agent",
        async run(ctx) {
          // The default runner is openai: without a key for a remote endpoint (or without a model) it cannot start.
          return ctx.task("plan", { prompt: "Plan a fix", model: "m" });
        },
      });
      const saved = { key: process.env.OPENAI_API_KEY, url: process.env.ATOMIC_OPENAI_BASE_URL, runner: process.env.ATOMIC_RUNNER };
      delete process.env.OPENAI_API_KEY;
      delete process.env.ATOMIC_OPENAI_BASE_URL;
      delete process.env.ATOMIC_RUNNER;
      let out;
      try {
        out = await fx.run(wf);
      } finally {
        for (const [k, v] of [["OPENAI_API_KEY", saved.key], ["ATOMIC_OPENAI_BASE_URL", saved.url], ["ATOMIC_RUNNER", saved.runner]] as const) {
          if (v !== undefined) process.env[k] = v;
        }
      }
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("missing_api_key");
      expect(out.error?.message).toContain('stage "plan"');
      expect(out.error?.message).toContain("openai runner");
      expect(out.error?.hint).toContain("OPENAI_API_KEY");
      const events = await fx.journalEvents(out.runId);
      expect(events.filter((e) => e.key !== null)).toHaveLength(0);
    });
  });

  test("a named runner that does not exist is named in the failure", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "task-runner",
        async run(ctx) {
          return ctx.task("plan", { prompt: "Plan", runner: "no-such-agent" });
        },
      });
      const out = await fx.run(wf);
      expect(out.error?.code).toBe("unknown_runner");
      expect(out.error?.message).toContain('"no-such-agent"');
      expect(out.error?.hint).toContain("openai");
    });
  });

  test("a task with neither shell nor prompt is refused", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "task-empty",
        async run(ctx) {
          return ctx.task("nothing", {});
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("bad_step");
      expect(out.error?.message).toContain("needs a shell command or a prompt");
    });
  });
});
