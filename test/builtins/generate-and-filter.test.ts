/**
 * generate-and-filter through dist/atomic against the scripted fake OpenAI
 * server: one candidate gets a provider error (the others go on), one has
 * the same text as another (the checks in code flag it), the filter's first
 * structured answer is invalid and re-asked, its shortlist names a
 * duplicate and a path that does not exist (both dropped); the judge sees
 * the filters' evidence and chooses the final shortlist, keeping a
 * candidate the filter dropped; artifacts checked file by file; then
 * SIGKILL at a random stage boundary and resume re-runs no recorded stage
 * and ends with the outputs and files of the uninterrupted run. Also: a
 * filter answer naming no candidate falls back to the first ones, without
 * a judge; a judge naming no candidate twice leaves the filter's choice.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { toolCall, text, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, homeAndCwd, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  const c = /^You are candidate generator (\d+)/.exec(prompt);
  if (c) return `candidate-${c[1]}`;
  if (prompt.startsWith("You are the filter")) return "filter";
  if (prompt.startsWith("You are the judge")) return "judge"; // also "-again": counted twice
  return `unknown: ${prompt.slice(0, 40)}`;
};

const answers = (nothingUsable: boolean) => (stage: string, n: number): Reply => {
  if (stage === "candidate-3") return { status: 400, body: JSON.stringify({ error: { message: "candidate three refused" } }) };
  if (stage === "candidate-4") return text("  IDEA 2\n");
  if (stage.startsWith("candidate-")) return text(`idea ${stage.slice(10)}`);
  if (stage === "filter") {
    if (nothingUsable) return toolCall("structured_output", { shortlist: ["nope.md"], discarded: [] });
    return n === 0
      ? toolCall("structured_output", { shortlist: "candidate-2.md" })
      : toolCall("structured_output", {
          shortlist: ["candidate-2.md", "candidate-2.md", "candidate-9.md", "candidate-4.md", "candidate-1.md"],
          discarded: [{ path: "candidate-1.md", reason: "same as 2" }],
        });
  }
  if (stage === "judge") {
    if (nothingUsable) return toolCall("structured_output", { shortlist: ["nope.md"], rationale: "?" });
    return toolCall("structured_output", { shortlist: ["candidate-1.md", "elsewhere.md", "candidate-2.md", "candidate-1.md"], rationale: "1 is fresher; 4 repeats 2" });
  }
  return { status: 500, body: `unexpected stage ${stage}` };
};

const INPUTS = ["prompt=name the tool", "model=fake-model", "num_candidates=4", "shortlist_size=2", "max_concurrency=1"];

e2eTest(
  "a candidate's provider error, a duplicate flagged by the checks, a re-asked filter, bad paths dropped, the judge choosing the shortlist from the evidence, files one by one; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers(false));
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("generate-and-filter", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual({ "candidate-1": 1, "candidate-2": 1, "candidate-3": 1, "candidate-4": 1, filter: 2, judge: 1 });
      const dir = `${cwd}/.atomic/runs/generate-and-filter-${r.runId}`;
      const duplicate = { path: "candidate-4.md", reason: "the same text as candidate-2.md" };
      expect(r.outputs).toEqual({
        shortlist: [`${dir}/candidate-1.md`, `${dir}/candidate-2.md`],
        discarded: [duplicate],
        rationale: "1 is fresher; 4 repeats 2",
        chosen_by: "judge",
        shortlist_file: `${dir}/shortlist.md`,
        dir,
      });
      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["candidate-1.md", "candidate-2.md", "candidate-4.md", "filter.json", "shortlist.md"]);
      expect(files["candidate-4.md"]).toBe("  IDEA 2\n");
      expect(JSON.parse(files["filter.json"]!)).toEqual({
        checks: [duplicate],
        filter: { proposal: ["candidate-2.md", "candidate-4.md"], discarded: [{ path: "candidate-1.md", reason: "same as 2" }], missing: ["candidate-9.md"], fallback: false, error: null },
        judge: { shortlist: ["candidate-1.md", "candidate-2.md"], rationale: "1 is fresher; 4 repeats 2", error: null, missing: ["elsewhere.md"] },
        chosen_by: "judge",
        shortlist: ["candidate-1.md", "candidate-2.md"],
        discarded: [duplicate],
      });
      expect(files["shortlist.md"]).toBe("# Shortlist\n\n1 is fresher; 4 repeats 2\n\n## 1. candidate-1.md\n\nidea 1\n\n## 2. candidate-2.md\n\nidea 2\n");
      // the filter saw the checks; the judge saw every candidate with the filters' evidence
      const prompts = s.server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content ?? "");
      expect(prompts.find((p) => p.startsWith("You are the filter"))).toContain("Checks found:\n- candidate-4.md: the same text as candidate-2.md");
      const judgePrompt = prompts.find((p) => p.startsWith("You are the judge"))!;
      expect(judgePrompt).toContain("Evidence:\nThe filter proposed: candidate-2.md, candidate-4.md.\nIt discarded:\n- candidate-1.md: same as 2\n\nChecks found:\n- candidate-4.md: the same text as candidate-2.md");
      for (const n of [1, 2, 4]) expect(judgePrompt).toContain(`## candidate-${n}.md\n`);

      const order = ["candidate-1", "candidate-2", "candidate-3", "candidate-4", "filter", "judge"];
      const at = pick("generate-and-filter", order);
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("generate-and-filter", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      const expected: Record<string, number> = { "candidate-1": 1, "candidate-2": 1, "candidate-3": 1, "candidate-4": 1, filter: 2, judge: 1 };
      for (const stage of order.slice(0, order.indexOf(at))) delete expected[stage];
      expect(Object.fromEntries(s.counts)).toEqual(expected);
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/generate-and-filter-${resumed.runId}`)).toEqual(files);
    } finally {
      await s.close();
    }
  },
  180_000,
);

e2eTest("a filter naming no candidate falls back to the first ones; use_judge=false runs no judge; a judge naming no candidate twice leaves that choice", async () => {
  const s = await scriptedServer(stageOf, answers(true));
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runBuiltin("generate-and-filter", [...INPUTS, "use_judge=false"], s, home, cwd);
    expect(r.code).toBe(0);
    expect(s.counts.get("judge")).toBeUndefined();
    const dir = `${cwd}/.atomic/runs/generate-and-filter-${r.runId}`;
    expect(r.outputs).toMatchObject({ shortlist: [`${dir}/candidate-1.md`, `${dir}/candidate-2.md`], rationale: "", chosen_by: "first candidates" });
    expect(JSON.parse(artifacts(dir)["filter.json"]!)).toMatchObject({ filter: { fallback: true, missing: ["nope.md"] }, judge: null });

    s.counts.clear();
    const j = homeAndCwd();
    const judged = await runBuiltin("generate-and-filter", INPUTS, s, j.home, j.cwd);
    expect(judged.code).toBe(0);
    expect(s.counts.get("judge")).toBe(2);
    const jdir = `${j.cwd}/.atomic/runs/generate-and-filter-${judged.runId}`;
    expect(judged.outputs).toMatchObject({ shortlist: [`${jdir}/candidate-1.md`, `${jdir}/candidate-2.md`], rationale: "", chosen_by: "first candidates" });
    expect(JSON.parse(artifacts(jdir)["filter.json"]!).judge).toEqual({
      shortlist: null,
      rationale: "?",
      error: "it named no candidate (nope.md); asked again: it named no candidate (nope.md)",
      missing: ["nope.md"],
    });
  } finally {
    await s.close();
  }
});
