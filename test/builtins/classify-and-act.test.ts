/**
 * classify-and-act through dist/atomic against the scripted fake OpenAI
 * server: an invalid classification is re-asked; a low confidence asks a
 * person, answered with `atomic answer`; the action stage's tools follow
 * the selected category; classification.json records proposed vs selected
 * and why. A confident classification acts without asking. SIGKILLed at a
 * random stage boundary (the question's wait included) and resumed, it
 * re-runs no recorded stage and ends with the uninterrupted run's outputs.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { toolCall, text, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, drive as driveWith, homeAndCwd, normalized, pick, scriptedServer, type Scripted } from "./support.ts";

/** Runs or resumes, answering the question with "implementation"; `killAt` "ask" kills while the question is open. */
const drive = (args: string[], s: Scripted, home: string, cwd: string, killAt?: string) =>
  driveWith(args, s, home, cwd, () => "implementation", killAt === "ask" ? "ask:Which category" : killAt);

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  if (prompt.startsWith("You are the classifier")) return "classify";
  if (prompt.startsWith("This request was classified as")) return "act";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const answers = (stage: string, n: number, req: RecordedRequest): Reply => {
  const confident = (req.body.messages.find((m) => m.role === "user")?.content ?? "").includes("confidently");
  if (stage === "classify") {
    if (confident) return toolCall("structured_output", { category: "research", confidence: 0.9, rationale: "a question about facts" });
    return n === 0
      ? toolCall("structured_output", { category: "research", confidence: 3, rationale: "out of range" })
      : toolCall("structured_output", { category: "research", confidence: 0.4, rationale: "could be either" });
  }
  if (stage === "act") return text(confident ? "researched" : "implemented the change");
  return { status: 500, body: `unexpected stage ${stage}` };
};

const INPUTS = ["--input", "prompt=add a retry to the client", "--input", "model=fake-model"];

e2eTest(
  "low confidence asks a person (atomic answer), tools follow the category, classification.json; confident acts at once; SIGKILL and resume",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const { home, cwd } = homeAndCwd();
      const r = await drive(["run", "classify-and-act", ...INPUTS], s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.answered).toHaveLength(1);
      expect(Object.fromEntries(s.counts)).toEqual({ classify: 2, act: 1 });
      const dir = `${cwd}/.atomic/runs/classify-and-act-${r.runId}`;
      expect(r.outputs).toEqual({
        category: "implementation",
        proposed: "research",
        selected_by: "human",
        result: "implemented the change",
        classification: `${dir}/classification.json`,
        action: `${dir}/action.md`,
      });
      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["action.md", "classification.json"]);
      expect(files["action.md"]).toBe("implemented the change");
      expect(JSON.parse(files["classification.json"]!)).toEqual({
        categories: ["analysis", "implementation", "research"],
        proposed: { category: "research", confidence: 0.4, rationale: "could be either" },
        selected: "implementation",
        selected_by: "human",
        reason: "the classifier's confidence 0.4 is below 0.75",
      });
      const reqs = s.server.requests.map((q) => ({ stage: stageOf(q.body.messages.find((m) => m.role === "user")!.content ?? ""), tools: (q.body.tools ?? []).map((t) => t.function.name) }));
      expect(reqs.find((q) => q.stage === "classify")!.tools).toEqual(["structured_output"]);
      expect(reqs.find((q) => q.stage === "act")!.tools.sort()).toEqual(["bash", "edit", "read", "write"]);

      // a confident classification acts without asking, with the research tools
      s.counts.clear();
      s.server.requests.length = 0;
      const c = homeAndCwd();
      const confident = await drive(["run", "classify-and-act", "--input", "prompt=answer this confidently", "--input", "model=fake-model"], s, c.home, c.cwd);
      expect(confident.code).toBe(0);
      expect(confident.answered).toHaveLength(0);
      expect(confident.outputs).toMatchObject({ category: "research", proposed: "research", selected_by: "classifier", result: "researched" });
      const act = s.server.requests.find((q) => stageOf(q.body.messages.find((m) => m.role === "user")!.content ?? "") === "act")!;
      expect(act.body.tools!.map((t) => t.function.name).sort()).toEqual(["grep", "list", "read"]);

      const order = ["classify", "ask", "act"];
      const at = pick("classify-and-act", order);
      s.counts.clear();
      const k = homeAndCwd();
      const killed = await drive(["run", "classify-and-act", ...INPUTS], s, k.home, k.cwd, at);
      s.counts.clear();
      const resumed = await drive(["resume", killed.runId], s, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      const expected: Record<string, number> = { classify: 2, act: 1 };
      for (const stage of order.slice(0, order.indexOf(at))) delete expected[stage];
      expect(Object.fromEntries(s.counts)).toEqual(expected);
      expect(resumed.answered).toHaveLength(at === "act" ? 0 : 1);
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/classify-and-act-${resumed.runId}`)).toEqual(files);
    } finally {
      await s.close();
    }
  },
  180_000,
);
