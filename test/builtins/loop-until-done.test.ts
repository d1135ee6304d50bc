/**
 * loop-until-done through dist/atomic against the scripted fake OpenAI
 * server: an invalid evaluation is re-asked, the ledger records every
 * iteration with its trend, done ends with a completion summary, the
 * iteration limit ends the run failed with the remaining work; SIGKILLed
 * at a random stage boundary and resumed it re-runs no recorded stage and
 * ends with the outputs and files of the uninterrupted run.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { toolCall, text, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, homeAndCwd, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  const work = /^You are the worker, iteration (\d+)/.exec(prompt);
  if (work) return `work-${work[1]}`;
  const evaluation = /^You are the evaluator[\s\S]*\(iteration (\d+)\)/.exec(prompt);
  if (evaluation) return `evaluate-${evaluation[1]}`;
  if (prompt.startsWith("The task is done")) return "complete";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const FAILURES: Record<string, string[]> = { "1": ["test a fails", "test b fails"], "2": ["test b fails"], "3": [] };

const answers = (stage: string, n: number): Reply => {
  const [kind, i] = stage.split("-");
  if (kind === "work") return text(`work of iteration ${i}`);
  if (kind === "evaluate") {
    if (i === "1" && n === 0) return toolCall("structured_output", { done: "maybe" });
    const failures = FAILURES[i!] ?? ["still failing"];
    return toolCall("structured_output", { done: failures.length === 0, summary: `after ${i}`, failures, remaining_work: failures.join("; ") });
  }
  if (stage === "complete") return text("all tests pass now");
  return { status: 500, body: `unexpected stage ${stage}` };
};

const INPUTS = ["prompt=make the tests pass", "model=fake-model"];

e2eTest(
  "iterations until done with a re-asked evaluation, the ledger file by file; the limit fails with the remaining work; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("loop-until-done", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual({ "work-1": 1, "evaluate-1": 2, "work-2": 1, "evaluate-2": 1, "work-3": 1, "evaluate-3": 1, complete: 1 });
      const dir = `${cwd}/.atomic/runs/loop-until-done-${r.runId}`;
      expect(r.outputs).toEqual({ done: true, iterations: 3, summary: "all tests pass now", remaining_work: "", ledger: `${dir}/progress-ledger.json`, dir });
      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["completion-summary.md", "progress-ledger.json", "work-01.md", "work-02.md", "work-03.md"]);
      expect(files["work-02.md"]).toBe("work of iteration 2");
      expect(files["completion-summary.md"]).toBe("all tests pass now");
      const ledger = JSON.parse(files["progress-ledger.json"]!);
      expect(ledger.task).toBe("make the tests pass");
      expect(ledger.iterations.map((e: { iteration: number; done: boolean; failures: string[]; trend: string; work: string }) => [e.iteration, e.done, e.failures.length, e.trend, e.work])).toEqual([
        [1, false, 2, "first", "work-01.md"],
        [2, false, 1, "improving", "work-02.md"],
        [3, true, 0, "improving", "work-03.md"],
      ]);
      // the second work stage was given the ledger and the first iteration's output
      const work2 = s.server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content ?? "").find((p) => stageOf(p) === "work-2")!;
      expect(work2).toContain('"remaining_work": "test a fails; test b fails"');
      expect(work2).toContain("Your previous iteration's output:\nwork of iteration 1");

      // the iteration limit: failed, with the remaining work
      s.counts.clear();
      const limited = homeAndCwd();
      const l = await runBuiltin("loop-until-done", [...INPUTS, "max_iterations=2"], s, limited.home, limited.cwd);
      expect(l.code).not.toBe(0);
      expect(l.status).toBe("failed");
      expect(l.outputs).toMatchObject({ done: false, iterations: 2, remaining_work: "test b fails" });
      expect(Object.keys(artifacts(`${limited.cwd}/.atomic/runs/loop-until-done-${l.runId}`))).toEqual(["progress-ledger.json", "work-01.md", "work-02.md"]);

      const order = ["work-1", "evaluate-1", "work-2", "evaluate-2", "work-3", "evaluate-3", "complete"];
      const at = pick("loop-until-done", order);
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("loop-until-done", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      const expected: Record<string, number> = { "work-1": 1, "evaluate-1": 2, "work-2": 1, "evaluate-2": 1, "work-3": 1, "evaluate-3": 1, complete: 1 };
      for (const stage of order.slice(0, order.indexOf(at))) delete expected[stage];
      expect(Object.fromEntries(s.counts)).toEqual(expected);
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/loop-until-done-${resumed.runId}`)).toEqual(files);
    } finally {
      await s.close();
    }
  },
  180_000,
);
