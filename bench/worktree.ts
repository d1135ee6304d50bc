/**
 * A stage's worktree (issue 30): opening one for a 100 MB repository
 * (src/engine/stage-workspace.ts openWorkspace: the repository found, the
 * checkout's cleanliness checked, the base ref written, `git worktree add`)
 * against `git worktree add` alone, in the same repository, alternating,
 * each worktree removed before the next. Target: at most 2x.
 *
 *   node_modules/.bin/bun bench/worktree.ts [runs]
 */

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openWorkspace } from "../src/engine/stage-workspace.ts";

const runs = Number(process.argv[2] ?? 5);
const repo = mkdtempSync(join(tmpdir(), "atomic-bench-wt-"));
const git = (...args: string[]) => execFileSync("git", args, { cwd: repo, stdio: ["ignore", "pipe", "pipe"] }).toString();
try {
  git("init", "-q", "-b", "main");
  // 100 MB: 400 files of 256 KiB (incompressible), in 20 directories
  for (let d = 0; d < 20; d++) {
    mkdirSync(join(repo, `dir${d}`));
    for (let f = 0; f < 20; f++) writeFileSync(join(repo, `dir${d}`, `file${f}.bin`), randomBytes(256 * 1024));
  }
  git("add", "-A");
  git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "100 MB");
  const plain: number[] = [];
  const stage: number[] = [];
  for (let i = 0; i < runs; i++) {
    let t = performance.now();
    const dir = join(repo, ".git", "bench-plain");
    git("worktree", "add", "--quiet", "-b", `plain-${i}`, dir, "HEAD");
    plain.push(performance.now() - t);
    git("worktree", "remove", "--force", dir);

    t = performance.now();
    const ws = await openWorkspace("bench", String(i), "benchrun", "worktree", repo);
    stage.push(performance.now() - t);
    git("worktree", "remove", "--force", ws.path);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const p = median(plain);
  const s = median(stage);
  console.log(`git worktree add (100 MB, 400 files): median ${p.toFixed(0)} ms over ${runs}`);
  console.log(`stage worktree (openWorkspace):       median ${s.toFixed(0)} ms over ${runs}`);
  console.log(`ratio ${(s / p).toFixed(2)}x (target at most 2x): ${s / p <= 2 ? "ok" : "OVER"}`);
} finally {
  rmSync(repo, { recursive: true, force: true });
}
