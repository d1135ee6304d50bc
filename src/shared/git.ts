/**
 * The one place atomic runs the `git` program itself (stage worktrees,
 * their diffs, merges: docs/design/worktrees.md). Each call is `git` with
 * an argv (never a shell), in a directory, with prompts off and messages
 * in English (so what atomic quotes back reads the same everywhere), and
 * resolves to its exit code and output; `gitOk` throws GitError when git
 * fails, carrying git's last words for the caller's one sentence.
 *
 * Worktrees made at once in one repository race inside git: each `git
 * worktree add` reads every other worktree's admin files, and one still
 * being written (an empty `commondir`) makes git die with "failed to read
 * .git/worktrees/X/commondir: Success" (seen with parallel stages, each in
 * its own worktree). Such a failure changes nothing when the command makes
 * no branch (engine/stage-workspace.ts makes a stage's branch first), so `git`
 * runs it again after a short back-off, a few times, before answering.
 *
 * Commits atomic makes use the user's git identity when one is configured
 * and atomic's otherwise (`IDENTITY`): a commit must have an author, and a
 * fresh machine or CI may have none.
 */

import { setTimeout as sleep } from "node:timers/promises";
import { type Backoff, backoffDelay } from "./backoff.ts";
import { childEnv } from "./config/environment.ts";
import { childProcess } from "./lazy-builtins.ts";

export interface GitOutput {
  code: number;
  stdout: string;
  stderr: string;
}

export class GitError extends Error {
  constructor(
    readonly args: string[],
    readonly output: GitOutput,
  ) {
    super(`git ${args.join(" ")} failed: ${lastWords(output)}`);
  }
}

/** git's last non-empty line of stderr (or stdout): what a refusal quotes. */
export function lastWords(output: GitOutput): string {
  const lines = `${output.stderr}\n${output.stdout}`.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  return (lines.find((l) => /^(fatal|error):/.test(l)) ?? lines.at(-1) ?? `exit code ${output.code}`).replace(/^(fatal|error):\s*/, "");
}

const ENV = { GIT_TERMINAL_PROMPT: "0", LC_ALL: "C", GIT_OPTIONAL_LOCKS: "0" };

/** Runs git; never throws for git's own failure (a missing program does). */
export async function git(cwd: string, args: string[]): Promise<GitOutput> {
  for (let attempt = 0; ; attempt++) {
    const out = await gitOnce(cwd, args);
    if (out.code === 0 || attempt >= RACE_RETRIES || !HALF_MADE_WORKTREE.test(out.stderr)) return out;
    await sleep(backoffDelay(RACE_BACKOFF, attempt));
  }
}

/** git's words when it met another worktree half made (see the header). */
const HALF_MADE_WORKTREE = /failed to read .*[/\\]worktrees[/\\][^/\\]+[/\\](commondir|gitdir)/;
/** A worktree is made in milliseconds; 8 tries cover about 2.5 s of others being made. */
const RACE_RETRIES = 8;
const RACE_BACKOFF: Backoff = { firstMs: 10, maxMs: 500, jitter: 0.5 };

function gitOnce(cwd: string, args: string[]): Promise<GitOutput> {
  return new Promise((resolve, reject) => {
    // node:child_process loaded on first use (lazy-builtins.ts): most processes never run git.
    childProcess().execFile("git", args, { cwd, env: { ...childEnv(), ...ENV }, maxBuffer: 512 * 1024 * 1024, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err && typeof (err as { code?: unknown }).code === "string") return reject(err); // ENOENT: no git, or no such cwd
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Runs git and returns its stdout, or throws GitError. */
export async function gitOk(cwd: string, args: string[]): Promise<string> {
  const out = await git(cwd, args);
  if (out.code !== 0) throw new GitError(args, out);
  return out.stdout;
}

/** git's `-c` options for a commit atomic makes: the user's identity if configured, else atomic's; never signed. */
export async function identity(cwd: string): Promise<string[]> {
  const name = (await git(cwd, ["config", "user.name"])).stdout.trim() || "atomic";
  const email = (await git(cwd, ["config", "user.email"])).stdout.trim() || "atomic@localhost";
  return ["-c", `user.name=${name}`, "-c", `user.email=${email}`, "-c", "commit.gpgsign=false"];
}
