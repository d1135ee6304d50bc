/**
 * Stages in git worktrees (issue 30; docs/guides/worktrees.md), through
 * dist/atomic on real repositories in temp dirs: three parallel stages
 * (shell stages, and agent stages through their sandboxed bash) editing
 * the same file get three branches and three diffs while the
 * checkout stays untouched; a driver killed with SIGKILL mid-stage is
 * resumed in the same worktree (a lock a killed git left there is removed,
 * one a live git holds is not); `atomic diff` prints a stage's diff;
 * `atomic gc` removes the worktrees and keeps the branches unless asked;
 * bad input (no repository, a dirty checkout, an unknown base, a branch that
 * exists) is one sentence and leaves no worktree, branch or ref behind.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, groupAlive, makeTempDir, stagePid } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WORKFLOW = fixture("worktrees.ts");

interface Ws {
  path: string;
  branch: string;
  baseCommit: string;
  head: string;
  commits: { sha: string; subject: string; auto?: boolean }[];
  files: { path: string; status: string }[];
  diff: string;
  diffPath: string;
  pwd: string;
}

function git(cwd: string, ...args: string[]): string {
  const r = Bun.spawnSync(["git", ...args], { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LC_ALL: "C" } });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

/** A repository with one commit (shared.txt: "base") on branch main. */
export function makeRepo(): string {
  const repo = makeTempDir("atomic-wt-repo-");
  git(repo, "init", "-q", "-b", "main");
  writeFileSync(join(repo, "shared.txt"), "base\n");
  git(repo, "add", "shared.txt");
  git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base");
  return repo;
}

async function lastRunId(home: string): Promise<string> {
  const r = await runAtomic(["runs", "--json", "--limit", "1"], { home });
  return (JSON.parse(r.stdout.trim().split("\n")[0]!) as { id: string }).id;
}

/** What the checkout and the repository hold of atomic: its branches, base refs and worktrees. */
function traces(repo: string) {
  return {
    branches: git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*").trim(),
    refs: git(repo, "for-each-ref", "refs/atomic-base/").trim(),
    worktrees: git(repo, "worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("worktree ")).length,
  };
}

e2eTest("three parallel stages editing the same file: three branches, three diffs, the checkout untouched; atomic diff; gc keeps the branches", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const out = join(makeTempDir(), "out.json");
  const head = git(repo, "rev-parse", "HEAD").trim();
  const r = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=three"], { home, cwd: repo });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const [one, two, three] = JSON.parse(readFileSync(out, "utf8")) as Ws[];
  const id = await lastRunId(home);
  // the checkout: same commit, same file, nothing uncommitted
  expect(git(repo, "rev-parse", "HEAD").trim()).toBe(head);
  expect(readFileSync(join(repo, "shared.txt"), "utf8")).toBe("base\n");
  expect(git(repo, "status", "--porcelain")).toBe("");
  // three branches and worktrees, each stage ran in its own
  expect(new Set([one!.branch, two!.branch, three!.branch]).size).toBe(3);
  for (const [ws, name] of [[one!, "one"], [two!, "two"], [three!, "three"]] as const) {
    expect(ws.branch).toMatch(new RegExp(`^atomic/${id}/[0-9.]+-${name}$`));
    expect(ws.baseCommit).toBe(head);
    expect(ws.pwd).toBe(ws.path);
    expect(readFileSync(join(ws.path, "shared.txt"), "utf8")).toBe(`${name} was here\n`);
    expect(git(repo, "rev-parse", ws.branch).trim()).toBe(ws.head);
    expect(ws.diff).toContain(`-base\n+${name} was here\n`);
    expect(readFileSync(ws.diffPath, "utf8")).toBe(ws.diff);
  }
  // one committed itself; two's and three's edits were committed by atomic
  expect(one!.commits.map((c) => [c.subject, c.auto === true])).toEqual([["one edits shared", false]]);
  expect(two!.commits.map((c) => [c.subject, c.auto === true])).toEqual([["atomic: what stage two left uncommitted", true]]);
  expect(three!.files).toEqual([
    { path: "added.txt", status: "A" },
    { path: "shared.txt", status: "M" },
  ]);

  const diff = await runAtomic(["diff", id, "two"], { home });
  expect(diff.code).toBe(0);
  expect(diff.stdout).toBe(two!.diff);
  const stat = await runAtomic(["diff", id, "three", "--stat"], { home });
  expect(stat.code).toBe(0);
  expect(stat.stdout).toMatch(/added\.txt +\| 1 \+\n shared\.txt \| 2 \+-\n 2 files changed, 2 insertions\(\+\), 1 deletion\(-\)/);
  const unknown = await runAtomic(["diff", id, "four"], { home });
  expect(unknown.code).toBe(2);
  expect(unknown.stderr).toContain(`run ${id} has no stage named "four"`);

  // gc: the worktrees go, the branches stay (atomic diff reads the branch then)
  const gc = await runAtomic(["gc", "--older-than", "0s", "--json"], { home });
  expect(gc.code).toBe(0);
  expect((JSON.parse(gc.stdout) as { worktrees: string[] }).worktrees.sort()).toEqual([one!.path, two!.path, three!.path].sort());
  for (const ws of [one!, two!, three!]) expect(existsSync(ws.path)).toBe(false);
  expect(traces(repo)).toMatchObject({ worktrees: 1 });
  expect(traces(repo).branches.split("\n").length).toBe(3);
});

e2eTest("three agent stages in parallel worktrees edit the same file through their sandboxed bash: three branches, three diffs, the checkout untouched", async () => {
  const { startFakeOpenAI, text, toolCall } = await import("../helpers/fake-openai.ts");
  const escape = `/var/tmp/atomic-agents-escape-${process.pid}`;
  const server = await startFakeOpenAI((req) => {
    const name = /you are (\w+)/.exec(String(req.body.messages.find((m) => m.role === "user")!.content))![1]!;
    const tool = req.body.messages.find((m) => m.role === "tool");
    // ... and tries to write outside it: refused in the sandbox agent stages get by default
    if (!tool) return toolCall("bash", { command: `echo "${name} was here" > shared.txt && { echo x > ${escape}-${name} 2>/dev/null || true; } && pwd` });
    return text(String(tool.content).split("\n").find((l) => l.startsWith("/")) ?? "no pwd");
  });
  try {
    const home = makeTempDir();
    const repo = makeRepo();
    const out = join(makeTempDir(), "out.json");
    const head = git(repo, "rev-parse", "HEAD").trim();
    const r = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=agents"], { home, cwd: repo, env: { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" } });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const results = JSON.parse(readFileSync(out, "utf8")) as Ws[];
    expect(git(repo, "rev-parse", "HEAD").trim()).toBe(head);
    expect(readFileSync(join(repo, "shared.txt"), "utf8")).toBe("base\n");
    expect(git(repo, "status", "--porcelain")).toBe("");
    expect(new Set(results.map((ws) => ws.branch)).size).toBe(3);
    for (const [ws, name] of results.map((ws, i) => [ws, ["one", "two", "three"][i]!] as const)) {
      expect(ws.baseCommit).toBe(head);
      // its bash ran in its own worktree
      expect(ws.pwd).toBe(ws.path);
      expect(git(repo, "show", `${ws.branch}:shared.txt`)).toBe(`${name} was here\n`);
      expect(ws.diff).toContain(`-base\n+${name} was here\n`);
      expect(ws.commits.map((c) => [c.subject, c.auto === true])).toEqual([[`atomic: what stage ${name} left uncommitted`, true]]);
    }
    expect(traces(repo)).toMatchObject({ worktrees: 4 });
    expect(["one", "two", "three"].filter((name) => existsSync(`${escape}-${name}`))).toEqual([]);
  } finally {
    for (const name of ["one", "two", "three"]) rmSync(`${escape}-${name}`, { force: true });
    await server.close();
  }
});

/** A run of the "hold" stage in a worktree, its driver and stage killed with SIGKILL while the stage waits. */
async function killedMidStage() {
  const home = makeTempDir();
  const repo = makeRepo();
  const dir = makeTempDir();
  const out = join(dir, "out.json");
  const env = { E2E_DIR: dir };
  const proc = spawnAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=hold"], { home, cwd: repo, env });
  const pgid = await stagePid(dir, "hold");
  const ready = join(dir, "hold.ready");
  const path = (await waitUntil(() => existsSync(ready) && readFileSync(ready, "utf8").trim(), 30_000, "the stage to start")) as string;
  proc.kill("SIGKILL");
  await proc.exited;
  // The worker may have ended the stage already, on its driver's death.
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    // ended meanwhile
  }
  await waitUntil(() => !groupAlive(pgid), 10_000, "the stage's process group to end");
  return { home, repo, dir, out, env, path };
}

e2eTest("a driver killed with SIGKILL mid-stage: the resumed attempt works on in the same worktree; gc --delete-branches removes the branch too", async () => {
  const { home, repo, dir, out, env, path } = await killedMidStage();
  expect(readFileSync(join(path, "shared.txt"), "utf8")).toBe("base\nbefore the kill\n");

  writeFileSync(join(dir, "hold.go"), "");
  const id = await lastRunId(home);
  const resumed = await runAtomic(["resume", id], { home, cwd: repo, env });
  expect(resumed.code).toBe(0);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as Ws[];
  // the same worktree, with what the killed attempt left in it
  expect(ws!.path).toBe(path);
  expect(ws!.pwd).toBe(path);
  expect(ws!.diff).toContain("+before the kill\n+before the kill\n+after the resume\n");
  expect(git(repo, "status", "--porcelain")).toBe("");
  expect(traces(repo)).toMatchObject({ worktrees: 2, branches: ws!.branch });

  const gc = await runAtomic(["gc", "--older-than", "0s", "--delete-branches"], { home });
  expect(gc.code).toBe(0);
  expect(gc.stdout).toContain("removed 1 stage worktree and 1 branch");
  expect(traces(repo)).toEqual({ branches: "", refs: "", worktrees: 1 });
});

e2eTest("a lock in the stage's worktree held by a live git stays at the resume (its pid named); once that git is dead, the next resume removes the lock and settles", async () => {
  const { home, repo, dir, out, env, path } = await killedMidStage();
  // A git still running in the worktree (an orphan of the killed driver, say) holds its index lock.
  const lock = join(git(path, "rev-parse", "--absolute-git-dir").trim(), "index.lock");
  const bin = makeTempDir("atomic-git-bin-");
  const fifo = join(bin, "release");
  Bun.spawnSync(["mkfifo", fifo]);
  writeFileSync(join(bin, "git"), '#!/bin/sh\n: > "$1" && read _ < "$2"\n', { mode: 0o755 });
  const holder = Bun.spawn([join(bin, "git"), lock, fifo], { cwd: path, stdout: "ignore", stderr: "ignore" });
  try {
    await waitUntil(() => existsSync(lock), 10_000, "the live git to take the lock");
    writeFileSync(join(dir, "hold.go"), "");
    const id = await lastRunId(home);
    const kept = await runAtomic(["resume", id], { home, cwd: repo, env });
    expect(kept.code).not.toBe(0);
    expect(kept.stderr).toContain(`stage hold: git (pid ${holder.pid}) is still running in its repository, so ${lock} stays in place`);
    expect(kept.stderr).not.toContain("    at ");
    expect(existsSync(lock)).toBe(true);
    // That git is killed in turn: its lock is dead, and the next resume removes it.
    holder.kill("SIGKILL");
    await holder.exited;
    expect(existsSync(lock)).toBe(true);
    const resumed = await runAtomic(["resume", id], { home, cwd: repo, env });
    expect({ code: resumed.code, stderr: resumed.code === 0 ? "" : resumed.stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
    expect(resumed.stderr).toContain(`stage hold: removed ${lock}, a lock a killed git left in its worktree (no git process was running there)`);
    expect(existsSync(lock)).toBe(false);
    const [ws] = JSON.parse(readFileSync(out, "utf8")) as Ws[];
    expect(ws!.path).toBe(path);
    expect(ws!.diff).toContain("+after the resume\n");
  } finally {
    holder.kill("SIGKILL");
  }
});

e2eTest("bad workspaces fail in one sentence and leave no worktree, branch or ref behind", async () => {
  const home = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  const run = (cwd: string, workspace?: unknown) =>
    runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=bad", ...(workspace !== undefined ? ["--input", `workspace=${JSON.stringify(workspace)}`] : [])], { home, cwd });
  const expectRefused = (r: { code: number; stderr: string }, message: string, hint: RegExp) => {
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(message);
    expect(r.stderr).toMatch(hint);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  };

  const notRepo = makeTempDir();
  expectRefused(await run(notRepo), `stage "bad": workspace "worktree" needs a git repository, and ${notRepo} is not in one`, /hint: .*git init/);

  const repo = makeRepo();
  writeFileSync(join(repo, "shared.txt"), "edited\n");
  writeFileSync(join(repo, "new.txt"), "new\n");
  expectRefused(await run(repo), `stage "bad": the checkout ${repo} has uncommitted changes that the worktree would leave out: shared.txt, new.txt`, /hint: commit or stash them first/);
  expectRefused(await run(repo, { worktree: { base: "nope" } }), `stage "bad": base "nope" is not a commit of ${repo}`, /hint: name a branch, tag or commit that exists/);
  expectRefused(await run(repo, { worktree: { branch: "main" } }), `stage "bad": branch main already exists in ${repo}`, /hint: name another branch/);
  expectRefused(await run(repo, { worktree: { branch: "a..b" } }), `stage "bad": "a..b" is not a valid branch name`, /hint: /);
  expectRefused(await run(repo, "sandbox"), 'stage "bad": workspace "sandbox" is not a workspace', /hint: write workspace: "worktree"/);
  expect(traces(repo)).toEqual({ branches: "", refs: "", worktrees: 1 });
  expect(readFileSync(join(repo, "shared.txt"), "utf8")).toBe("edited\n");

  // an explicit base is taken as it is: the uncommitted edits stay in the checkout, the stage runs from the commit
  const ok = await run(repo, { worktree: { base: "main", branch: "try/one" } });
  expect(ok.code).toBe(0);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as Ws[];
  expect(ws!.branch).toBe("try/one");
  expect(readFileSync(join(ws!.path, "shared.txt"), "utf8")).toBe("base\n");
  expect(ws!.commits).toEqual([]);
});

e2eTest("ctx.merge: two clean branches merge; a conflicting one is reported with its hunks and nothing is half-merged; the checkout stays untouched", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const out = join(makeTempDir(), "out.json");
  git(repo, "branch", "integrate", "main");
  git(repo, "branch", "conflicts", "main");
  const head = git(repo, "rev-parse", "main").trim();
  const r = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=merge"], { home, cwd: repo });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const { clean, conflicting, branches } = JSON.parse(readFileSync(out, "utf8")) as {
    clean: { ok: boolean; head: string; merged: { branch: string }[] };
    conflicting: { ok: boolean; head: string; merged: unknown[]; conflict: { branch: string; files: { path: string; hunks: string }[] } };
    branches: string[];
  };
  expect(clean.ok).toBe(true);
  expect(clean.merged.map((m) => m.branch)).toEqual([branches[0]!, branches[1]!]);
  expect(git(repo, "rev-parse", "integrate").trim()).toBe(clean.head);
  expect(git(repo, "show", "integrate:a.txt")).toBe("a\n");
  expect(git(repo, "show", "integrate:b.txt")).toBe("b\n");
  // the merges on top, in order; the stages' own commits (of one second, so in either order) under them
  const log = git(repo, "log", "--format=%s", "integrate").split("\n").filter(Boolean);
  expect(log.slice(0, 2)).toEqual([`atomic: merge ${branches[1]} into integrate`, `atomic: merge ${branches[0]} into integrate`]);
  expect(log.slice(2).sort()).toEqual(["atomic: what stage a left uncommitted", "atomic: what stage b left uncommitted", "base"]);
  // b and c merged in the temporary worktree, a conflicted there: the target did not move at all
  expect(conflicting.ok).toBe(false);
  expect(conflicting.conflict.branch).toBe(branches[0]!);
  expect(conflicting.conflict.files.map((f) => f.path)).toEqual(["a.txt"]);
  expect(conflicting.conflict.files[0]!.hunks).toContain(`++<<<<<<< HEAD\n +c\n++=======\n+ a\n++>>>>>>> ${branches[0]}\n`);
  expect(conflicting.head).toBe(head);
  expect(git(repo, "rev-parse", "conflicts").trim()).toBe(head);
  // the checkout: untouched; no temporary worktree left (main's and the three stages')
  expect(git(repo, "rev-parse", "HEAD").trim()).toBe(head);
  expect(git(repo, "status", "--porcelain")).toBe("");
  expect(traces(repo).worktrees).toBe(4);
});

e2eTest("ctx.merge into a branch checked out elsewhere, or one that does not exist, is refused in one sentence; nothing changes", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const out = join(makeTempDir(), "out.json");
  const head = git(repo, "rev-parse", "main").trim();
  const run = (into: string) => runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=merge-into", "--input", `into=${into}`], { home, cwd: repo });
  const main = await run("main");
  expect(main.code).toBe(1);
  expect(main.stderr).toContain(`ctx.merge: branch main is checked out in ${repo}, and merging into it would leave that checkout's files behind its branch`);
  expect(main.stderr).toMatch(/hint: merge into a branch of its own/);
  const other = makeTempDir("atomic-wt-other-");
  git(repo, "worktree", "add", "-q", "-b", "elsewhere", join(other, "co"), "main");
  const elsewhere = await run("elsewhere");
  expect(elsewhere.code).toBe(1);
  expect(elsewhere.stderr).toContain(`ctx.merge: branch elsewhere is checked out in ${join(other, "co")}`);
  const missing = await run("nope");
  expect(missing.code).toBe(1);
  expect(missing.stderr).toContain(`ctx.merge: branch nope does not exist in ${repo}`);
  for (const r of [main, elsewhere, missing]) expect(r.stderr).not.toMatch(/\n\s+at /);
  expect(git(repo, "rev-parse", "main").trim()).toBe(head);
  expect(git(repo, "rev-parse", "elsewhere").trim()).toBe(head);
  expect(git(repo, "status", "--porcelain")).toBe("");
  // main's, the other checkout's and one stage worktree per run: no temporary merge worktree
  expect(traces(repo).worktrees).toBe(5);
});

/** Waits until the run has an open question whose text contains `text`. */
async function openQuestion(home: string, id: string, text: string): Promise<void> {
  await waitUntil(
    async () => {
      const r = await runAtomic(["inbox", id, "--json"], { home });
      const box = JSON.parse(r.stdout || "{}") as { prompts?: { state: string; question: string }[] };
      return (box.prompts ?? []).some((p) => p.state === "open" && p.question.includes(text));
    },
    30_000,
    `an open question about ${text}`,
  );
}

e2eTest("ctx.review parks until atomic review: comments reach the workflow, a review given while no process drives the run is used on resume", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const out = join(makeTempDir(), "out.json");
  const proc = spawnAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=review"], { home, cwd: repo });
  const id = await waitUntil(async () => {
    const r = await runAtomic(["runs", "--json", "--limit", "1"], { home });
    return r.stdout.trim() ? (JSON.parse(r.stdout.trim().split("\n")[0]!) as { id: string }).id : false;
  }, 30_000, "the run to exist") as string;
  await openQuestion(home, id, "-edit: see it with");
  const status = await runAtomic(["runs", "--json", "--limit", "1"], { home });
  expect((JSON.parse(status.stdout.trim()) as { status: string }).status).toBe("awaiting_input");
  // bad input first: neither flag, a comment without FILE:LINE
  const neither = await runAtomic(["review", id, "edit"], { home });
  expect(neither.code).toBe(2);
  expect(neither.stderr).toContain("atomic review needs either --approve or --comment FILE:LINE TEXT");
  const noLine = await runAtomic(["review", id, "edit", "--comment", "shared.txt", "x"], { home });
  expect(noLine.code).toBe(2);
  expect(noLine.stderr).toContain('--comment "shared.txt" is not FILE:LINE');

  const notShown = await runAtomic(["review", id, "edit", "--comment", "shared.txt:7", "x"], { home });
  expect(notShown.code).toBe(2);
  expect(notShown.stderr).toContain("line 7 of shared.txt is not a line the diff of stage edit shows");
  const otherFile = await runAtomic(["review", id, "edit", "--comment", "README:1", "x"], { home });
  expect(otherFile.code).toBe(2);
  expect(otherFile.stderr).toContain("README is not a file the diff of stage edit changes");
  const comment = await runAtomic(["review", id, "edit", "--comment", "shared.txt:1", "say more"], { home });
  expect(comment.stderr).toBe("");
  expect(comment.code).toBe(0);
  expect(comment.stdout).toContain(`stage edit of run ${id}: commented on shared.txt:1`);
  // the workflow got the comment: its fix stage ran and asks for the second review; the driver dies meanwhile
  await openQuestion(home, id, "-fix: see it with");
  proc.kill("SIGKILL");
  await proc.exited;
  const approve = await runAtomic(["review", id, "fix", "--approve"], { home });
  expect(approve.code).toBe(0);
  expect(approve.stdout).toContain("no process drives the run; continue it with: atomic resume");
  const resumed = await runAtomic(["resume", id], { home, cwd: repo });
  expect(resumed.code).toBe(0);
  expect(JSON.parse(readFileSync(out, "utf8"))).toEqual([
    { approved: false, by: "cli", comments: [{ file: "shared.txt", line: 1, text: "say more" }] },
    { approved: true, by: "cli" },
  ]);
  const fixBranch = git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*-fix").trim();
  expect(git(repo, "show", `${fixBranch}:notes.txt`)).toBe("shared.txt:1 say more\n");
  const late = await runAtomic(["review", id, "edit", "--approve"], { home });
  expect(late.code).toBe(2);
  expect(late.stderr).toContain(`stage edit of run ${id} is not waiting for a review`);
});

e2eTest("a review of a stage without a worktree is refused: by ctx.review in the run, by atomic review on the command line", async () => {
  const home = makeTempDir();
  const repo = makeRepo();
  const out = join(makeTempDir(), "out.json");
  const r = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=review-plain"], { home, cwd: repo });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("ctx.review: the stage has no git worktree, so it has no diff to review");
  expect(r.stderr).toMatch(/hint: run the stage with workspace: "worktree"/);
  const id = await lastRunId(home);
  const cli = await runAtomic(["review", id, "plain", "--approve"], { home });
  expect(cli.code).toBe(2);
  expect(cli.stderr).toContain(`stage plain of run ${id} has no git worktree, so it has no diff to show or review`);
  const diff = await runAtomic(["diff", id, "plain"], { home });
  expect(diff.code).toBe(2);
  // revise sends comments to a follow-up turn of the stage's agent session: a shell stage has none
  const shell = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=revise-shell"], { home, cwd: repo });
  expect(shell.code).toBe(1);
  expect(shell.stderr).toContain("ctx.review: revise sends the comments to a follow-up turn of the stage's agent session, and stage shelled is not an agent stage");
  expect(shell.stderr).toMatch(/hint: review an agent stage/);
});

e2eTest("ctx.bestOf: 3 candidates under a budget that allows 2: the third never starts, the judge's choice is merged, the loser's branch stays; n < 2 and no judge are refused", async () => {
  const { startFakeOpenAI, text, toolCall } = await import("../helpers/fake-openai.ts");
  const server = await startFakeOpenAI((req) => {
    const first = req.body.messages.find((m) => m.role === "user")!.content ?? "";
    const n = /candidate (\d) of/.exec(String(first))?.[1] ?? "?";
    if (req.body.messages.at(-1)!.role === "user") return toolCall("write", { path: "answer.txt", content: `candidate ${n}\n` }, { usage: { prompt: 10, completion: 1, cost: 0.01 } });
    return text("done", { prompt: 1, completion: 1, cost: 0 });
  });
  try {
    const home = makeTempDir();
    const repo = makeRepo();
    const out = join(makeTempDir(), "out.json");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, "--input", "mode=best", "--input", "budget=0.015"], { home, cwd: repo, env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const best = JSON.parse(readFileSync(out, "utf8")) as { winner: number; skipped: number; branches: string[]; merge: { ok: boolean; into: string; head: string } };
    const id = await lastRunId(home);
    expect(best.skipped).toBe(1);
    expect(best.branches.map((b) => b.replace(/^.*\/[0-9.]+-/, ""))).toEqual(["try-1", "try-2"]);
    expect(best.winner).toBe(1);
    // the third never started: no request of it reached the provider, no branch of it exists
    expect(server.requests.some((q) => JSON.stringify(q.body.messages).includes("candidate 3 of 3"))).toBe(false);
    expect(git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*").trim().split("\n").sort()).toEqual([...best.branches, `atomic/${id}/try`].sort());
    // the winner merged into the run's own branch; the loser's branch kept as it was; the checkout untouched
    expect(best.merge).toMatchObject({ ok: true, into: `atomic/${id}/try` });
    expect(git(repo, "show", `atomic/${id}/try:answer.txt`)).toBe("candidate 2\n");
    expect(git(repo, "show", `${best.branches[0]}:answer.txt`)).toBe("candidate 1\n");
    expect(git(repo, "status", "--porcelain")).toBe("");
    expect(existsSync(join(repo, "answer.txt"))).toBe(false);

    for (const [inputs, message] of [
      [["--input", "mode=best", "--input", "n=1"], "ctx.bestOf: n must be a whole number from 2 to 16, got 1"],
      [["--input", "mode=best-nojudge"], "ctx.bestOf: needs a judge: a function returning the best candidate's index, or an agent stage { prompt, … }"],
    ] as const) {
      const before = server.requests.length;
      const bad = await runAtomic(["run", WORKFLOW, "--input", `out=${out}`, ...inputs], { home, cwd: repo, env });
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain(message);
      expect(bad.stderr).toMatch(/\nhint: /);
      expect(server.requests.length).toBe(before);
    }
    expect(git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*").trim().split("\n").length).toBe(3);
  } finally {
    await server.close();
  }
});
