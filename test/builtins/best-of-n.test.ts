/**
 * best-of-n through dist/atomic on a real git repository, every stage on
 * the openai runner against the scripted fake server: three candidates
 * under a budget that two of them use up (the third never starts, no
 * request, no branch), each writing fix.txt in its own worktree; an agent
 * judge whose prompt holds both finished candidates' diffs answers
 * { winner: 2 }; the second candidate's branch is merged into the run's
 * own branch, the first's branch stays, the checkout is untouched.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { text, toolCall, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { gitRepo, inRepo } from "./git-support.ts";
import { promptOf, runBuiltin, scriptedServer } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  const c = /You are candidate (\d+) of/.exec(prompt);
  if (c) return `candidate-${c[1]}`;
  if (prompt.startsWith("Candidates made this change")) return "judge";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const answers = (stage: string, n: number): Reply => {
  const c = /^candidate-(\d+)$/.exec(stage);
  // each candidate writes its file (a cent of cost), then says it is done
  if (c) return n === 0 ? toolCall("write", { path: "fix.txt", content: `candidate ${c[1]}\n` }, { usage: { prompt: 10, completion: 1, cost: 0.01 } }) : text(`candidate ${c[1]} done`, { prompt: 1, completion: 1, cost: 0 });
  if (stage === "judge") return toolCall("structured_output", { winner: 2, reason: "the second is the simplest" });
  return { status: 500, body: `unexpected stage ${stage}` };
};

e2eTest("the builtin best-of-n: 3 candidates under a budget of 2, an agent judge reads both diffs and picks the second, which is merged; the loser's branch stays", async () => {
  const s = await scriptedServer(stageOf, answers);
  try {
    const repo = gitRepo();
    const head = repo.git("rev-parse", "HEAD");
    const r = await inRepo(s, repo, (home) => runBuiltin("best-of-n", ["prompt=write fix.txt", "n=3", "max_cost=0.015", "runner=openai", "model=fake-model"], s, home, repo.dir));
    expect(r.code).toBe(0);
    expect(r.status).toBe("completed");
    const out = r.outputs as { winner: string; into: string; candidates: string[]; skipped: number; reason: string };
    expect(out.skipped).toBe(1);
    expect(out.candidates).toHaveLength(2);
    expect(out.candidates.map((b) => b.replace(/^.*\/[0-9.]+-/, ""))).toEqual(["candidate-1", "candidate-2"]);
    expect(out.winner).toBe(out.candidates[1]!);
    expect(out.into).toBe(`atomic/${r.runId}/candidate`);
    expect(out.reason).toBe("the second is the simplest");
    // the third candidate never started; the judge asked once
    expect(Object.fromEntries(s.counts)).toEqual({ "candidate-1": 2, "candidate-2": 2, judge: 1 });
    // the judge's prompt held both candidates' outputs and diffs
    const judged = promptOf(s.server.requests.find((q) => stageOf(promptOf(q)) === "judge")!);
    expect(judged).toContain("write fix.txt");
    expect(judged).toContain(`<candidate number="1" branch="${out.candidates[0]}">`);
    expect(judged).toContain("+candidate 1");
    expect(judged).toContain(`<candidate number="2" branch="${out.candidates[1]}">`);
    expect(judged).toContain("+candidate 2");
    // the winner merged into the run's branch; the loser's branch kept; no branch of the third; the checkout untouched
    expect(repo.git("show", `${out.into}:fix.txt`)).toBe("candidate 2");
    expect(repo.git("show", `${out.candidates[0]}:fix.txt`)).toBe("candidate 1");
    expect(repo.git("branch", "--list", "--format=%(refname:short)", "atomic/*").split("\n").sort()).toEqual([...out.candidates, out.into].sort());
    expect(repo.git("rev-parse", "HEAD")).toBe(head);
    expect(repo.git("status", "--porcelain", "--untracked-files=no")).toBe("");
  } finally {
    await s.close();
  }
});
