/**
 * A stage's worktree (issue 30): opening one for a 100 MB repository
 * (src/engine/stage-workspace.ts openWorkspace: the repository found, the
 * checkout's cleanliness checked, the base ref written, `git worktree add`)
 * against `git worktree add` alone, in the same repository, alternating,
 * each worktree removed before the next. Target: at most 2x.
 *
 *   node_modules/.bin/bun bench/run.ts worktree
 */

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openWorkspace } from "../src/engine/stage-workspace.ts";
import { alternate, fmt, median, tempDir, type Bench, type Result } from "./lib.ts";

const RUNS = 7;

const bench: Bench = {
  name: "worktree",
  title: "a stage's worktree of a 100 MB repository vs git worktree add alone",
  async run(): Promise<Result[]> {
    const repo = tempDir("atomic-bench-wt-");
    const git = (...args: string[]) => execFileSync("git", args, { cwd: repo, stdio: ["ignore", "pipe", "pipe"] }).toString();
    git("init", "-q", "-b", "main");
    // 100 MB: 400 files of 256 KiB (incompressible), in 20 directories
    for (let d = 0; d < 20; d++) {
      mkdirSync(join(repo, `dir${d}`));
      for (let f = 0; f < 20; f++) writeFileSync(join(repo, `dir${d}`, `file${f}.bin`), randomBytes(256 * 1024));
    }
    git("add", "-A");
    git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "100 MB");
    let i = 0;
    const times = await alternate(RUNS, {
      plain: () => {
        const dir = join(repo, ".git", "bench-plain");
        const t = performance.now();
        git("worktree", "add", "--quiet", "-b", `plain-${i}`, dir, "HEAD");
        const ms = performance.now() - t;
        git("worktree", "remove", "--force", dir);
        return ms;
      },
      stage: async () => {
        const t = performance.now();
        const ws = await openWorkspace("bench", String(i++), "benchrun", "worktree", repo);
        const ms = performance.now() - t;
        git("worktree", "remove", "--force", ws.path);
        return ms;
      },
    });
    const plain = median(times.plain);
    const stage = median(times.stage);
    return [
      {
        bench: "worktree",
        label: `stage worktree (openWorkspace, 100 MB, 400 files), median of ${RUNS}`,
        value: stage,
        unit: "ms",
        baseline: { label: "git worktree add alone", value: plain, unit: "ms" },
        ratio: { value: stage / plain, meaning: "stage ÷ git worktree add" },
        target: { text: `at most 2x (${fmt(stage / plain)}x)`, ok: stage / plain <= 2 },
      },
    ];
  },
};

export default bench;
