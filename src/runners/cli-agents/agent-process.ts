/**
 * One headless CLI agent process: spawned in its own process group (so
 * cancel kills the agent AND the dev servers or test runners it started),
 * stdout read as JSONL records split on LF only (Node's readline would also
 * split on U+2028, which appears inside JSON strings), every record handed
 * to `onLine` raw, before anyone parses it; stderr to the stage's
 * stderr.log.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { killGroup, trackGroup, untrackGroup } from "../shell/process-groups.ts";

export interface ProcessEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
  spawnError?: string;
}

const KILL_GRACE_MS = 2_000;

export class AgentProcess {
  readonly pid: number | undefined;
  readonly ended: Promise<ProcessEnd>;
  private readonly child: ChildProcess;
  private stdinOpen = true;

  constructor(
    binary: string,
    args: string[],
    opts: { cwd: string; env: Record<string, string | undefined> },
    onLine: (line: string) => void,
    onStderr: (text: string) => void,
  ) {
    this.child = spawn(binary, args, { cwd: opts.cwd, env: opts.env as NodeJS.ProcessEnv, detached: true, stdio: ["pipe", "pipe", "pipe"] });
    this.pid = this.child.pid;
    if (this.pid !== undefined) trackGroup(this.pid);
    this.child.stdin?.on("error", () => {}); // the agent may exit without reading stdin
    let buf = "";
    const decoder = new TextDecoder();
    this.child.stdout?.on("data", (chunk: Buffer) => {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line.trim()) onLine(line);
      }
    });
    this.child.stderr?.on("data", (chunk: Buffer) => onStderr(chunk.toString("utf8")));
    this.ended = new Promise<ProcessEnd>((resolve) => {
      let spawnError: string | undefined;
      this.child.on("error", (err) => {
        spawnError = err.message;
        resolve({ code: null, signal: null, spawnError });
      });
      // Children the agent left behind must not outlive it.
      this.child.on("exit", () => this.killGroup("SIGKILL"));
      this.child.on("close", (code, signal) => {
        if (buf.trim()) onLine(buf);
        buf = "";
        if (this.pid !== undefined) untrackGroup(this.pid);
        resolve({ code, signal, ...(spawnError ? { spawnError } : {}) });
      });
    });
  }

  write(line: string): boolean {
    if (!this.stdinOpen || !this.child.stdin || this.child.stdin.destroyed) return false;
    this.child.stdin.write(line.endsWith("\n") ? line : `${line}\n`);
    return true;
  }

  /** Text as it is (a prompt read from stdin: no line end added). */
  input(text: string): boolean {
    if (!this.stdinOpen || !this.child.stdin || this.child.stdin.destroyed) return false;
    this.child.stdin.write(text);
    return true;
  }

  closeStdin(): void {
    if (!this.stdinOpen) return;
    this.stdinOpen = false;
    this.child.stdin?.end();
  }

  /** SIGTERM to the group, SIGKILL after a grace period. */
  stop(): void {
    this.killGroup("SIGTERM");
    setTimeout(() => this.killGroup("SIGKILL"), KILL_GRACE_MS).unref();
  }

  killGroup(signal: NodeJS.Signals): void {
    if (this.pid !== undefined) killGroup(this.pid, signal);
  }
}
