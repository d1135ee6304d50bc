/**
 * fan-out-and-synthesize through dist/atomic against the scripted fake
 * OpenAI server: the planner's first structured answer is invalid and
 * re-asked, one branch gets a provider error (the others go on), the
 * artifacts are checked file by file; then a run SIGKILLed while a stage
 * (picked at random among the stage boundaries) is in flight and resumed
 * re-runs no recorded stage and ends with the outputs and files of the
 * uninterrupted run.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { toolCall, text, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, homeAndCwd, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  if (prompt.startsWith("You are the planner")) return "plan";
  if (prompt.startsWith("You are the synthesizer")) return "synthesize";
  const part = /Your part \(([^)]+)\)/.exec(prompt);
  return part ? `branch ${part[1]}` : `unknown: ${prompt.slice(0, 40)}`;
};

const PLAN = { partitions: [{ label: "Alpha", objective: "look at a" }, { label: "Beta Two", objective: "look at b" }, { label: "Gamma", objective: "look at c" }] };

const answers = (stage: string, n: number): Reply => {
  switch (stage) {
    case "plan":
      return n === 0 ? toolCall("structured_output", { partitions: [] }) : toolCall("structured_output", PLAN);
    case "branch Alpha":
      return text("alpha findings");
    case "branch Beta Two":
      return { status: 400, body: JSON.stringify({ error: { message: "the model refused this part" } }) };
    case "branch Gamma":
      return text("gamma findings");
    case "synthesize":
      return text("synthesis of alpha and gamma");
    default:
      return { status: 500, body: `unexpected stage ${stage}` };
  }
};

const INPUTS = ["prompt=audit the thing", "model=fake-model", "max_concurrency=1"];

e2eTest(
  "plan re-asked, a branch's provider error kept, artifacts file by file; SIGKILL at a stage boundary and resume re-runs nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("fan-out-and-synthesize", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual({ plan: 2, "branch Alpha": 1, "branch Beta Two": 1, "branch Gamma": 1, synthesize: 1 });
      const dir = `${cwd}/.atomic/runs/fan-out-and-synthesize-${r.runId}`;
      expect(r.outputs).toEqual({
        result: "synthesis of alpha and gamma",
        partitions: PLAN.partitions,
        branches: [`${dir}/branch-01-alpha.md`, `${dir}/branch-02-beta-two.md`, `${dir}/branch-03-gamma.md`],
        synthesis: `${dir}/synthesis.md`,
        dir,
      });
      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["branch-01-alpha.md", "branch-02-beta-two.md", "branch-03-gamma.md", "manifest.json", "partition-plan.json", "synthesis.md"]);
      expect(JSON.parse(files["partition-plan.json"]!)).toEqual({ partitions: PLAN.partitions, fallback: false, planner_error: null });
      expect(files["branch-01-alpha.md"]).toBe("alpha findings");
      expect(files["branch-02-beta-two.md"]).toMatch(/^\(this branch failed: .*the model refused this part/);
      expect(files["branch-03-gamma.md"]).toBe("gamma findings");
      expect(files["synthesis.md"]).toBe("synthesis of alpha and gamma");
      const manifest = JSON.parse(files["manifest.json"]!).branches;
      expect(manifest.map((b: { file: string; status: string }) => [b.file, b.status])).toEqual([
        ["branch-01-alpha.md", "completed"],
        ["branch-02-beta-two.md", "failed"],
        ["branch-03-gamma.md", "completed"],
      ]);
      // the synthesizer saw the two branches that completed and was told one part failed
      const synth = s.server.requests.find((q) => stageOf(q.body.messages.find((m) => m.role === "user")!.content ?? "") === "synthesize")!;
      const synthPrompt = synth.body.messages.find((m) => m.role === "user")!.content!;
      expect(synthPrompt).toContain("## Alpha\nalpha findings");
      expect(synthPrompt).toContain("1 of 3 parts failed");
      expect(synthPrompt).not.toContain("## Beta Two");

      // killed while one stage's request is in flight, then resumed
      const order = ["branch Alpha", "branch Beta Two", "branch Gamma", "synthesize"];
      const at = pick("fan-out-and-synthesize", order);
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("fan-out-and-synthesize", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      const expected: Record<string, number> = { "branch Alpha": 1, "branch Beta Two": 1, "branch Gamma": 1, synthesize: 1 };
      for (const stage of order.slice(0, order.indexOf(at))) delete expected[stage];
      expect(Object.fromEntries(s.counts)).toEqual(expected);
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/fan-out-and-synthesize-${resumed.runId}`)).toEqual(files);
    } finally {
      await s.close();
    }
  },
  180_000,
);

e2eTest("a plan that stays invalid after the re-asks falls back to one partition holding the whole task", async () => {
  const s = await scriptedServer(stageOf, (stage) => {
    if (stage === "plan") return toolCall("structured_output", { partitions: [] });
    if (stage === "branch task") return text("did it all");
    if (stage === "synthesize") return text("one part, done");
    return { status: 500, body: `unexpected stage ${stage}` };
  });
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runBuiltin("fan-out-and-synthesize", ["prompt=audit the thing", "model=fake-model"], s, home, cwd);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(s.counts.get("plan")).toBe(4); // the answer, then 3 corrective re-prompts
    const dir = `${cwd}/.atomic/runs/fan-out-and-synthesize-${r.runId}`;
    expect(r.outputs).toMatchObject({ result: "one part, done", partitions: [{ label: "task", objective: "audit the thing" }], branches: [`${dir}/branch-01-task.md`] });
    const plan = JSON.parse(artifacts(dir)["partition-plan.json"]!);
    expect(plan).toMatchObject({ partitions: [{ label: "task", objective: "audit the thing" }], fallback: true });
    expect(plan.planner_error.message).toBeTruthy();
  } finally {
    await s.close();
  }
});
