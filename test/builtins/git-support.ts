/**
 * A real git repository for the goal and ralph builtins' tests: a temp
 * repository on branch main with one commit, a local bare repository as its
 * `origin`, and a fake `gh` (or `glab`) first on PATH that records its arguments (each
 * ended by \x1f, calls by NUL) and prints a pull request URL. Commit dates
 * and identities are fixed in the environment, so the same changes give the
 * same commit ids in two runs (an interrupted run and an uninterrupted one
 * compare equal).
 */

import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import type { Finished, Scripted } from "./support.ts";

export const GIT_ENV = {
  GIT_AUTHOR_NAME: "Test Author",
  GIT_AUTHOR_EMAIL: "author@example.test",
  GIT_COMMITTER_NAME: "Test Author",
  GIT_COMMITTER_EMAIL: "author@example.test",
  GIT_AUTHOR_DATE: "2026-01-01T00:00:00Z",
  GIT_COMMITTER_DATE: "2026-01-01T00:00:00Z",
  GIT_CONFIG_NOSYSTEM: "1",
};

export interface Repo {
  /** The repository (the run's cwd). */
  dir: string;
  origin: string;
  /** PATH with the fake gh first, and the variables above. */
  env: Record<string, string>;
  /** Each call of the fake gh (or glab): its arguments. */
  ghCalls(): string[][];
  git(...args: string[]): string;
}

/** `cli`: the fake pull-request CLI on PATH (gh, or glab). */
export function gitRepo(cli: "gh" | "glab" = "gh"): Repo {
  const dir = makeTempDir("atomic-git-repo-");
  const origin = makeTempDir("atomic-git-origin-");
  const bin = makeTempDir("atomic-git-bin-");
  const log = join(bin, "gh-calls");
  const env: Record<string, string> = { ...GIT_ENV, HOME: makeTempDir("atomic-git-home-"), PATH: `${bin}:${process.env.PATH}` };
  const git = (...args: string[]) => {
    const r = Bun.spawnSync(["git", ...args], { cwd: dir, env: { ...process.env, ...env } });
    if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
    return r.stdout.toString().trim();
  };
  Bun.spawnSync(["git", "init", "-q", "--bare", origin]);
  git("init", "-q", "-b", "main");
  writeFileSync(join(dir, "README.md"), "# a project\n");
  git("add", "-A");
  git("commit", "-q", "-m", "initial");
  git("remote", "add", "origin", origin);
  git("push", "-q", "origin", "main");
  writeFileSync(join(bin, cli), `#!/bin/sh\nfor a in "$@"; do printf '%s\\037' "$a" >> ${JSON.stringify(log)}; done\nprintf '\\0' >> ${JSON.stringify(log)}\necho https://github.example/acme/project/pull/7\n`);
  chmodSync(join(bin, cli), 0o755);
  mkdirSync(join(dir, ".atomic"), { recursive: true });
  return {
    dir,
    origin,
    env,
    git,
    ghCalls: () => (existsSync(log) ? readFileSync(log, "utf8").split("\0").filter(Boolean).map((c) => c.split("\x1f").slice(0, -1)) : []),
  };
}

/** A run in `repo`: its variables (PATH with the fake CLI) join the scripted server's, with an atomic home of its own. */
export async function inRepo(s: Scripted, repo: Repo, run: (home: string) => Promise<Finished>): Promise<Finished & { home: string }> {
  Object.assign(s.env, repo.env);
  const home = makeTempDir("atomic-git-run-home-");
  const r = await run(home);
  expect(r.stderr).toBe("");
  return { ...r, home };
}

/** After a resume: a stage recorded before it had no request; every other one had all of its requests again (the one killed among them). */
export async function expectNothingRecordedReran(resumed: Finished & { home: string }, cwd: string, s: Scripted, counts: Record<string, number>, killedAt: string) {
  const shown = JSON.parse((await runAtomic(["show", resumed.runId, "--json"], { home: resumed.home, cwd, env: s.env })).stdout) as { steps: { kind: string; name: string; endedAt: number }[] };
  const before = new Set(shown.steps.filter((x) => x.kind === "stage" && x.endedAt < resumed.resumedAt!).map((x) => x.name));
  expect(before.has(killedAt)).toBe(false);
  const expected = Object.fromEntries(Object.entries(counts).filter(([stage]) => !before.has(stage)));
  expect(Object.fromEntries(s.counts)).toEqual(expected);
}
