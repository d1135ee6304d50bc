/**
 * A real git repository for the goal and ralph builtins' tests: a temp
 * repository on branch main with one commit, a local bare repository as its
 * `origin`, and a fake `gh` first on PATH that records its arguments (each
 * ended by \x1f, calls by NUL) and prints a pull request URL. Commit dates
 * and identities are fixed in the environment, so the same changes give the
 * same commit ids in two runs (an interrupted run and an uninterrupted one
 * compare equal).
 */

import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeTempDir } from "../helpers/temp.ts";

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
  /** Each call of the fake gh: its arguments. */
  ghCalls(): string[][];
  git(...args: string[]): string;
}

export function gitRepo(): Repo {
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
  writeFileSync(join(bin, "gh"), `#!/bin/sh\nfor a in "$@"; do printf '%s\\037' "$a" >> ${JSON.stringify(log)}; done\nprintf '\\0' >> ${JSON.stringify(log)}\necho https://github.example/acme/project/pull/7\n`);
  chmodSync(join(bin, "gh"), 0o755);
  mkdirSync(join(dir, ".atomic"), { recursive: true });
  return {
    dir,
    origin,
    env,
    git,
    ghCalls: () => (existsSync(log) ? readFileSync(log, "utf8").split("\0").filter(Boolean).map((c) => c.split("\x1f").slice(0, -1)) : []),
  };
}
