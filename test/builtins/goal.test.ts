/**
 * goal through dist/atomic against the scripted fake OpenAI server, in a
 * real git repository (a local bare origin, a fake gh on PATH): turn 1's
 * blocker is handed to turn 2, whose orchestrator continues turn 1's
 * session (its request carries turn 1's conversation); an invalid review
 * is re-asked; a low-confidence blocking finding is re-verified and
 * dismissed; two "complete" verdicts end it complete; every turn works in
 * one worktree of the run's branch (the first turn's), each turn's work is
 * committed on the branch when it ends, the branch pushed and gh
 * called with the expected arguments; goal-ledger.json checked field by
 * field. The same blocker three turns running ends it blocked, the turn
 * limit needs_human. SIGKILLed at a random stage and resumed: no recorded
 * stage re-runs and the outputs and files equal the uninterrupted run's.
 * Turn 1 works through bash, sandboxed by default: its write outside the
 * worktree is refused.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { text, toolCall, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, STACK_LINE } from "../e2e/support.ts";
import { artifacts, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer } from "./support.ts";
import { expectNothingRecordedReran, gitRepo, inRepo } from "./git-support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const pad = (n: string) => n.padStart(2, "0");
const lastUser = (req: RecordedRequest) => req.body.messages.filter((m) => m.role === "user").at(-1)?.content ?? "";
const stageOf = (_first: string, req: RecordedRequest) => {
  const p = lastUser(req);
  let m: RegExpExecArray | null;
  if (p.startsWith("You are the orchestrator of a goal, turn 1 ")) return "orchestrator-01";
  if ((m = /^Turn (\d+) of at most/.exec(p))) return `orchestrator-${pad(m[1]!)}`;
  if ((m = /^You are the (\w+) reviewer of turn (\d+)/.exec(p))) return `review-${pad(m[2]!)}-${m[1]}`;
  if ((m = /^You re-verify findings of turn (\d+)/.exec(p))) return `verify-${pad(m[1]!)}`;
  return `unknown: ${p.slice(0, 40)}`;
};

/** Turn 1's work through bash, which also tries to write outside its worktree: goal's agent stages run in the sandbox by default. */
const ESCAPE = `/var/tmp/atomic-goal-escape-${process.pid}`;
const TURN_1_BASH = `printf 'work of turn 1\\n' > turn-1.txt && { echo x > ${ESCAPE} 2>/dev/null && echo SYSTEM=written || echo SYSTEM=denied; }`;
afterAll(() => rmSync(ESCAPE, { force: true }));

const review = (verdict: string, findings: object[] = []) => toolCall("structured_output", { verdict, summary: `${verdict} it is`, findings });
const blocking = (finding: string, confidence: number, requirements: string[]) => ({ finding, severity: "blocking", confidence, requirements });

/** mode: "complete" (the story above), "blocked" (the completion reviewer repeats one blocker), "limit" (a new blocker each turn). */
const answers = (mode: "complete" | "blocked" | "limit") => (stage: string, n: number): Reply => {
  const [kind, turn, who] = stage.split("-");
  const t = Number(turn);
  if (kind === "orchestrator" && t === 1 && n === 0) return toolCall("bash", { command: TURN_1_BASH });
  if (kind === "orchestrator") return n === 0 ? toolCall("write", { path: `turn-${t}.txt`, content: `work of turn ${t}\n` }) : text(`turn ${t}: wrote turn-${t}.txt (R1)`);
  if (kind === "verify") return toolCall("structured_output", { results: [{ index: 0, confirmed: false, reason: "the files show no clash" }] });
  if (kind !== "review") return { status: 500, body: `unexpected stage ${stage}` };
  if (mode === "blocked") return who === "completion" ? review("incomplete", [blocking("Tests are missing.", 0.9, ["R2"])]) : review("complete");
  if (mode === "limit" && who === "risk" && t === 1) return { status: 400, body: JSON.stringify({ error: { message: "bad request in one branch" } }) };
  if (mode === "limit") return who === "completion" ? review("incomplete", [blocking(`missing part ${t}`, 0.95, ["R1"])]) : review("complete");
  if (t >= 2) return review("complete");
  if (who === "completion") return review("incomplete", [blocking("tests are missing", 0.9, ["R2"])]);
  if (who === "evidence") return n === 0 ? toolCall("structured_output", { verdict: "maybe" }) : review("incomplete", [{ finding: "no test output shown", severity: "note", confidence: 0.8, requirements: ["R2", "R9"] }]);
  return review("complete", [blocking("turn-1.txt may clash with a generated file", 0.4, ["R1"])]);
};

const INPUTS = ["objective=Add the feature", "acceptance_criteria=the feature exists\nit is tested", "model=fake-model", "create_pr=true"];
const COUNTS = {
  "orchestrator-01": 2, "review-01-completion": 1, "review-01-evidence": 2, "review-01-risk": 1, "verify-01": 1,
  "orchestrator-02": 2, "review-02-completion": 1, "review-02-evidence": 1, "review-02-risk": 1,
};

e2eTest(
  "goal: turns on a git branch until two complete verdicts, the session continued, a re-asked review, a dismissed doubtful blocker, a pull request through gh; blocked; needs_human; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers("complete"));
    try {
      const repo = gitRepo();
      const r = await inRepo(s, repo, (home) => runBuiltin("goal", INPUTS, s, home, repo.dir));
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual(COUNTS);
      const dir = `${repo.dir}/.atomic/runs/goal-${r.runId}`;
      const branch = `atomic/goal-${r.runId}`;
      const commits = repo.git("log", "--format=%H %s", `main..${branch}`).split("\n");
      // each turn's work committed by atomic when the turn ended
      expect(commits.map((c) => c.slice(41))).toEqual(["atomic: what stage orchestrator-02 left uncommitted", "atomic: what stage orchestrator-01 left uncommitted"]);
      expect(repo.git("show", `${branch}:turn-1.txt`)).toBe("work of turn 1");
      expect(repo.git("show", `${branch}:turn-2.txt`)).toBe("work of turn 2");
      expect(r.outputs).toEqual({
        status: "complete",
        turns: 2,
        branch,
        commits: commits.map((c) => c.slice(0, 40)).reverse(),
        blockers: [],
        pull_request: "https://github.example/acme/project/pull/7",
        ledger: `${dir}/goal-ledger.json`,
        dir,
      });
      // one worktree for every turn, the first turn's, in the git directory (gc removes it); the checkout untouched; the branch is pushed
      const listed = repo.git("worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("worktree ") || l.startsWith("branch "));
      const worktree = listed[2]!.slice("worktree ".length);
      expect(worktree).toMatch(new RegExp(`^${repo.dir}/\\.git/atomic-worktrees/${r.runId}/[0-9.]+-orchestrator-01$`));
      expect(listed).toEqual([`worktree ${repo.dir}`, "branch refs/heads/main", `worktree ${worktree}`, `branch refs/heads/${branch}`]);
      expect(repo.git("status", "--porcelain", "--untracked-files=no")).toBe("");
      expect(repo.git("--git-dir", repo.origin, "rev-parse", branch)).toBe(commits[0]!.slice(0, 40));
      const [call, ...more] = repo.ghCalls();
      expect(more).toEqual([]);
      expect(call!.slice(0, 8)).toEqual(["pr", "create", "--base", "main", "--head", branch, "--title", "goal: Add the feature"]);
      expect(call![8]).toBe("--body");
      expect(call![9]).toContain("Acceptance criteria:\nR1: the feature exists\nR2: it is tested");

      // turn 2's orchestrator continued turn 1's session: its request carries turn 1's conversation
      const turn2 = s.server.requests.find((q) => stageOf("", q) === "orchestrator-02")!;
      const convo = turn2.body.messages.filter((m) => m.role !== "system");
      expect(convo[0]!.content).toStartWith("You are the orchestrator of a goal, turn 1 of at most 10.");
      expect(convo.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "user"]);
      // turn 1's bash ran in the sandbox (agent stages' default, which goal keeps): its write outside the worktree was refused
      expect(String(convo[2]!.content)).toContain("SYSTEM=denied");
      expect(existsSync(ESCAPE)).toBe(false);
      expect(convo[3]!.content).toBe("turn 1: wrote turn-1.txt (R1)");
      expect(convo[4]!.content).toContain("The reviewers' blockers on your last turn:\n- tests are missing\n");
      expect(convo[4]!.content).toContain("Their other findings:\n- no test output shown\n");

      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["goal-ledger.json", "turn-01.md", "turn-02.md"]);
      expect(files["turn-01.md"]).toBe("turn 1: wrote turn-1.txt (R1)");
      const ledger = JSON.parse(files["goal-ledger.json"]!);
      expect(ledger).toMatchObject({
        objective: "Add the feature",
        requirements: [{ id: "R1", text: "the feature exists" }, { id: "R2", text: "it is tested" }],
        status: "complete",
        branch,
        base: "main",
        worktree,
        blockers: [],
        pull_request: "https://github.example/acme/project/pull/7",
      });
      const [t1, t2] = ledger.turns;
      expect(t1.receipt).toEqual({ report: "turn 1: wrote turn-1.txt (R1)", file: "turn-01.md", commit: commits[1]!.slice(0, 40) });
      expect(t1.reviews.map((x: { reviewer: string; verdict: string; valid: boolean }) => [x.reviewer, x.verdict, x.valid])).toEqual([
        ["completion", "incomplete", true],
        ["evidence", "incomplete", true],
        ["risk", "complete", true],
      ]);
      expect(t1.reviews[1].findings).toEqual([{ finding: "no test output shown", severity: "note", confidence: 0.8, requirements: ["R2"] }]); // R9 is no requirement
      expect(t1.reverified).toEqual([{ finding: "turn-1.txt may clash with a generated file", confirmed: false, reason: "the files show no clash" }]);
      expect(t1.blockers).toEqual(["tests are missing"]);
      expect(t2.blockers).toEqual([]);
      expect(t2.reviews.every((x: { verdict: string }) => x.verdict === "complete")).toBe(true);

      // the same blocker three turns running: blocked (no pull request: not complete)
      s.setAnswers(answers("blocked"));
      s.counts.clear();
      const blockedRepo = gitRepo();
      const b = await inRepo(s, blockedRepo, (home) => runBuiltin("goal", INPUTS, s, home, blockedRepo.dir));
      expect(b.code).toBe(1);
      expect(b.outputs).toMatchObject({ status: "blocked", turns: 3, blockers: ["Tests are missing."], pull_request: null });
      expect(blockedRepo.ghCalls()).toEqual([]);
      const blockedLedger = JSON.parse(artifacts(`${blockedRepo.dir}/.atomic/runs/goal-${b.runId}`)["goal-ledger.json"]!);
      expect(blockedLedger.status).toBe("blocked");
      expect(blockedRepo.git("log", "--format=%s", `main..atomic/goal-${b.runId}`).split("\n")).toHaveLength(3);

      // a different blocker each turn: the turn limit, needs_human
      s.setAnswers(answers("limit"));
      const limitRepo = gitRepo();
      const l = await inRepo(s, limitRepo, (home) => runBuiltin("goal", [...INPUTS, "max_turns=2"], s, home, limitRepo.dir));
      expect(l.code).toBe(1);
      expect(l.outputs).toMatchObject({ status: "needs_human", turns: 2, blockers: ["missing part 2"] });
      // a provider error in one reviewer's branch: that review is invalid (no findings), the others count
      const limitLedger = JSON.parse(artifacts(`${limitRepo.dir}/.atomic/runs/goal-${l.runId}`)["goal-ledger.json"]!);
      expect(limitLedger.turns[0].reviews[2]).toEqual({ reviewer: "risk", verdict: "incomplete", summary: "the reviewer gave no valid answer", findings: [], valid: false });
      expect(limitLedger.turns.map((t: { blockers: string[] }) => t.blockers)).toEqual([["missing part 1"], ["missing part 2"]]);

      // SIGKILL at a random stage, resume: nothing recorded re-runs, the same outputs and files
      s.setAnswers(answers("complete"));
      const order = Object.keys(COUNTS);
      const at = pick("goal", order);
      s.counts.clear();
      const killRepo = gitRepo();
      const resumed = await inRepo(s, killRepo, (home) => killAtStageAndResume("goal", INPUTS, s, at, home, killRepo.dir));
      expect(resumed.code).toBe(0);
      await expectNothingRecordedReran(resumed, killRepo.dir, s, COUNTS, at);
      expect(normalized(resumed.outputs, resumed.runId, killRepo.dir)).toEqual(normalized(r.outputs, r.runId, repo.dir));
      expect(normalized(artifacts(`${killRepo.dir}/.atomic/runs/goal-${resumed.runId}`), resumed.runId, killRepo.dir)).toEqual(normalized(files, r.runId, repo.dir));
      expect(killRepo.ghCalls().length).toBe(1);
    } finally {
      await s.close();
    }
  },
  300_000,
);

e2eTest("goal and ralph outside a git repository, and out-of-range inputs, are refused in one sentence", async () => {
  const s = await scriptedServer(stageOf, answers("complete"));
  try {
    const home = makeTempDir("atomic-goal-home-");
    const cwd = makeTempDir("atomic-goal-nogit-");
    for (const name of ["goal", "ralph"]) {
      const r = await runAtomic(["run", name, "--input", name === "goal" ? "objective=x" : "prompt=x", "--input", "acceptance_criteria=y", "--input", "model=fake-model"], { home, cwd, env: s.env });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`failed: ${name}: ${cwd} is not in a git repository with a commit, and its work goes on a git branch of its own\nhint: run it in a git repository with at least one commit, and name an existing base_branch\n`);
      expect(r.stderr).not.toMatch(STACK_LINE);
    }
    expect(s.server.requests.length).toBe(0);
    for (const [args, message] of [
      [["run", "goal", "--input", "objective=x", "--input", "acceptance_criteria=y", "--input", "max_turns=0"], 'input "max_turns" must be from 1 to 50, got 0'],
      [["run", "ralph", "--input", "prompt=x", "--input", "max_loops=51"], 'input "max_loops" must be from 1 to 50, got 51'],
      [["run", "goal", "--input", "objective=x"], 'input "acceptance_criteria" is required'],
    ] as const) {
      const r = await runAtomic([...args], { home, cwd, env: s.env });
      expect(r.code).toBe(2);
      expect(expectOneSentenceError(r.stderr).message).toStartWith(message);
    }
  } finally {
    await s.close();
  }
});
