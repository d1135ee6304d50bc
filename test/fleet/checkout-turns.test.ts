/**
 * A worker host's sweep of ended runs' worktrees and its stages' openings
 * in one checkout (src/fleet/checkout-turns.ts; docs/design/worktrees.md,
 * "On a worker host"): each step that reads or changes what all worktrees
 * share takes its turn, so no git of one runs beside a git of the other.
 *
 * Driven, not left to luck: git is a wrapper (first on PATH) that logs each
 * git it runs, its start and end, and holds the sweep's `worktree remove`
 * until the test opens a gate. Three stages then ask for their worktrees;
 * the test lets the sweep go once they wait for their turn (or, were they
 * not to wait, once one of their gits has started beside the held one).
 */

import { afterAll, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitingTurns } from "../../src/fleet/checkout-turns.ts";
import { openHostWorkspace, pushHostWorkspace, type HostWorkspace } from "../../src/fleet/host-workspace.ts";
import { markWorktree, sweepHostWorktrees } from "../../src/fleet/host-worktree-sweep.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { untilExists } from "../helpers/gate.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(removeTempDirs);

const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] }).toString();

/** A wrapper named git that logs `start PID ARGS` and `end PID`, and holds `worktree remove` until `gate` exists. */
function loggingGit(log: string, gate: string): string {
  const bin = makeTempDir("atomic-git-wrapper-");
  const real = execFileSync("sh", ["-c", "command -v git"]).toString().trim();
  writeFileSync(
    join(bin, "git"),
    `#!/bin/sh
echo "start $$ $*" >> '${log}'
if [ "$1 $2" = "worktree remove" ]; then echo "held $$" >> '${log}'; ${untilExists(`'${gate}'`)}; fi
'${real}' "$@"; code=$?
echo "end $$" >> '${log}'
exit $code
`,
  );
  chmodSync(join(bin, "git"), 0o755);
  return bin;
}

function request(origin: string, base: string, runId: string, stage: string): StageRequest & { workspace: NonNullable<StageRequest["workspace"]> } {
  const branch = `atomic/${runId}/1-${stage}`;
  return { runId, stageKey: `1-${stage}`, stageName: stage, attempt: 1, runner: "shell", cwd: "/", artifactDir: "/", workspace: { remote: { name: "origin", url: origin }, baseCommit: base, branch, prefix: "" } };
}

test("a sweep removing an ended run's worktree while three stages open theirs: no git of one runs beside the other's, every stage gets its worktree", async () => {
  const origin = makeTempDir("atomic-origin-");
  git(origin, "init", "-q", "--bare", "-b", "main");
  const repo = makeTempDir("atomic-host-repo-");
  git(repo, "clone", "-q", origin, ".");
  git(repo, "commit", "-q", "--allow-empty", "-m", "base");
  git(repo, "push", "-q", "origin", "HEAD:main");
  const base = git(repo, "rev-parse", "HEAD").trim();
  // An ended run's worktree, marked as journal j's and pushed: the sweep removes it.
  const old = await openHostWorkspace(repo, "h", request(origin, base, "old", "a"));
  if (typeof old === "string") throw new Error(old);
  await markWorktree(old.ws.path, { journal: "j", remote: "origin" });
  await pushHostWorkspace(old);

  const log = join(makeTempDir(), "git.log");
  const gate = join(makeTempDir(), "gate");
  writeFileSync(log, "");
  const lines = () => readFileSync(log, "utf8").split("\n").filter((l) => l !== "");
  const path = process.env.PATH;
  process.env.PATH = `${loggingGit(log, gate)}:${path}`;
  try {
    const sweep = sweepHostWorktrees(repo, "j", async () => "ended", () => false);
    await waitUntil(() => lines().some((l) => l.startsWith("held ")), 30_000, "the sweep's worktree remove to be held");
    const held = lines().length;
    const opening = ["one", "two", "three"].map((stage) => openHostWorkspace(repo, "h", request(origin, base, "new", stage)));
    const gitBeside = () => lines().slice(held).some((l) => l.startsWith("start "));
    await waitUntil(() => waitingTurns(repo) === 3 || gitBeside(), 30_000, "the stages to wait for their turn").catch((err: Error) => {
      throw new Error(`${err.message} (waiting: ${waitingTurns(repo)}); git's log:\n${lines().join("\n")}`);
    });
    writeFileSync(gate, "");
    const [swept, ...opened] = await Promise.all([sweep, ...opening]);

    // One git at a time from the held remove on: each start follows the end of the one before.
    const after = lines().slice(lines().findIndex((l) => /^start \d+ worktree remove /.test(l)));
    const running: string[] = [];
    for (const line of after) {
      if (line.startsWith("start ")) {
        expect({ started: line, beside: [...running] }).toEqual({ started: line, beside: [] });
        running.push(line);
      } else if (line.startsWith("end ")) running.splice(running.findIndex((l) => l.split(" ")[1] === line.split(" ")[1]), 1);
    }
    expect(swept.worktrees).toEqual([old.ws.path]);
    expect(existsSync(old.ws.path)).toBe(false);
    for (const hw of opened as (HostWorkspace | string)[]) {
      if (typeof hw === "string") throw new Error(hw);
      expect(git(hw.ws.path, "symbolic-ref", "--short", "HEAD").trim()).toBe(hw.ws.branch);
    }
    expect(waitingTurns(repo)).toBe(0);
  } finally {
    process.env.PATH = path;
  }
}, 60_000);
