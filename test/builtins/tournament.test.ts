/**
 * tournament through dist/atomic against the scripted fake OpenAI server:
 * four attempts with models assigned round-robin, one a provider error
 * (the other three go on); the judges, on their own model, prefer the
 * higher attempt number, except one ring judgement that fails twice (re-
 * asked, then counted as a tie) and one pivot judgement whose first
 * structured answer is invalid (the runner re-asks it). Checked: the ring,
 * both orders of each pair, the pivot phase, the ranking by mean
 * preference, planned vs executed counts and usage per phase in
 * comparisons.json, winner.md; then SIGKILL at a random stage boundary and
 * resume re-runs no recorded stage and ends with the same outputs and
 * files. The ring depends on the seed only.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { toolCall, text, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { chatAgentSetup, MODEL } from "../helpers/chat-agents.ts";
import { artifacts, homeAndCwd, killAtStageAndResume, normalized, pick, promptOf, runBuiltin, scriptedServer, withoutRecorded } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  const a = /^You are attempt (\d+) of/.exec(prompt);
  if (a) return `attempt-${a[1]}`;
  const j = /^You are the judge \((judge-[a-z0-9-]+)\)(, asked again)?/.exec(prompt);
  if (j) return `${j[1]}${j[2] ? "-again" : ""}`;
  return `unknown: ${prompt.slice(0, 40)}`;
};

/** The attempt numbers of a judge prompt's Response A and Response B. */
const sides = (prompt: string) => [/Response A:\nanswer (\d)/.exec(prompt)![1], /Response B:\nanswer (\d)/.exec(prompt)![1]].map(Number) as [number, number];

const answers = (stage: string, n: number, req: { body: { messages: { role: string; content: string | null }[] } }): Reply => {
  const prompt = req.body.messages.find((m) => m.role === "user")!.content ?? "";
  if (stage === "attempt-3") return { status: 400, body: JSON.stringify({ error: { message: "attempt three refused" } }) };
  if (stage.startsWith("attempt-")) return text(`answer ${stage.slice(8)}`);
  if (!stage.startsWith("judge-")) return { status: 500, body: `unexpected stage ${stage}` };
  const [a, b] = sides(prompt);
  if (stage.startsWith("judge-ring") && a === 1 && b === 2) return { status: 400, body: JSON.stringify({ error: { message: "judge refused" } }) };
  if (stage.startsWith("judge-pivots") && a === 4 && b === 1 && n === 0) return toolCall("structured_output", { winner: "first", rationale: "?" });
  return toolCall("structured_output", { winner: a > b ? "A" : "B", rationale: `${Math.max(a, b)} is better` });
};

const INPUTS = ["prompt=announce it", "models=m-one", "models=m-two", "judge_model=m-judge", "max_concurrency=2"];

e2eTest(
  "a failed attempt, the seeded ring in both orders, an invalid judgement as a tie, pivots, ranking, comparisons.json; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("tournament", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      const dir = `${cwd}/.atomic/runs/tournament-${r.runId}`;
      expect(r.outputs).toEqual({
        winner: `${dir}/winner.md`,
        winner_attempt: 4,
        ranking: [
          { attempt: 4, model: "m-two", mean_preference: 1, judgements: 8 },
          { attempt: 2, model: "m-two", mean_preference: 0.25, judgements: 6 },
          { attempt: 1, model: "m-one", mean_preference: 0.083, judgements: 6 },
        ],
        planned_judgements: 10,
        executed_judgements: 11,
        comparisons: `${dir}/comparisons.json`,
        dir,
      });
      // models round-robin over the attempts; judges on theirs
      const modelOf = new Map(s.server.requests.map((q) => [stageOf(q.body.messages.find((m) => m.role === "user")!.content ?? ""), q.body.model]));
      expect([1, 2, 3, 4].map((i) => modelOf.get(`attempt-${i}`))).toEqual(["m-one", "m-two", "m-one", "m-two"]);
      expect([...modelOf].filter(([st]) => st.startsWith("judge-")).every(([, m]) => m === "m-judge")).toBe(true);
      const toolsOf = (stage: string) => (s.server.requests.find((q) => stageOf(promptOf(q)) === stage)!.body.tools ?? []).map((t) => t.function.name).sort();
      expect(toolsOf("attempt-1")).toEqual(["grep", "list", "read"]);
      expect(toolsOf("judge-pivots-4-vs-1-1")).toEqual(["structured_output"]);

      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["attempt-1.md", "attempt-2.md", "attempt-4.md", "comparisons.json", "winner.md"]);
      expect(files["attempt-2.md"]).toBe("answer 2");
      expect(files["winner.md"]).toBe("answer 4");
      const c = JSON.parse(files["comparisons.json"]!);
      expect(c.ring.toSorted()).toEqual([1, 2, 4]);
      expect(c.pivots).toEqual([4]);
      expect(c.attempts[2]).toEqual({ attempt: 3, model: "m-one", status: "failed", error: expect.stringContaining("attempt three refused") });
      // each ring pair (neighbours of the ring) twice, in both orders
      const ring = c.judgements.filter((j: { phase: string }) => j.phase === "ring") as { stage: string; a: number; b: number; winner: number | null; valid: boolean }[];
      expect(ring).toHaveLength(6);
      for (let i = 0; i < 3; i++) {
        const [x, y] = [c.ring[i], c.ring[(i + 1) % 3]];
        expect(ring.filter((j) => j.stage.startsWith(`judge-ring-${x}-vs-${y}-`)).map((j) => [j.a, j.b])).toEqual([[x, y], [y, x]]);
      }
      const invalid = c.judgements.filter((j: { valid: boolean }) => !j.valid);
      expect(invalid).toEqual([expect.objectContaining({ phase: "ring", a: 1, b: 2, winner: null, rationale: expect.stringContaining("counted as a tie") })]);
      const pivots = c.judgements.filter((j: { phase: string }) => j.phase === "pivots").map((j: { a: number; b: number; winner: number }) => [j.a, j.b, j.winner]);
      expect(pivots).toEqual([[4, 1, 4], [1, 4, 4], [4, 2, 4], [2, 4, 4]]);
      expect(c).toMatchObject({ seed: 0, planned_judgements: 10, executed_judgements: 11, invalid_judgements: 1, ranking: r.outputs.ranking });
      expect(c.usage.attempts).toMatchObject({ stages: 4, inputTokens: 30, outputTokens: 15 });
      expect(c.usage.ring).toMatchObject({ stages: 7, inputTokens: 50, outputTokens: 25 });
      expect(c.usage.pivots).toMatchObject({ stages: 4, inputTokens: 50, outputTokens: 25 });

      const full = Object.fromEntries(s.counts);
      expect(Object.keys(full).filter((st) => st.startsWith("judge-")).length).toBe(11);
      expect(Object.entries(full).filter(([, n]) => n !== 1)).toEqual([[expect.stringMatching(/^judge-pivots-4-vs-1-1$/), 2]]);

      const at = pick("tournament", Object.keys(full));
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("tournament", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      expect(resumed.recorded).not.toContain(at);
      expect(Object.fromEntries(s.counts)).toEqual(withoutRecorded(full, resumed.recorded));
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/tournament-${resumed.runId}`)).toEqual(files);

      // another seed, another ring (the ring is the seed's alone)
      s.counts.clear();
      const o = homeAndCwd();
      const other = await runBuiltin("tournament", [...INPUTS, "seed=2", "pivots=0", "n_evaluations=1"], s, o.home, o.cwd);
      expect(other.code).toBe(0);
      const c2 = JSON.parse(artifacts(`${o.cwd}/.atomic/runs/tournament-${other.runId}`)["comparisons.json"]!);
      expect(c2).toMatchObject({ seed: 2, pivots: [], planned_judgements: 3 });
      expect(c2.ring).not.toEqual(c.ring);
    } finally {
      await s.close();
    }
  },
  300_000,
);

e2eTest("a token budget used up by the attempts: no judge starts, the run ends blocked; resume with a larger budget judges without redoing an attempt", async () => {
  const s = await scriptedServer(stageOf, answers);
  try {
    const { home, cwd } = homeAndCwd();
    const inputs = [...INPUTS.filter((i) => !i.startsWith("max_concurrency")), "max_concurrency=1"].flatMap((i) => ["--input", i]);
    const r = await runAtomic(["--json", "run", "tournament", ...inputs, "--max-tokens", "40"], { home, cwd, env: s.env });
    expect(r.code).toBe(3);
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { status: string; error: { message: string } };
    expect(last.status).toBe("blocked");
    expect(last.error.message).toContain("the token budget of 40 is used up (45 tokens)");
    expect([...s.counts.keys()].filter((st) => st.startsWith("judge-"))).toEqual([]);
    const runId = (JSON.parse(r.stdout.trim().split("\n")[0]!) as { runId: string }).runId;
    s.counts.clear();
    const resumed = await runAtomic(["--json", "resume", runId, "--max-tokens", "100000"], { home, cwd, env: s.env });
    expect(resumed.code).toBe(0);
    expect([...s.counts.keys()].filter((st) => st.startsWith("attempt-"))).toEqual([]);
    expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!).outputs).toMatchObject({ winner_attempt: 4, planned_judgements: 10 });
  } finally {
    await s.close();
  }
});

e2eTest("per-role runners: the attempts by the real pi CLI, the judges by the openai runner", async () => {
  const s = await scriptedServer(stageOf, (stage, n, req) => (stage.startsWith("attempt-") ? text(`answer ${stage.slice(8)}`) : answers(stage, n, req)));
  try {
    const { home, cwd, env } = chatAgentSetup("pi", s.server.url);
    const inputs = ["prompt=announce it", "num_attempts=2", "n_evaluations=1", "pivots=0", "runner=pi", `model=${MODEL}`, "judge_runner=openai", "judge_model=fake-model"];
    const r = await runAtomic(["--json", "run", "tournament", ...inputs.flatMap((i) => ["--input", i]), "--workers", "1"], { home, cwd, env: { ...env, ...s.env }, timeoutMs: 150_000 });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(Object.fromEntries(s.counts)).toEqual({ "attempt-1": 1, "attempt-2": 1, "judge-ring-2-vs-1-1": 1 });
    const byStage = new Map(s.server.requests.map((q) => [stageOf(promptOf(q)), q]));
    expect(byStage.get("attempt-1")!.body.model).toBe("m");
    expect(byStage.get("judge-ring-2-vs-1-1")!.body.model).toBe("fake-model");
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs).toMatchObject({ winner_attempt: 2, planned_judgements: 1, executed_judgements: 1 });
  } finally {
    await s.close();
  }
}, 180_000);
