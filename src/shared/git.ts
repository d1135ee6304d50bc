/**
 * The one place atomic runs the `git` program itself (stage worktrees,
 * their diffs, merges: docs/design/worktrees.md). Each call is `git` with
 * an argv (never a shell), in a directory, with prompts off and messages
 * in English (so what atomic quotes back reads the same everywhere), and
 * resolves to its exit code and output; `gitOk` throws GitError when git
 * fails, carrying git's last words for the caller's one sentence.
 *
 * Commits atomic makes use the user's git identity when one is configured
 * and atomic's otherwise (`IDENTITY`): a commit must have an author, and a
 * fresh machine or CI may have none.
 */

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
export function git(cwd: string, args: string[]): Promise<GitOutput> {
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
