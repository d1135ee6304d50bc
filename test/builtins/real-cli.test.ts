/**
 * Builtins end to end with a real agent CLI as the runner of every stage:
 * fan-out-and-synthesize on the real pi CLI (test/agents) against the
 * scripted fake provider, through dist/atomic. The planner's structured
 * answer comes back as pi's final text (pi has no native structured output:
 * the runner asks for JSON and parses it), the branches and the synthesizer
 * answer in text; the outputs and files are what the openai runner's run
 * gives (fan-out-and-synthesize.test.ts). loop-until-done on pi: the
 * worker, the evaluator's structured verdict (JSON text) and the completion
 * summary. The tournament's attempts on pi are tournament.test.ts's.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { text, type Reply } from "../helpers/fake-openai.ts";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, heavyTest } from "../e2e/support.ts";
import { chatAgentSetup, MODEL } from "../helpers/chat-agents.ts";
import { artifacts, promptOf, scriptedServer } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  if (prompt.includes("You are the planner")) return "plan";
  if (prompt.includes("You are the synthesizer")) return "synthesize";
  const part = /Your part \(([^)]+)\)/.exec(prompt);
  return part ? `branch ${part[1]}` : `unknown: ${prompt.slice(0, 40)}`;
};

const PLAN = { partitions: [{ label: "Alpha", objective: "look at a" }, { label: "Gamma", objective: "look at c" }] };

const answers = (stage: string): Reply => {
  if (stage === "plan") return text(JSON.stringify(PLAN));
  if (stage === "branch Alpha") return text("alpha findings");
  if (stage === "branch Gamma") return text("gamma findings");
  if (stage === "synthesize") return text("synthesis of alpha and gamma");
  return { status: 500, body: `unexpected stage ${stage}` };
};

heavyTest("fan-out-and-synthesize with the real pi CLI running every stage", async () => {
  const s = await scriptedServer(stageOf, answers);
  try {
    const { home, cwd, env } = chatAgentSetup("pi", s.server.url);
    const inputs = ["prompt=audit the thing", "runner=pi", `model=${MODEL}`, "max_concurrency=1"];
    const r = await runAtomic(["--json", "run", "fan-out-and-synthesize", ...inputs.flatMap((i) => ["--input", i]), "--workers", "1"], { home, cwd, env: { ...env, ...s.env }, timeoutMs: 150_000 });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(Object.fromEntries(s.counts)).toEqual({ plan: 1, "branch Alpha": 1, "branch Gamma": 1, synthesize: 1 });
    expect(s.server.requests.every((q) => q.body.model === "m")).toBe(true);
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; outputs: Record<string, unknown> };
    expect(last.outputs).toMatchObject({ result: "synthesis of alpha and gamma", partitions: PLAN.partitions });
    const files = artifacts(`${cwd}/.atomic/runs/fan-out-and-synthesize-${last.runId}`);
    expect(files["synthesis.md"]).toBe("synthesis of alpha and gamma");
    expect(files["branch-01-alpha.md"]).toContain("alpha findings");
    // the synthesizer saw both branches' findings
    const synth = s.server.requests.find((q) => stageOf(promptOf(q)) === "synthesize")!;
    expect(promptOf(synth)).toContain("alpha findings");
    expect(promptOf(synth)).toContain("gamma findings");
  } finally {
    await s.close();
  }
}, 180_000);

const loopStage = (prompt: string) => {
  if (/You are the worker, iteration 1/.test(prompt)) return "work-1";
  if (/You are the evaluator[\s\S]*\(iteration 1\)/.test(prompt)) return "evaluate-1";
  if (prompt.includes("The task is done")) return "complete";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const loopAnswers = (stage: string): Reply => {
  if (stage === "work-1") return text("fixed the failing test");
  if (stage === "evaluate-1") return text(JSON.stringify({ done: true, summary: "all pass", failures: [], remaining_work: "" }));
  if (stage === "complete") return text("all tests pass now");
  return { status: 500, body: `unexpected stage ${stage}` };
};

heavyTest("loop-until-done with the real pi CLI running every stage", async () => {
  const s = await scriptedServer(loopStage, loopAnswers);
  try {
    const { home, cwd, env } = chatAgentSetup("pi", s.server.url);
    const inputs = ["prompt=make the tests pass", "runner=pi", `model=${MODEL}`];
    const r = await runAtomic(["--json", "run", "loop-until-done", ...inputs.flatMap((i) => ["--input", i]), "--workers", "1"], { home, cwd, env: { ...env, ...s.env }, timeoutMs: 150_000 });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(Object.fromEntries(s.counts)).toEqual({ "work-1": 1, "evaluate-1": 1, complete: 1 });
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; outputs: Record<string, unknown> };
    expect(last.outputs).toMatchObject({ done: true, iterations: 1 });
    const files = artifacts(`${cwd}/.atomic/runs/loop-until-done-${last.runId}`);
    expect(files["work-01.md"]).toBe("fixed the failing test");
    expect(files["completion-summary.md"]).toContain("all tests pass now");
  } finally {
    await s.close();
  }
}, 180_000);
