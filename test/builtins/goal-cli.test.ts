/**
 * goal with a real CLI agent: the codex CLI (test/agents) as every stage,
 * through dist/atomic, against the fake Responses API, in a real git
 * repository. Turn 2's orchestrator resumes turn 1's codex thread
 * (continueFrom: `codex exec resume`) in the run's worktree, the reviewers
 * answer through --output-schema, each turn's file is committed on the
 * branch, and the run ends complete, every turn in one worktree of the branch.
 */

import { existsSync, readdirSync, rmdirSync } from "node:fs";
import { afterAll, expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { codexHome, inputsFile } from "../helpers/agent-homes.ts";
import { say, shell, startFakeResponses, type ResponsesReply } from "../helpers/fake-responses.ts";
import type { LoggedRequest } from "../helpers/fake-provider.ts";
import { realStages } from "../helpers/real-agent-stage.ts";
import { e2eTest } from "../e2e/support.ts";
import { gitRepo } from "./git-support.ts";

const DAEMON_DIR = `/tmp/codex-daemon-${process.getuid?.() ?? 0}`;
const daemonDirWasThere = existsSync(DAEMON_DIR);
afterAll(() => {
  if (!daemonDirWasThere && existsSync(DAEMON_DIR) && readdirSync(DAEMON_DIR).length === 0) rmdirSync(DAEMON_DIR);
});

const setup = realStages<ResponsesReply>(startFakeResponses, codexHome, { runner: "codex" });

const messages = (body: any) => (body.input as any[]).filter((i) => i.type === "message");
const userTexts = (body: any): string[] => messages(body).filter((i) => i.role === "user").flatMap((i) => (i.content as any[]).map((c) => String(c.text ?? "")));
/** The model's answer to one request: chosen by the stage (its prompt) and whether its tool already ran. */
function respond(req: LoggedRequest): ResponsesReply {
  const body = req.body as any;
  const ask = userTexts(body).at(-1) ?? "";
  const turn = ask.startsWith("You are the orchestrator of a goal, turn 1 ") ? "1" : /^Turn (\d+) of at most/.exec(ask)?.[1];
  // the orchestrator writes its turn's file, then (its tool's output last in the request) reports
  if (turn) return (body.input as any[]).at(-1)?.type === "function_call_output" ? say(`turn ${turn} report`) : shell(`printf 'work of turn ${turn}\\n' > turn-${turn}.txt`);
  const review = /^You are the (\w+) reviewer of turn (\d+)/.exec(ask);
  if (review) {
    const blocked = review[1] === "completion" && review[2] === "1";
    return say(JSON.stringify({ verdict: blocked ? "incomplete" : "complete", summary: "judged", findings: blocked ? [{ finding: "tests are missing", severity: "blocking", confidence: 0.9, requirements: ["R2"] }] : [] }));
  }
  return say(`unexpected: ${ask.slice(0, 60)}`);
}

e2eTest("goal with the real codex CLI: the orchestrator's thread resumed across turns in the worktree, reviews through --output-schema, commits on the branch", async () => {
  const s = await setup();
  s.fake.push(...Array.from({ length: 40 }, () => respond));
  const repo = gitRepo();
  const env = { ...repo.env, ...s.h.env, PATH: repo.env.PATH! };
  const inputs = inputsFile(s.h, { objective: "Add the feature", acceptance_criteria: "the feature exists\nit is tested", runner: "codex" });
  const r = await runAtomic(["--json", "run", "goal", "--inputs-json", inputs, "--workers", "2"], { home: s.h.home, cwd: repo.dir, env, timeoutMs: 240_000 });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
  expect(out).toMatchObject({ status: "complete", turns: 2, blockers: [], pull_request: null });
  expect(repo.git("log", "--format=%s", `main..${out.branch}`).split("\n")).toEqual(["atomic: what stage orchestrator-02 left uncommitted", "atomic: what stage orchestrator-01 left uncommitted"]);
  expect(repo.git("show", `${out.branch}:turn-2.txt`)).toBe("work of turn 2");
  // every turn in one worktree of the branch, in the git directory; the checkout untouched
  expect(repo.git("worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("branch "))).toEqual(["branch refs/heads/main", `branch refs/heads/${out.branch}`]);
  expect(repo.git("status", "--porcelain", "--untracked-files=no")).toBe("");
  // turn 2 resumed turn 1's thread: its first request carries turn 1's prompt, the tool's output and the report
  const turn2 = s.fake.calls.find((c) => /^Turn 2 of at most/.test(userTexts(c.body).at(-1) ?? ""))!;
  expect(userTexts(turn2.body).some((t) => t.startsWith("You are the orchestrator of a goal, turn 1 "))).toBe(true);
  expect(JSON.stringify(turn2.body)).toContain("turn 1 report");
  expect(userTexts(turn2.body).at(-1)).toContain("The reviewers' blockers on your last turn:\n- tests are missing");
  s.fake.assertOnlyFake();
}, 300_000);
