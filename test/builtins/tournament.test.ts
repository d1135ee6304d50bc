/**
 * tournament through dist/atomic against the scripted fake OpenAI server:
 * four attempts with models assigned round-robin, one a provider error
 * (the other three go on); one judge stage per criterion, each request in
 * the provider's log seeing every answer: the correctness judge answers,
 * the completeness judge's first answer leaves an attempt out (re-asked by
 * judge-completeness-again), the clarity judge fails twice (left out,
 * named in judge_failures). The means tie two attempts; the reducer orders
 * them (tie_break "reducer"); in a second run the reducer contradicts the
 * means twice and the ranking falls back to the means with ties by attempt
 * number. Checked: outputs, scores.json, winner.md, the judges' and the
 * reducer's prompts and models; then SIGKILL at a random stage boundary and
 * resume re-runs no recorded stage and ends with the same outputs and
 * files. Also: a token budget used up by the attempts, and the attempts by
 * the real pi CLI with the judges on the openai runner.
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
  const j = /^You are the judge for criterion ([a-z0-9-]+)(, asked again)?/.exec(prompt);
  if (j) return `judge-${j[1]}${j[2] ? "-again" : ""}`;
  const r = /^You are the reducer(, asked again)?/.exec(prompt);
  if (r) return r[1] ? "reduce-again" : "reduce";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const scores = (pairs: [number, number][]) => toolCall("structured_output", { scores: pairs.map(([attempt, score]) => ({ attempt, score, rationale: `attempt ${attempt}: ${score}` })) });
const refused = (message: string): Reply => ({ status: 400, body: JSON.stringify({ error: { message } }) });

/** `reducer`: the ranking the reducer answers (both times it is asked). */
const answersWith =
  (reducer: number[]) =>
  (stage: string, n: number): Reply => {
    if (stage === "attempt-3") return refused("attempt three refused");
    if (stage.startsWith("attempt-")) return text(`answer ${stage.slice(8)}`);
    if (stage === "judge-correctness") return scores([[1, 5], [2, 8], [4, 8]]);
    if (stage === "judge-completeness") return scores([[1, 6], [2, 7]]); // attempt 4 left out
    if (stage === "judge-completeness-again") return scores([[4, 7], [2, 7], [1, 6]]);
    if (stage.startsWith("judge-clarity")) return refused("the clarity judge refused");
    if (stage.startsWith("reduce")) return toolCall("structured_output", { ranking: reducer, rationale: `ranked ${reducer.join(" ")} (${n})` });
    return { status: 500, body: `unexpected stage ${stage}` };
  };

const INPUTS = ["prompt=announce it", "models=m-one", "models=m-two", "judge_model=m-judge", "max_concurrency=2"];
const FULL = { "attempt-1": 1, "attempt-2": 1, "attempt-3": 1, "attempt-4": 1, "judge-correctness": 1, "judge-completeness": 1, "judge-clarity": 1, "judge-completeness-again": 1, "judge-clarity-again": 1, reduce: 1 };

e2eTest(
  "one judge per criterion (one re-asked, one failed and left out), tied means ordered by the reducer, scores.json; a reducer that contradicts the means falls back to attempt number; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answersWith([4, 2, 1]));
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("tournament", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual(FULL);
      const dir = `${cwd}/.atomic/runs/tournament-${r.runId}`;
      const clarity = "the clarity judge refused";
      expect(r.outputs).toEqual({
        winner: `${dir}/winner.md`,
        winner_attempt: 4,
        ranking: [
          { attempt: 4, model: "m-two", score: 7.5, scores: { correctness: 8, completeness: 7 } },
          { attempt: 2, model: "m-two", score: 7.5, scores: { correctness: 8, completeness: 7 } },
          { attempt: 1, model: "m-one", score: 5.5, scores: { correctness: 5, completeness: 6 } },
        ],
        ties: [[2, 4]],
        tie_break: "reducer",
        judge_failures: [{ criterion: "clarity", error: expect.stringMatching(new RegExp(`${clarity}.*; asked again: .*${clarity}`)) }],
        scores: `${dir}/scores.json`,
        dir,
      });
      // models round-robin over the attempts; judges and reducer on theirs, without tools but the structured answer
      const byStage = new Map(s.server.requests.map((q) => [stageOf(promptOf(q)), q]));
      expect([1, 2, 3, 4].map((i) => byStage.get(`attempt-${i}`)!.body.model)).toEqual(["m-one", "m-two", "m-one", "m-two"]);
      for (const st of ["judge-correctness", "judge-completeness", "judge-clarity", "reduce"]) {
        expect(byStage.get(st)!.body.model).toBe("m-judge");
        expect((byStage.get(st)!.body.tools ?? []).map((t) => t.function.name)).toEqual(["structured_output"]);
      }
      expect((byStage.get("attempt-1")!.body.tools ?? []).map((t) => t.function.name).sort()).toEqual(["grep", "list", "read"]);
      // each judge sees every answer and weighs its own criterion; the re-asked one is told why
      for (const c of ["correctness", "completeness", "clarity"]) {
        const p = promptOf(byStage.get(`judge-${c}`)!);
        expect(p).toContain(`on this criterion only: ${c}.`);
        for (const a of [1, 2, 4]) expect(p).toContain(`Attempt ${a}:\nanswer ${a}`);
        expect(p).not.toContain("Attempt 3:");
      }
      expect(promptOf(byStage.get("judge-completeness-again")!)).toContain("it scored attempts 1, 2, not 1, 2, 4 once each");
      // the reducer gets the table, the ties and the tied answers, not the failed criterion's scores
      const reduce = promptOf(byStage.get("reduce")!);
      expect(reduce).toContain("- attempt 2: correctness 8, completeness 7; mean 7.5");
      expect(reduce).toContain("attempts with the same mean tie (2 and 4)");
      expect(reduce).toContain("Left out (their judge failed): clarity.");
      expect(reduce).toContain("The tied attempts' answers:\n\nAttempt 2:\nanswer 2\n\nAttempt 4:\nanswer 4");

      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["attempt-1.md", "attempt-2.md", "attempt-4.md", "scores.json", "winner.md"]);
      expect(files["winner.md"]).toBe("answer 4");
      const sc = JSON.parse(files["scores.json"]!);
      expect(sc.criteria.map((c: { id: string; stage: string; error: string | null }) => [c.id, c.stage, c.error === null])).toEqual([
        ["correctness", "judge-correctness", true],
        ["completeness", "judge-completeness-again", true],
        ["clarity", "judge-clarity-again", false],
      ]);
      expect(sc.attempts[2]).toEqual({ attempt: 3, model: "m-one", status: "failed", error: expect.stringContaining("attempt three refused") });
      expect(sc).toMatchObject({
        means: [{ attempt: 2, mean: 7.5 }, { attempt: 4, mean: 7.5 }, { attempt: 1, mean: 5.5 }],
        ties: [[2, 4]],
        reducer: { stage: "reduce", ranking: [4, 2, 1], rationale: "ranked 4 2 1 (0)", error: null },
        tie_break: "reducer",
        ranking: r.outputs.ranking,
      });
      expect(sc.usage.attempts).toMatchObject({ stages: 4, inputTokens: 30, outputTokens: 15 });
      expect(sc.usage.judges).toMatchObject({ stages: 5, inputTokens: 30, outputTokens: 15 });
      expect(sc.usage.reducer).toMatchObject({ stages: 1, inputTokens: 10, outputTokens: 5 });

      const at = pick("tournament", Object.keys(FULL));
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("tournament", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      expect(resumed.recorded).not.toContain(at);
      expect(Object.fromEntries(s.counts)).toEqual(withoutRecorded(FULL, resumed.recorded));
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/tournament-${resumed.runId}`)).toEqual(files);

      // a reducer whose ranking contradicts the means, twice: the means decide, ties by attempt number
      s.counts.clear();
      s.setAnswers(answersWith([1, 4, 2]));
      const o = homeAndCwd();
      const other = await runBuiltin("tournament", INPUTS, s, o.home, o.cwd);
      expect(other.code).toBe(0);
      expect(s.counts.get("reduce-again")).toBe(1);
      expect(other.outputs).toMatchObject({ winner_attempt: 2, ties: [[2, 4]], tie_break: "attempt number" });
      expect((other.outputs.ranking as { attempt: number }[]).map((x) => x.attempt)).toEqual([2, 4, 1]);
      const sc2 = JSON.parse(artifacts(`${o.cwd}/.atomic/runs/tournament-${other.runId}`)["scores.json"]!);
      expect(sc2.reducer).toEqual({
        stage: "reduce-again",
        ranking: null,
        rationale: "ranked 1 4 2 (0)",
        error: "it ranks attempt 1 (mean 5.5) above attempt 4 (mean 7.5); asked again: it ranks attempt 1 (mean 5.5) above attempt 4 (mean 7.5)",
      });
    } finally {
      await s.close();
    }
  },
  300_000,
);

e2eTest("every judge failing fails the run, naming each criterion's error; criteria keeps its meaning: one judge stage per item", async () => {
  const s = await scriptedServer(stageOf, (stage) => (stage.startsWith("attempt-") ? text(`answer ${stage.slice(8)}`) : refused(`${stage} refused`)));
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runBuiltin("tournament", ["prompt=p", "num_attempts=2", "model=fake-model", "criteria=accuracy: the facts are right", "criteria=tone"], s, home, cwd);
    expect(r.code).toBe(1);
    expect(r.status).toBe("failed");
    expect(Object.fromEntries(s.counts)).toEqual({ "attempt-1": 1, "attempt-2": 1, "judge-accuracy": 1, "judge-tone": 1, "judge-accuracy-again": 1, "judge-tone-again": 1 });
    expect(promptOf(s.server.requests.find((q) => stageOf(promptOf(q)) === "judge-accuracy")!)).toContain("on this criterion only: accuracy: the facts are right.");
    const error = (JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { error: { message: string } }).error.message;
    expect(error).toContain("no judge gave usable scores (accuracy: ");
    expect(error).toContain("; tone: ");
  } finally {
    await s.close();
  }
});

e2eTest("a token budget used up by the attempts: no judge starts, the run ends blocked; resume with a larger budget judges without redoing an attempt", async () => {
  const s = await scriptedServer(stageOf, answersWith([4, 2, 1]));
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
    expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!).outputs).toMatchObject({ winner_attempt: 4, tie_break: "reducer" });
  } finally {
    await s.close();
  }
});

e2eTest("per-role runners: the attempts by the real pi CLI, the judge and the reducer by the openai runner", async () => {
  const s = await scriptedServer(stageOf, (stage, n) =>
    stage === "judge-quality" ? scores([[1, 4], [2, 9]]) : stage === "reduce" ? toolCall("structured_output", { ranking: [2, 1], rationale: "2 scored higher" }) : answersWith([])(stage, n),
  );
  try {
    const { home, cwd, env } = chatAgentSetup("pi", s.server.url);
    const inputs = ["prompt=announce it", "num_attempts=2", "criteria=quality", "runner=pi", `model=${MODEL}`, "judge_runner=openai", "judge_model=fake-model"];
    const r = await runAtomic(["--json", "run", "tournament", ...inputs.flatMap((i) => ["--input", i]), "--workers", "1"], { home, cwd, env: { ...env, ...s.env }, timeoutMs: 150_000 });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(Object.fromEntries(s.counts)).toEqual({ "attempt-1": 1, "attempt-2": 1, "judge-quality": 1, reduce: 1 });
    const byStage = new Map(s.server.requests.map((q) => [stageOf(promptOf(q)), q]));
    expect(byStage.get("attempt-1")!.body.model).toBe("m");
    expect(byStage.get("judge-quality")!.body.model).toBe("fake-model");
    expect(byStage.get("reduce")!.body.model).toBe("fake-model");
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs).toMatchObject({ winner_attempt: 2, ties: [], tie_break: "none", judge_failures: [] });
  } finally {
    await s.close();
  }
}, 180_000);
