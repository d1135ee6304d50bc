/**
 * Worktree stages on a worker host that has its own checkout of the runs'
 * repository (`atomic worker --repo DIR`; docs/design/worktrees.md, "On a
 * worker host"): the host opens each stage's worktree in its checkout at
 * the root's base commit, pushes the branch to the shared remote after the
 * stage, and the root fetches it into its own worktree before settling, so
 * the results, `atomic diff` and the root's branches show the host's work.
 * A host whose checkout has another remote refuses the stage in one sentence.
 * A stage retried elsewhere goes on from what its earlier attempts pushed:
 * on another host (fetched from the remote) and on the root's own workers
 * (the root takes each pushed attempt into its worktree at once), and on a
 * host from an attempt killed on the root (the root pushes first). A host
 * sweeps only its own journal's worktrees from a shared checkout, and a
 * cancelled stage's work is pushed, not lost with its worktree. A root
 * killed while its git holds a lock of the stage's worktree: the resume
 * removes the dead lock and goes on; so does a host killed while its git
 * holds one, started again.
 * The hosts run on the machines of a test fleet, each in a network
 * namespace of its own (where this machine allows them) that reaches the
 * fleet's Postgres and nothing of the root's; the repositories are shared
 * through the filesystem, as a git server would share them.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killProcessesWithHome, lineWatcher, processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeFleet, type Fleet } from "../helpers/fleet.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { fixture } from "../e2e/support.ts";
import { cleanUpHosts, fleetJournal, startHost, type TestHost } from "./support.ts";

// Two machines, each on a network of its own where this machine allows it (test/helpers/fleet.ts); the root runs here.
let fleet: Fleet;
beforeAll(async () => {
  fleet = await makeFleet({ hosts: 2 });
}, 60_000);
afterAll(async () => {
  await fleet?.destroy();
}, 60_000);
afterEach(cleanUpHosts);

const journal = () => fleetJournal(fleet);

const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] }).toString();

/** A bare "origin", the root's clone with one commit pushed, and the host's own clone of it. */
function repositories(): { origin: string; root: string; host: string; base: string } {
  const origin = makeTempDir("atomic-origin-");
  git(origin, "init", "-q", "--bare", "-b", "main");
  const root = makeTempDir("atomic-root-repo-");
  git(root, "clone", "-q", origin, ".");
  writeFileSync(join(root, "shared.txt"), "base\n");
  git(root, "add", "-A");
  git(root, "commit", "-q", "-m", "base");
  git(root, "push", "-q", "origin", "HEAD:main");
  const host = makeTempDir("atomic-host-repo-");
  git(host, "clone", "-q", origin, ".");
  return { origin, root, host, base: git(root, "rev-parse", "HEAD").trim() };
}

test("three worktree stages run on a host in its own checkout; their branches come back to the root's repository", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const host = await startHost({ ...machine(0), id: "remote", slots: 3, repo: repos.host });
  // Another machine: a network namespace of its own (where the fleet could make one).
  if (fleet.mode === "netns") expect(readlinkSync(`/proc/${host.proc.pid}/ns/net`)).not.toBe(readlinkSync("/proc/self/ns/net"));
  const out = join(makeTempDir(), "out.json");
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--json", "--input", `out=${out}`, "--input", "mode=three"], { home, cwd: repos.root });
  expect(r.code).toBe(0);
  const results = JSON.parse(readFileSync(out, "utf8")) as { branch: string; path: string; baseCommit: string; head: string; files: { path: string }[]; commits: { subject: string }[]; diff: string; pwd: string }[];
  expect(results).toHaveLength(3);
  for (const [i, who] of ["one", "two", "three"].entries()) {
    const w = results[i]!;
    // It ran on the host, in a worktree of the host's checkout ...
    expect(w.pwd.startsWith(join(repos.host, ".git", "atomic-worktrees") + "/")).toBe(true);
    // ... and its commits are in the root's repository, on its branch, in the root's worktree and on the shared remote.
    expect(w.baseCommit).toBe(repos.base);
    expect(w.path.startsWith(join(repos.root, ".git", "atomic-worktrees") + "/")).toBe(true);
    expect(w.diff).toContain(`+${who} was here`);
    expect(w.commits.length).toBe(1);
    expect(git(repos.root, "rev-parse", `refs/heads/${w.branch}`).trim()).toBe(w.head);
    expect(readFileSync(join(w.path, "shared.txt"), "utf8")).toBe(`${who} was here\n`);
    expect(git(repos.origin, "rev-parse", `refs/heads/${w.branch}`).trim()).toBe(w.head);
  }
  expect(results[0]!.commits[0]!.subject).toBe("one edits shared");
  expect(results[2]!.files.map((f) => f.path).sort()).toEqual(["added.txt", "shared.txt"]);
  // The root's checkout is untouched.
  expect(readFileSync(join(repos.root, "shared.txt"), "utf8")).toBe("base\n");
  expect(git(repos.root, "status", "--porcelain")).toBe("");
  // atomic diff reads the root's worktree: the host's change.
  const runId = JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId as string;
  const diff = await runAtomic(["diff", runId, "two", "--journal", url], { home, cwd: repos.root });
  expect(diff.code).toBe(0);
  expect(diff.stdout).toContain("+two was here");
}, 120_000);

test("ctx.merge of stages that ran on a host merges their branches in the root's repository", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  git(repos.root, "branch", "integrate", "main");
  git(repos.root, "branch", "conflicts", "main");
  const head = git(repos.root, "rev-parse", "main").trim();
  await startHost({ ...machine(0), id: "merger", slots: 3, repo: repos.host });
  const out = join(makeTempDir(), "out.json");
  const r = await runAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--input", `out=${out}`, "--input", "mode=merge"], { home: makeTempDir(), cwd: repos.root });
  expect(r.code).toBe(0);
  const { clean, conflicting, branches } = JSON.parse(readFileSync(out, "utf8")) as { clean: { ok: boolean; head: string }; conflicting: { ok: boolean; head: string; conflict: { files: { path: string }[] } }; branches: string[] };
  expect(clean.ok).toBe(true);
  expect(git(repos.root, "rev-parse", "integrate").trim()).toBe(clean.head);
  expect(git(repos.root, "show", "integrate:a.txt")).toBe("a\n");
  expect(git(repos.root, "show", "integrate:b.txt")).toBe("b\n");
  expect(conflicting.ok).toBe(false);
  expect(conflicting.conflict.files.map((f) => f.path)).toEqual(["a.txt"]);
  expect(git(repos.root, "rev-parse", "conflicts").trim()).toBe(head);
  // Each branch was made on the host (in its checkout) and is on the shared remote.
  for (const b of branches) expect(git(repos.host, "rev-parse", `refs/heads/${b}`).trim()).toBe(git(repos.origin, "rev-parse", `refs/heads/${b}`).trim());
}, 120_000);

test("a host whose checkout has another remote refuses a worktree stage in one sentence", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  git(repos.host, "remote", "set-url", "origin", "https://example.invalid/other.git");
  await startHost({ ...machine(0), id: "other", slots: 1, repo: repos.host });
  const out = join(makeTempDir(), "out.json");
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--input", `out=${out}`, "--input", "mode=bad"], { home: makeTempDir(), cwd: repos.root });
  expect(await root.exited).toBe(1);
  const stderr = await new Response(root.stderr).text();
  expect(stderr).toContain(`stage "bad": host other's checkout ${repos.host} has no remote ${repos.origin}, the run's repository (add it there with: git -C ${repos.host} remote add origin ${repos.origin})`);
  expect(stderr).not.toContain("    at ");
  expect(existsSync(out)).toBe(false);
  // Nothing was made in the host's checkout.
  expect(git(repos.host, "branch", "--list", "atomic/*")).toBe("");
}, 90_000);

test("a base commit that is not on the shared remote is refused by the host in one sentence; --repo that is no checkout is a usage error", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  // A commit of the root's that was never pushed: the host cannot get it.
  writeFileSync(join(repos.root, "shared.txt"), "local only\n");
  git(repos.root, "commit", "-q", "-am", "local only");
  const base = git(repos.root, "rev-parse", "HEAD").trim();
  await startHost({ ...machine(0), id: "behind", slots: 1, repo: repos.host });
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--input", `out=${join(makeTempDir(), "out.json")}`, "--input", "mode=bad"], { home: makeTempDir(), cwd: repos.root });
  expect(await root.exited).toBe(1);
  const stderr = await new Response(root.stderr).text();
  expect(stderr).toContain(`stage "bad": its base commit ${base.slice(0, 12)} is not in host behind's checkout ${repos.host} nor on its remote ${repos.origin} (push it from the run's repository first: git push origin HEAD)`);
  expect(git(repos.host, "branch", "--list", "atomic/*")).toBe("");

  const notRepo = makeTempDir();
  const r = await runAtomic(["worker", "--repo", notRepo], { home: makeTempDir(), env: { ATOMIC_JOURNAL: url } });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain(`--repo ${notRepo} is not a git checkout`);
  expect(r.stderr).not.toContain("    at ");
}, 90_000);

/** Lines of a file, none when it is missing. */
const lines = (file: string) => (existsSync(file) ? readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : []);

test("a stage retried on another host, then on the root's own workers, goes on from the commits of every earlier attempt", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const second = makeTempDir("atomic-host-repo-");
  git(second, "clone", "-q", repos.origin, ".");
  const dir = makeTempDir();
  const home = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  const first = await startHost({ ...machine(0), id: "first", slots: 1, repo: repos.host, grace: "60s" });
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--json", "--input", `out=${out}`, "--input", "mode=relay", "--input", `dir=${dir}`], { home, cwd: repos.root });
  void new Response(root.stderr).text();
  const runId = JSON.parse(await lineWatcher(root.stdout).waitFor(/"runId"/, 30_000)).runId as string;
  // Attempt 1 on host "first": it commits, then the host drains (no more claims) and the attempt fails.
  await waitUntil(() => existsSync(join(dir, "ready-1")), 60_000, "attempt 1 to run");
  first.proc.kill("SIGTERM");
  const other = await startHost({ ...machine(1), id: "second", slots: 1, repo: second, grace: "60s" });
  writeFileSync(join(dir, "go-1"), "");
  expect(await first.exited).toBe(0);
  // Attempt 2 on host "second": it starts from attempt 1's commit (fetched from the shared remote).
  await waitUntil(() => existsSync(join(dir, "ready-2")), 60_000, "attempt 2 to run on the second host");
  other.proc.kill("SIGTERM");
  writeFileSync(join(dir, "go-2"), "");
  expect(await other.exited).toBe(0);
  // The root took attempt 2's commits into its own worktree as soon as the attempt ended ...
  const branch = await waitUntil(() => git(repos.root, "for-each-ref", "--format=%(refname:strip=2)", "refs/atomic-base/").trim(), 10_000, "the root's worktree branch");
  await waitUntil(() => git(repos.root, "log", "--format=%s", branch).startsWith("attempt 2\n"), 30_000, "the root to take attempt 2's commits");
  // ... so when it dies and its resume runs attempt 3 on its own workers, that attempt starts from them too.
  // The root may be running git for the next attempt (b9cca05): a child listed here can end before its kill.
  killProcessesWithHome(home);
  await root.exited;
  writeFileSync(join(dir, "go-3"), "");
  const resumed = await runAtomic(["resume", runId, "--journal", url, "--workers", "1"], { home, cwd: repos.root });
  expect(resumed.stderr).not.toContain("    at ");
  // A failure names what the resume said (a root killed while its git held the worktree's index lock failed it: the next test).
  expect({ code: resumed.code, stderr: resumed.code === 0 ? "" : resumed.stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });

  const where = lines(join(dir, "attempts"));
  expect(where).toHaveLength(3);
  expect(where[0]!.startsWith(join(repos.host, ".git", "atomic-worktrees") + "/")).toBe(true);
  expect(where[1]!.startsWith(join(second, ".git", "atomic-worktrees") + "/")).toBe(true);
  expect(where[2]!.startsWith(join(repos.root, ".git", "atomic-worktrees") + "/")).toBe(true);
  // Each attempt started from the commits of every attempt before it.
  expect(lines(join(dir, "log-2"))).toEqual(["attempt 1", "base"]);
  expect(lines(join(dir, "log-3"))).toEqual(["attempt 2", "attempt 1", "base"]);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as { branch: string; head: string; commits: { subject: string }[]; diff: string }[];
  expect(ws!.branch).toBe(branch);
  expect(ws!.commits.map((c) => c.subject)).toEqual(["attempt 1", "attempt 2", "attempt 3"]);
  expect(ws!.diff).toContain("+attempt 1\n+attempt 2\n+attempt 3\n");
  expect(git(repos.root, "rev-parse", `refs/heads/${branch}`).trim()).toBe(ws!.head);
}, 180_000);

/**
 * A `git` for the root, first on its PATH: its first `git add -A` after the file `hold` appears takes the index lock as
 * git does (the lock file in the worktree's git directory), writes `hold.held`, and blocks, holding it, until killed;
 * every other call is the real git's.
 */
function holdingGit(hold: string): string {
  const bin = makeTempDir("atomic-git-bin-");
  const real = execFileSync("sh", ["-c", "command -v git"]).toString().trim();
  execFileSync("mkfifo", [`${hold}.fifo`]);
  const script = [
    "#!/bin/sh",
    `if [ "$1" = add ] && [ "$2" = -A ] && rm '${hold}' 2>/dev/null; then`,
    `  lock="$('${real}' rev-parse --absolute-git-dir)/index.lock"`,
    `  : > "$lock" && echo "$lock" > '${hold}.held' && read _ < '${hold}.fifo'`,
    "fi",
    `exec '${real}' "$@"`,
  ].join("\n");
  writeFileSync(join(bin, "git"), `${script}\n`, { mode: 0o755 });
  return bin;
}

/** Arms the holding git, lets the relay's attempt 1 fail, and waits for the next `git add -A` to hold the index lock: its path. */
async function lockHeldAfterAttempt1(hold: string, dir: string): Promise<string> {
  writeFileSync(hold, "");
  writeFileSync(join(dir, "go-1"), "");
  await waitUntil(() => existsSync(`${hold}.held`), 30_000, "a git to hold the index lock");
  return readFileSync(`${hold}.held`, "utf8").trim();
}

/** The relay's attempts 2 and 3 went on from attempt 1's commit; the branch's head where `repo` has it. */
function expectRelayed(dir: string, out: string, repo: string): void {
  expect(lines(join(dir, "log-2"))).toEqual(["attempt 1", "base"]);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as { branch: string; head: string; commits: { subject: string }[] }[];
  expect(ws!.commits.map((c) => c.subject)).toEqual(["attempt 1", "attempt 2", "attempt 3"]);
  expect(git(repo, "rev-parse", `refs/heads/${ws!.branch}`).trim()).toBe(ws!.head);
}

test("the root killed while its git holds the stage worktree's index lock: the resume removes the dead lock with a warning and the stage goes on", async () => {
  const { url } = await journal();
  const repos = repositories();
  const dir = makeTempDir();
  const home = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  const hold = join(dir, "hold-git");
  const PATH = `${holdingGit(hold)}:${process.env.PATH}`;
  // Attempts on the root's own workers; the journal is a fleet's, so before each the root commits and pushes what the last left.
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "1", "--json", "--input", `out=${out}`, "--input", "mode=relay", "--input", `dir=${dir}`], { home, cwd: repos.root, env: { PATH } });
  void new Response(root.stderr).text();
  const runId = JSON.parse(await lineWatcher(root.stdout).waitFor(/"runId"/, 30_000)).runId as string;
  await waitUntil(() => existsSync(join(dir, "ready-1")), 60_000, "attempt 1 to commit");
  // Attempt 1 fails; before attempt 2 the root's `git add -A` takes the index lock and is killed with the root.
  const lock = await lockHeldAfterAttempt1(hold, dir);
  killProcessesWithHome(home);
  await root.exited;
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, "the root's processes to end");
  expect(existsSync(lock)).toBe(true);
  writeFileSync(join(dir, "go-2"), "");
  writeFileSync(join(dir, "go-3"), "");
  const resumed = await runAtomic(["resume", runId, "--journal", url, "--workers", "1"], { home, cwd: repos.root });
  expect(resumed.stderr).not.toContain("    at ");
  expect({ code: resumed.code, stderr: resumed.code === 0 ? "" : resumed.stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
  expect(resumed.stderr).toContain(`stage relay: removed ${lock}, a lock a killed git left in its worktree (no git process was running there)`);
  expect(existsSync(lock)).toBe(false);
  // Attempts 2 and 3 went on from attempt 1's commit, in the worktree the lock was in.
  expectRelayed(dir, out, repos.root);
}, 180_000);

test("an attempt on the root's own workers commits and is killed (kill -9); the retry on a host goes on from its commit", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const dir = makeTempDir();
  const home = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  // Attempt 1 on the root's own worker: it commits, then the root and everything it started are killed.
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "1", "--json", "--input", `out=${out}`, "--input", "mode=relay", "--input", `dir=${dir}`], { home, cwd: repos.root });
  void new Response(root.stderr).text();
  const runId = JSON.parse(await lineWatcher(root.stdout).waitFor(/"runId"/, 30_000)).runId as string;
  await waitUntil(() => existsSync(join(dir, "ready-1")), 60_000, "attempt 1 to commit on the root's worker");
  killProcessesWithHome(home);
  await root.exited;
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, "the root's processes to end");
  const branch = git(repos.root, "for-each-ref", "--format=%(refname:strip=2)", "refs/atomic-base/").trim();
  expect(git(repos.root, "log", "--format=%s", branch)).toBe("attempt 1\nbase\n");
  // Nothing of it is on the shared remote yet.
  expect(git(repos.origin, "branch", "--list", branch)).toBe("");
  // The resumed run has no workers of its own: attempt 2 runs on the host, in its own checkout.
  await startHost({ ...machine(0), id: "taker", slots: 1, repo: repos.host });
  writeFileSync(join(dir, "go-2"), "");
  writeFileSync(join(dir, "go-3"), "");
  const resumed = await runAtomic(["resume", runId, "--journal", url, "--workers", "0"], { home, cwd: repos.root });
  expect(resumed.stderr).not.toContain("    at ");
  expect(resumed.code).toBe(0);

  const where = lines(join(dir, "attempts"));
  expect(where).toHaveLength(3);
  expect(where[0]!.startsWith(join(repos.root, ".git", "atomic-worktrees") + "/")).toBe(true);
  expect(where[1]!.startsWith(join(repos.host, ".git", "atomic-worktrees") + "/")).toBe(true);
  // The host's attempt started from the killed attempt's commit, which the root pushed before it.
  expect(lines(join(dir, "log-2"))).toEqual(["attempt 1", "base"]);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as { branch: string; head: string; commits: { subject: string }[] }[];
  expect(ws!.commits.map((c) => c.subject)).toEqual(["attempt 1", "attempt 2", "attempt 3"]);
  expect(git(repos.root, "rev-parse", `refs/heads/${branch}`).trim()).toBe(ws!.head);
  expect(git(repos.origin, "rev-parse", `refs/heads/${branch}`).trim()).toBe(ws!.head);
}, 180_000);

/**
 * A run of three worktree stages on the journal `url` (`hosts` take them), from the root's checkout; its id. A run
 * that fails throws with its stderr and each host's log tail: CI's log alone says why.
 */
async function runThree(url: string, root: string, home: string, hosts: TestHost[]): Promise<string> {
  const r = await runAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--json", "--input", `out=${join(makeTempDir(), "out.json")}`, "--input", "mode=three"], { home, cwd: root });
  if (r.code !== 0) {
    const logs = hosts.map((h) => `host ${h.id}'s log (its last lines):\n${h.log.lines.slice(-30).join("\n")}`);
    throw new Error([`the run exited ${r.code}; its stderr:`, r.stderr.trim().split("\n").slice(-30).join("\n"), ...logs].join("\n"));
  }
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId as string;
}

test("a host removes the worktrees of ended runs from its checkout, with their branches the remote has", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const home = makeTempDir();
  const made = () => git(repos.host, "worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("worktree ")).length - 1;
  const atomicBranches = () => git(repos.host, "branch", "--list", "--format=%(refname:short)", "atomic/*").split("\n").filter((b) => b !== "");
  const host = await startHost({ ...machine(0), id: "sweeper", slots: 3, repo: repos.host });
  const run = () => runThree(url, repos.root, home, [host]);
  const first = await run();
  expect(made()).toBe(3);
  // The next run's stages end: the first run has ended, so its worktrees and (pushed) branches go from the host's checkout.
  const second = await run();
  await waitUntil(() => !existsSync(join(repos.host, ".git", "atomic-worktrees", first)), 30_000, "the first run's worktrees to go");
  expect(made()).toBe(3);
  expect(atomicBranches().every((b) => b.startsWith(`atomic/${second}/`))).toBe(true);
  expect(git(repos.host, "for-each-ref", `refs/atomic-base/atomic/${first}/`, `refs/remotes/origin/atomic/${first}/`)).toBe("");
  // ... while the remote and the root's repository keep them.
  expect(git(repos.origin, "branch", "--list", `atomic/${first}/*`).split("\n").filter((b) => b.trim() !== "")).toHaveLength(3);
  expect(git(repos.root, "worktree", "list").split("\n").filter((l) => l.includes(`/atomic-worktrees/${first}/`))).toHaveLength(3);
  // A host started again removes what ended while it was away.
  host.proc.kill("SIGTERM");
  expect(await host.exited).toBe(0);
  await startHost({ ...machine(0), id: "sweeper", slots: 1, repo: repos.host });
  await waitUntil(() => !existsSync(join(repos.host, ".git", "atomic-worktrees", second)), 30_000, "the second run's worktrees to go");
  expect(made()).toBe(0);
  expect(atomicBranches()).toEqual([]);
}, 120_000);

test("hosts of two journals share one checkout: each removes only its own journal's worktrees", async () => {
  const a = await journal();
  const b = await journal();
  const repos = repositories();
  const home = makeTempDir();
  const worktreesOf = (runId: string) => git(repos.host, "worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("worktree ") && l.includes(`/atomic-worktrees/${runId}/`));
  // Journal a's host runs a run's stages in the checkout, then stops.
  const ofA = await startHost({ ...a.machine(0), id: "of-a", slots: 3, repo: repos.host });
  const runOfA = await runThree(a.url, repos.root, makeTempDir(), [ofA]);
  ofA.proc.kill("SIGTERM");
  expect(await ofA.exited).toBe(0);
  expect(worktreesOf(runOfA)).toHaveLength(3);
  // Journal b's host, on the same checkout: its own ended run's worktrees go, journal a's run (unknown to b) stays.
  const ofB = await startHost({ ...b.machine(1), id: "of-b", slots: 3, repo: repos.host });
  const first = await runThree(b.url, repos.root, home, [ofB]);
  await runThree(b.url, repos.root, home, [ofB]);
  await ofB.log.waitFor(/removed 3 worktree\(s\)/, 30_000);
  expect(existsSync(join(repos.host, ".git", "atomic-worktrees", first))).toBe(false);
  expect(worktreesOf(runOfA)).toHaveLength(3);
  expect(git(repos.host, "branch", "--list", `atomic/${runOfA}/*`).split("\n").filter((l) => l.trim() !== "")).toHaveLength(3);
  // Journal a's host, started again, removes its own.
  await startHost({ ...a.machine(0), id: "of-a", slots: 1, repo: repos.host });
  await waitUntil(() => !existsSync(join(repos.host, ".git", "atomic-worktrees", runOfA)), 30_000, "journal a's worktrees to go");
}, 180_000);

test("a stage cancelled on a host keeps its work: what it left is committed and pushed, the root takes it, the sweep removes only the worktree", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const dir = makeTempDir();
  const home = makeTempDir();
  const host = await startHost({ ...machine(0), id: "stopped", slots: 1, repo: repos.host });
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--json", "--input", `out=${join(makeTempDir(), "out.json")}`, "--input", "mode=unfinished", "--input", `dir=${dir}`], { home, cwd: repos.root });
  const stderr = new Response(root.stderr).text();
  const runId = JSON.parse(await lineWatcher(root.stdout).waitFor(/"runId"/, 30_000)).runId as string;
  await waitUntil(() => existsSync(join(dir, "ready")), 60_000, "the stage to leave its work on the host");
  const cancelled = await runAtomic(["cancel", runId, "--journal", url], { home, cwd: repos.root });
  expect(cancelled.code).toBe(0);
  expect(await root.exited).toBe(4);
  expect(await stderr).not.toContain("    at ");
  const branch = git(repos.root, "for-each-ref", "--format=%(refname:strip=2)", "refs/atomic-base/").trim();
  // On the shared remote, on the stage's branch: its own commit, and what it left in a commit that says it was cancelled ...
  expect(git(repos.origin, "log", "--format=%s", branch)).toBe("atomic: what stage unfinished left uncommitted when it was cancelled\ncommitted part\nbase\n");
  expect(git(repos.origin, "show", `${branch}:wip.txt`)).toBe("unfinished\n");
  // ... and in the root's repository, in the stage's worktree there.
  expect(git(repos.root, "rev-parse", branch).trim()).toBe(git(repos.origin, "rev-parse", branch).trim());
  // The host, started again, removes the cancelled run's worktree and its branch, which the remote has.
  host.proc.kill("SIGTERM");
  expect(await host.exited).toBe(0);
  await startHost({ ...machine(0), id: "stopped", slots: 1, repo: repos.host });
  await waitUntil(() => !existsSync(join(repos.host, ".git", "atomic-worktrees", runId)), 30_000, "the cancelled run's worktree to go");
  expect(git(repos.host, "branch", "--list", branch)).toBe("");
  expect(git(repos.origin, "show", `${branch}:wip.txt`)).toBe("unfinished\n");
}, 120_000);

test("kill -9 of a host mid-stage: started again, it finds the stage's worktree with the killed attempt's commit, and the stage completes", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const dir = makeTempDir();
  const hostHome = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  const start = () => startHost({ ...machine(0), id: "crashing", slots: 1, repo: repos.host, leaseMs: 2_000, home: hostHome });
  const host = await start();
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--work-lease-ms", "2000", "--input", `out=${out}`, "--input", "mode=relay", "--input", `dir=${dir}`], { home: makeTempDir(), cwd: repos.root });
  void new Response(root.stdout).text();
  const stderr = new Response(root.stderr).text();
  await waitUntil(() => existsSync(join(dir, "ready-1")), 60_000, "the stage to commit on the host");
  host.kill();
  await host.exited;
  writeFileSync(join(dir, "go-2"), "");
  writeFileSync(join(dir, "go-3"), "");
  await start();
  expect(await root.exited).toBe(0);
  expect(await stderr).not.toContain("    at ");
  // Every run of the stage was in the same worktree of the host's checkout, found again after the kill with the commit in it.
  const where = lines(join(dir, "attempts"));
  expect(where).toHaveLength(3);
  expect(new Set(where).size).toBe(1);
  expect(where[0]!.startsWith(join(repos.host, ".git", "atomic-worktrees") + "/")).toBe(true);
  expect(lines(join(dir, "log-2"))).toEqual(["attempt 1", "base"]);
  const [ws] = JSON.parse(readFileSync(out, "utf8")) as { branch: string; head: string; commits: { subject: string }[] }[];
  expect(ws!.commits.map((c) => c.subject)).toEqual(["attempt 1", "attempt 2", "attempt 3"]);
  expect(git(repos.root, "rev-parse", `refs/heads/${ws!.branch}`).trim()).toBe(ws!.head);
  expect(git(repos.origin, "rev-parse", `refs/heads/${ws!.branch}`).trim()).toBe(ws!.head);
}, 120_000);

test("a sandboxed stage in a worktree on a host commits in its worktree and writes nowhere else", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  // Outside /tmp (a sandbox's /tmp is its own, which would hide a write there anyway): /var/tmp, read-only inside.
  const dir = mkdtempSync("/var/tmp/atomic-wt-sbx-");
  try {
    await startHost({ ...machine(0), id: "boxing", slots: 1, repo: repos.host });
    const out = join(makeTempDir(), "out.json");
    const r = await runAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--input", `out=${out}`, "--input", "mode=boxed", "--input", `dir=${dir}`], { home: makeTempDir(), cwd: repos.root });
    expect(r.stderr).not.toContain("    at ");
    expect(r.code).toBe(0);
    const [ws] = JSON.parse(readFileSync(out, "utf8")) as { branch: string; head: string; pwd: string; commits: { subject: string }[]; files: { path: string }[] }[];
    expect(ws!.pwd.startsWith(join(repos.host, ".git", "atomic-worktrees") + "/")).toBe(true);
    expect(ws!.commits.map((c) => c.subject)).toEqual(["boxed commit", "atomic: what stage boxed left uncommitted"]);
    expect(ws!.files.map((f) => f.path)).toEqual(["boxed.txt", "left.txt"]);
    expect(git(repos.origin, "rev-parse", `refs/heads/${ws!.branch}`).trim()).toBe(ws!.head);
    expect(existsSync(join(dir, "escape"))).toBe(false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 90_000);

test("a host killed while its git holds the stage worktree's index lock (committing what an attempt left): started again, it removes the dead lock before its fetch, with a warning, and the stage goes on", async () => {
  const { url, machine } = await journal();
  const repos = repositories();
  const dir = makeTempDir();
  const hostHome = makeTempDir();
  const out = join(makeTempDir(), "out.json");
  const hold = join(dir, "hold-git");
  const PATH = `${holdingGit(hold)}:${process.env.PATH}`;
  const start = () => startHost({ ...machine(0), id: "locked", slots: 1, repo: repos.host, leaseMs: 2_000, home: hostHome, env: { PATH } });
  const host = await start();
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--work-lease-ms", "2000", "--input", `out=${out}`, "--input", "mode=relay", "--input", `dir=${dir}`], { home: makeTempDir(), cwd: repos.root });
  void new Response(root.stdout).text();
  const stderr = new Response(root.stderr).text();
  await waitUntil(() => existsSync(join(dir, "ready-1")), 60_000, "attempt 1 to commit on the host");
  // Attempt 1 fails; the host's `git add -A` of what it left takes the worktree's index lock, and the host is killed with it.
  const lock = await lockHeldAfterAttempt1(hold, dir);
  expect(lock.startsWith(join(repos.host, ".git", "worktrees") + "/")).toBe(true);
  host.kill();
  await host.exited;
  await waitUntil(() => host.processes().length === 0, 10_000, "the host's processes (its git too) to end");
  expect(existsSync(lock)).toBe(true);
  writeFileSync(join(dir, "go-2"), "");
  writeFileSync(join(dir, "go-3"), "");
  const again = await start();
  await again.log.waitFor(/removed .*index\.lock, a lock a killed git left in its worktree \(no git process was running there\)/, 60_000);
  expect(await root.exited).toBe(0);
  expect(await stderr).not.toContain("    at ");
  expect(existsSync(lock)).toBe(false);
  // Attempts 2 and 3 went on from attempt 1's commit, in the host's worktree the lock was in.
  expectRelayed(dir, out, repos.origin);
}, 180_000);
