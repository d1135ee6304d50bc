/**
 * One headless CLI agent process: spawned in its own process group (so
 * cancel kills the agent AND the dev servers or test runners it started),
 * stdout read as JSONL records split on LF only (Node's readline would also
 * split on U+2028, which appears inside JSON strings), every record handed
 * to `onLine` raw, before anyone parses it; stderr to the stage's
 * stderr.log.
 *
 * Stop: SIGTERM to the agent's group AND to its other processes
 * (process-tree.ts: descendants that made groups of their own, as the
 * agents' shell tools do, and anything carrying the stage's marker
 * variables), then, after a grace period, SIGKILL to all of them and to
 * what was found again (a process re-parented when the agent died). When
 * the agent exits, whatever it left behind gets the same treatment.
 *
 * A sandboxed agent (`sandboxed`: the process is bubblewrap) is stopped the
 * same way but for bwrap itself, which gets no SIGTERM (shell/stage-stop.ts
 * says why); bwrap ends when the agent does, and what the agent left inside
 * ends with the namespace (docs/design/sandbox.md).
 */

import type { ChildProcess } from "node:child_process";
import { killGroup, trackGroup, untrackGroup } from "../shell/process-groups.ts";
import { stageProcesses, type ProcRef } from "../shell/process-tree.ts";
import { stopWithGrace } from "../shell/stage-stop.ts";
import { spawnWithUserUmask } from "../../shared/private-files.ts";
import { childProcess } from "../../shared/lazy-builtins.ts";

export interface ProcessEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
  spawnError?: string;
}

/** The agent processes of this process that have not ended: a later turn's process is never taken for what an earlier one left. */
const liveAgents = new Set<number>();

export class AgentProcess {
  readonly pid: number | undefined;
  readonly ended: Promise<ProcessEnd>;
  private readonly child: ChildProcess;
  private stdinOpen = true;
  private stopping = false;
  private exited = false;
  /** Environment pairs only this stage's processes carry (see process-tree.ts). */
  private readonly marker: Record<string, string>;
  /** The process is bubblewrap, the agent inside it (see the header). */
  private readonly sandboxed: boolean;

  constructor(
    binary: string,
    args: string[],
    opts: { cwd: string; env: Record<string, string | undefined>; marker?: Record<string, string>; sandboxed?: boolean },
    onLine: (line: string) => void,
    onStderr: (text: string) => void,
  ) {
    this.marker = opts.marker ?? {};
    this.sandboxed = opts.sandboxed ?? false;
    this.child = spawnWithUserUmask(() => childProcess().spawn(binary, args, { cwd: opts.cwd, env: opts.env as NodeJS.ProcessEnv, detached: true, stdio: ["pipe", "pipe", "pipe"] }));
    this.pid = this.child.pid;
    if (this.pid !== undefined) {
      trackGroup(this.pid);
      liveAgents.add(this.pid);
    }
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
      this.child.on("exit", () => {
        this.exited = true;
        if (this.pid !== undefined) liveAgents.delete(this.pid);
        this.killGroup("SIGKILL");
        this.stop();
      });
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

  /** Text as it is (a prompt read from stdin), however large: the pipe takes it as the agent reads. */
  writeRaw(text: string): boolean {
    if (!this.stdinOpen || !this.child.stdin || this.child.stdin.destroyed) return false;
    this.child.stdin.write(text);
    return true;
  }

  closeStdin(): void {
    if (!this.stdinOpen) return;
    this.stdinOpen = false;
    this.child.stdin?.end();
  }

  /** SIGTERM to the group (not to bwrap: see the header) and the stage's other processes, SIGKILL after a grace period (stage-stop.ts). */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    stopWithGrace({ pid: this.pid, sandboxed: this.sandboxed, exited: () => this.exited, others: () => this.others() });
  }

  private others(): ProcRef[] {
    return stageProcesses(this.pid, this.marker, new Set([...liveAgents].filter((p) => p !== this.pid)));
  }

  killGroup(signal: NodeJS.Signals): void {
    if (this.pid !== undefined) killGroup(this.pid, signal);
  }
}
