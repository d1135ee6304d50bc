/**
 * Many stages opening their worktrees at once in one repository
 * (docs/design/worktrees.md): git itself races there, a `worktree add`
 * dying on another worktree's half-written admin files ("failed to read
 * .git/worktrees/X/commondir: Success"). Every stage must still get its
 * worktree on its own branch, and nothing half made may stay behind.
 */

import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openWorkspace } from "../../src/engine/stage-workspace.ts";

function git(cwd: string, ...args: string[]): string {
  const r = Bun.spawnSync(["git", "-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LC_ALL: "C" } });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

test("32 stages open their worktrees at once in one repository; each gets its own", async () => {
  const repo = mkdtempSync(join(tmpdir(), "atomic-wt-race-"));
  try {
    git(repo, "init", "-q");
    git(repo, "commit", "-q", "--allow-empty", "-m", "start");
    const stages = Array.from({ length: 32 }, (_, i) => `s${i}`);
    const opened = await Promise.all(stages.map((name, i) => openWorkspace(name, String(i + 1).padStart(2, "0"), "run1", "worktree", repo)));
    expect(new Set(opened.map((w) => w.path)).size).toBe(32);
    const listed = git(repo, "worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("branch refs/heads/atomic/run1/"));
    expect(listed.length).toBe(32);
    for (const w of opened) expect(git(w.path, "symbolic-ref", "--short", "HEAD").trim()).toBe(w.branch);
  } finally {
    rmSync(repo, { recursive: true, force: true });
  }
});
