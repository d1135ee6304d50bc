/**
 * ctx.review(stage, { revise: { to } }) through dist/atomic (issue 30;
 * docs/guides/worktrees.md#review): requested changes go to a named next
 * stage (an openai stage on the fake provider) that works in the reviewed
 * stage's worktree on its branch, its prompt the comments; the first round
 * a new session, the second continuing it; the driver killed with SIGKILL
 * while the run waits for the third review, the review given meanwhile and
 * the run resumed: nothing runs twice, the workflow goes on. A `to` that
 * names what the review gives (shell, prompt) or is no spec is refused in
 * one sentence (bad_review) before any follow-up runs.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, toolCall, type RecordedRequest } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WORKFLOW = fixture("review-next-stage.ts");

function git(cwd: string, ...args: string[]): string {
  const r = Bun.spawnSync(["git", ...args], { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LC_ALL: "C" } });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

function makeRepo(): string {
  const repo = makeTempDir("atomic-review-to-");
  git(repo, "init", "-q", "-b", "main");
  writeFileSync(join(repo, "README.md"), "# app\n");
  git(repo, "add", "-A");
  git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base");
  return repo;
}

async function lastRunId(home: string): Promise<string> {
  return (await waitUntil(async () => {
    const r = await runAtomic(["runs", "--json", "--limit", "1"], { home });
    return r.stdout.trim() ? (JSON.parse(r.stdout.trim().split("\n")[0]!) as { id: string }).id : false;
  }, 30_000, "the run to exist")) as string;
}

/** Waits for the open review question of `stage`. */
async function reviewOf(home: string, id: string, stage: string): Promise<void> {
  await waitUntil(async () => {
    const r = await runAtomic(["inbox", id, "--json"], { home });
    const box = JSON.parse(r.stdout || "{}") as { prompts?: { state: string; question: string }[] };
    return (box.prompts ?? []).some((p) => p.state === "open" && p.question.includes(`atomic review ${id} ${stage} --approve`));
  }, 60_000, `the review of ${stage}`);
}

const asks = (req: RecordedRequest) => req.body.messages.filter((m) => m.role === "user" && String(m.content).includes("asks for changes"));

e2eTest("revise: { to }: requested changes go to a named next stage in the reviewed worktree, a new session then its continuation; kill -9 and resume run nothing twice", async () => {
  // the fixer writes fix.txt: "round N", N the requests for changes it has seen in its session
  const provider = await startFakeOpenAI((req) => {
    if (req.body.messages.at(-1)!.role === "tool") return text("fixed");
    return toolCall("write", { path: "fix.txt", content: `round ${asks(req).length}\n` });
  });
  try {
    const home = makeTempDir();
    const repo = makeRepo();
    const env = { ATOMIC_OPENAI_BASE_URL: provider.url, OPENAI_API_KEY: "sk-test" };
    const proc = spawnAtomic(["run", WORKFLOW], { home, cwd: repo, env });
    const id = await lastRunId(home);

    await reviewOf(home, id, "edit");
    const first = await runAtomic(["review", id, "edit", "--comment", "app.txt:1", "say hello"], { home });
    expect(first.code).toBe(0);
    // round 1: stage fixer-1, a new session, its prompt the comment and where it works
    await reviewOf(home, id, "fixer-1");
    const one = provider.requests[0]!;
    expect(one.body.messages.filter((m) => m.role === "user").length).toBe(1);
    const asked = String(asks(one)[0]!.content);
    expect(asked).toContain("The reviewer of this change asks for changes:\n- app.txt:1: say hello");
    expect(asked).toMatch(/This directory is the worktree of stage edit \(branch atomic\/[^)]+-edit\), as it left it\./);

    const second = await runAtomic(["review", id, "fixer-1", "--comment", "fix.txt:1", "once more"], { home });
    expect(second.code).toBe(0);
    // round 2: stage fixer-2 continues fixer-1's session
    await reviewOf(home, id, "fixer-2");
    const two = provider.requests[2]!;
    expect(asks(two).length).toBe(2);
    expect(String(asks(two)[1]!.content)).toContain("- fix.txt:1: once more");
    expect(provider.requests.length).toBe(4);

    // the driver dies while the run waits; the review is given meanwhile; resume goes on
    proc.kill("SIGKILL");
    await proc.exited;
    const approve = await runAtomic(["review", id, "fixer-2", "--approve"], { home });
    expect(approve.code).toBe(0);
    const resumed = await runAtomic(["resume", id], { home, cwd: repo, env });
    expect(resumed.stderr).toBe("");
    expect(resumed.code).toBe(0);
    expect(provider.requests.length).toBe(4);
    const shown = JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout) as { run: { outputs: Record<string, unknown> & { branch: string } } };
    expect(shown.run.outputs).toEqual({ approved: true, by: "cli", reviewed: "fixer-2", branch: shown.run.outputs.branch, after: "went on" });
    // one branch, edit's: both rounds worked on it; the checkout is untouched
    const branch = git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*").trim();
    expect(branch).toBe(shown.run.outputs.branch);
    expect(branch).toMatch(/-edit$/);
    expect(git(repo, "show", `${branch}:app.txt`)).toBe("draft\n");
    expect(git(repo, "show", `${branch}:fix.txt`)).toBe("round 2\n");
    expect(git(repo, "status", "--porcelain")).toBe("");
  } finally {
    await provider.close();
  }
}, 120_000);

e2eTest("revise: { to } naming what the review gives, or not a stage spec, is refused in one sentence", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const cases: [string, string, string][] = [
    ["to-shell", "ctx.review: revise.to fixer names shell, but the next stage is an agent whose prompt is the reviewer's comments", "hint: leave shell out of revise.to; for example"],
    ["to-prompt", "ctx.review: revise.to fixer names prompt, but the next stage is an agent whose prompt is the reviewer's comments", "hint: leave prompt out of revise.to (words before the comments go in revise.prompt)"],
    ["to-string", 'ctx.review: revise.to "fixer" is not a stage spec with a name', 'hint: for example revise: { to: { name: "fixer"'],
  ];
  for (const [mode, sentence, hint] of cases) {
    const r = await runAtomic(["run", WORKFLOW, "--input", `mode=${mode}`], { home, cwd: repo });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(sentence);
    expect(r.stderr).toContain(hint);
    const shown = JSON.parse((await runAtomic(["show", await lastRunId(home), "--json"], { home })).stdout) as { run: { error?: { code: string } } };
    expect(shown.run.error?.code).toBe("bad_review");
  }
});
