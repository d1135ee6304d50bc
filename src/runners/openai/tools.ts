/**
 * The openai runner's tool set, confined to the stage's working directory:
 * read, write, edit, list, grep, bash; and, granted only by name,
 * `ask_user` (the agent loop answers it by parking the stage: agent-loop.ts)
 * and the run tools message, ask_agent, reply (runners/run-tools.ts: the
 * call goes to the run's driver through the port).
 *
 * Confinement of the file tools is confined-fs.ts: every path and every
 * entry a tool visits is resolved to its real path (symlinks included) and
 * refused outside the cwd; only regular files are opened (a fifo, socket
 * or device is refused without being opened). A refusal goes back to the
 * model as the tool's error result; nothing is touched. `bash` runs
 * `/bin/sh -c` with the cwd as its working directory, in its own process
 * group, with a timeout (default 120 s, at most 600 s); it is not a sandbox
 * (a command can `cd ..`), which is why it can be left out with the task's
 * `tools` option.
 *
 * Bounded work: a tool result is capped (32 KiB) so one big file cannot
 * flood the context window; `read` returns at most READ_CAP bytes a call,
 * ending on a line break where it can, with a note naming the `offset` of
 * the next call; `edit` and `grep` do not load files above their size caps.
 */

import { join } from "node:path";
import { killGroup, trackGroup, untrackGroup } from "../shell/process-groups.ts";
import { inheritedEnv } from "../stage-env.ts";
import { ConfinedFs, ToolRefused, requireFile, type DirEntry } from "./confined-fs.ts";
import { spawnWithUserUmask } from "../../shared/private-files.ts";
import { childProcess } from "../../shared/lazy-builtins.ts";
import { sandboxed, type Sandboxed } from "../sandbox/launch.ts";
import type { StageRequest } from "../types.ts";
import { ASK_USER_SPEC, RUN_TOOLS, RUN_TOOL_SPECS, runToolsPort, type RunTool } from "../run-tools.ts";
import { MAX_CHOICES, MAX_CHOICE_LENGTH, validChoices } from "../../shared/question-choices.ts";

export { ToolRefused };

export const TOOL_NAMES = ["read", "write", "edit", "list", "grep", "bash"] as const;
/** Tools that reach people and the run, granted only by name in the task's `tools` (agent-loop.ts answers them). */
export const RUN_TOOL_NAMES = ["ask_user", ...RUN_TOOLS] as const;
export type ToolName = (typeof TOOL_NAMES)[number] | (typeof RUN_TOOL_NAMES)[number];

const RESULT_CAP = 32 * 1024;
/** Bytes a `read` call returns: with its paging note it fits in one tool result. */
export const READ_CAP = RESULT_CAP - 1024;
const EDIT_MAX_BYTES = 8 * 1024 * 1024;
const GREP_FILE_MAX_BYTES = 2 * 1024 * 1024;
const GREP_MAX_HITS = 200;
const BASH_DEFAULT_MS = 120_000;
const BASH_MAX_MS = 600_000;

export const TOOL_SPECS: Record<ToolName, { description: string; parameters: Record<string, unknown> }> = {
  ...RUN_TOOL_SPECS,
  read: {
    description: `Read a text file in the working directory: at most ${READ_CAP} bytes a call, from the byte offset given (default 0); a longer file's result ends with the offset to read on from.`,
    parameters: {
      type: "object",
      properties: { path: { type: "string" }, offset: { type: "integer", minimum: 0 } },
      required: ["path"],
    },
  },
  write: {
    description: "Create or overwrite a file in the working directory with the given content.",
    parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] },
  },
  edit: {
    description: "Replace exactly one occurrence of old_text with new_text in a file (all occurrences with replace_all).",
    parameters: {
      type: "object",
      properties: { path: { type: "string" }, old_text: { type: "string" }, new_text: { type: "string" }, replace_all: { type: "boolean" } },
      required: ["path", "old_text", "new_text"],
    },
  },
  list: {
    description: "List a directory of the working directory (default: the working directory itself). Directories end with '/'.",
    parameters: { type: "object", properties: { path: { type: "string" } } },
  },
  grep: {
    description: "Search files under a path (default '.') for a regular expression; returns file:line: text, at most 200 matches.",
    parameters: { type: "object", properties: { pattern: { type: "string" }, path: { type: "string" } }, required: ["pattern"] },
  },
  bash: {
    description: "Run a shell command in the working directory. Returns exit code, stdout and stderr. Optional timeout_ms (default 120000).",
    parameters: { type: "object", properties: { command: { type: "string" }, timeout_ms: { type: "integer" } }, required: ["command"] },
  },
  ask_user: ASK_USER_SPEC,
};

export interface ToolOutcome {
  ok: boolean;
  output: string;
}

/** Runs the tools of one stage; `cancel()` kills a running bash command's process group. */
export class ToolBox {
  private readonly fs: ConfinedFs;
  private readonly running = new Set<number>();
  private env: Record<string, string> | undefined;

  constructor(
    readonly cwd: string,
    readonly enabled: readonly ToolName[],
    /**
     * The `bash` tool's environment: the stage's (runners/stage-env.ts), never atomic's own credentials. Made at
     * the first command, so a stage that runs none makes no environment (and its worker skips the leftover scan).
     */
    private readonly makeEnv: () => Record<string, string> = inheritedEnv,
    /** The stage's sandbox: each `bash` command runs inside it (runners/sandbox/launch.ts), the provider's endpoint reachable. */
    private readonly box?: { sandbox: NonNullable<StageRequest["sandbox"]>; endpoints: string[] },
    /** The run tools' root and credential (runners/run-tools.ts). */
    private readonly runTools?: StageRequest["runTools"],
  ) {
    this.fs = new ConfinedFs(cwd);
  }

  /** The `tools` field of a chat request for the enabled tools. */
  specs(): { type: "function"; function: { name: string; description: string; parameters: Record<string, unknown> } }[] {
    return this.enabled.map((name) => ({ type: "function", function: { name, ...TOOL_SPECS[name] } }));
  }

  async run(name: string, rawArgs: string, signal: AbortSignal): Promise<ToolOutcome> {
    if (!(this.enabled as readonly string[]).includes(name)) {
      return { ok: false, output: `error: there is no tool named ${JSON.stringify(name)}; available: ${this.enabled.join(", ") || "none"}` };
    }
    let args: Record<string, unknown>;
    try {
      const parsed = rawArgs.trim() === "" ? {} : (JSON.parse(rawArgs) as unknown);
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
      args = parsed as Record<string, unknown>;
    } catch {
      return { ok: false, output: `error: the arguments of ${name} are not a JSON object: ${rawArgs.slice(0, 200)}` };
    }
    if ((RUN_TOOLS as readonly string[]).includes(name)) {
      const port = runToolsPort();
      if (!port || !this.runTools) return { ok: false, output: `error: ${name} cannot reach the run from here (no run link for this stage)` };
      const outcome = await port.call({ ...this.runTools, cwd: this.cwd }, name as RunTool, args, signal);
      return { ok: outcome.ok, output: cap(outcome.output) };
    }
    try {
      const output = await this.dispatch(name as ToolName, args, signal);
      return { ok: true, output: cap(output) };
    } catch (err) {
      return { ok: false, output: `error: ${(err as Error).message}` };
    }
  }

  cancel(): void {
    for (const pgid of this.running) killGroup(pgid, "SIGKILL");
  }

  private dispatch(name: ToolName, a: Record<string, unknown>, signal: AbortSignal): Promise<string> | string {
    switch (name) {
      case "read":
        return this.read(str(a, "path"), Math.max(0, num(a, "offset") ?? 0));
      case "write": {
        const target = this.fs.resolve(str(a, "path"));
        const content = str(a, "content", true);
        this.fs.writeText(target, content);
        return `wrote ${content.length} characters to ${target.shown}`;
      }
      case "edit": {
        const target = this.fs.resolve(str(a, "path"));
        const oldText = str(a, "old_text", true);
        const newText = str(a, "new_text", true);
        if (oldText === "") throw new Error("old_text is empty");
        requireFile(target);
        if (target.size > EDIT_MAX_BYTES) throw new Error(`${target.shown} is ${target.size} bytes, more than edit takes (${EDIT_MAX_BYTES}); use bash`);
        const text = this.fs.readBytes(target, 0, EDIT_MAX_BYTES).toString("utf8");
        const count = text.split(oldText).length - 1;
        if (count === 0) throw new Error(`old_text does not occur in ${target.shown}`);
        if (count > 1 && a.replace_all !== true) throw new Error(`old_text occurs ${count} times in ${target.shown}; make it unique or set replace_all`);
        this.fs.writeText({ ...target, kind: "file" }, a.replace_all === true ? text.split(oldText).join(newText) : text.replace(oldText, () => newText));
        return `replaced ${a.replace_all === true ? count : 1} occurrence(s) in ${target.shown}`;
      }
      case "list": {
        const dir = this.fs.resolve(typeof a.path === "string" ? a.path : ".");
        if (dir.kind !== "directory") throw new Error(`${dir.shown} is not a directory`);
        const entries = this.fs.entries(dir.real).map(listed);
        return entries.length ? entries.join("\n") : "(empty)";
      }
      case "grep":
        return this.grep(str(a, "pattern"), typeof a.path === "string" ? a.path : ".");
      case "bash":
        return this.bash(str(a, "command"), num(a, "timeout_ms"), signal);
      case "ask_user":
        throw new Error("ask_user is answered by the stage (it parks), not run as a command");
      case "message":
      case "ask_agent":
      case "reply":
        throw new Error(`${name} is a run tool, answered by the run`);
    }
  }

  /** At most READ_CAP bytes from `offset`, cut after the last complete line (or character) when more follows. */
  private read(path: string, offset: number): string {
    const target = this.fs.resolve(path);
    requireFile(target);
    if (offset >= target.size && target.size > 0) return `(offset ${offset} is at or past the end: ${target.shown} has ${target.size} bytes)`;
    let bytes = this.fs.readBytes(target, offset, READ_CAP);
    const end = offset + bytes.length;
    if (end >= target.size) return bytes.toString("utf8");
    const lastLine = bytes.lastIndexOf(0x0a);
    bytes = bytes.subarray(0, lastLine >= 0 ? lastLine + 1 : utf8Boundary(bytes));
    const next = offset + bytes.length;
    return `${bytes.toString("utf8")}\n… (${target.shown} has ${target.size} bytes; this was bytes ${offset} to ${next}; call read with offset ${next} for the rest)`;
  }

  private grep(pattern: string, under: string): string {
    let re: RegExp;
    try {
      re = new RegExp(pattern);
    } catch (err) {
      throw new Error(`bad regular expression: ${(err as Error).message}`);
    }
    const start = this.fs.resolve(under);
    const hits: string[] = [];
    const visited = new Set<string>();
    let skippedOutside = 0;
    const search = (real: string, shown: string) => {
      if (visited.has(real)) return; // reached before through a symlink
      visited.add(real);
      const bytes = this.fs.readBytes({ real, shown, kind: "file", size: 0 }, 0, GREP_FILE_MAX_BYTES + 1);
      if (bytes.length > GREP_FILE_MAX_BYTES || bytes.includes(0)) return; // too big, or binary
      const lines = bytes.toString("utf8").split("\n");
      for (let i = 0; i < lines.length && hits.length < GREP_MAX_HITS; i++) {
        if (re.test(lines[i]!)) hits.push(`${shown}:${i + 1}: ${lines[i]!.slice(0, 300)}`);
      }
    };
    const walk = (real: string, shown: string) => {
      if (visited.has(real)) return; // a symlink loop, or a directory reached before
      visited.add(real);
      for (const e of this.fs.entries(real)) {
        if (hits.length >= GREP_MAX_HITS) return;
        if (e.name === ".git" || e.name === "node_modules") continue;
        if ("outside" in e) skippedOutside++;
        if (!("kind" in e)) continue;
        const path = shown === "." ? e.name : join(shown, e.name);
        if (e.kind === "directory") walk(e.real, path);
        else if (e.kind === "file") search(e.real, path);
        // fifos, sockets, devices: never opened
      }
    };
    if (start.kind === "directory") walk(start.real, start.shown);
    else {
      requireFile(start);
      search(start.real, start.shown);
    }
    const note = skippedOutside ? `\n(${skippedOutside} symbolic link(s) leading outside the working directory not followed)` : "";
    return (hits.length ? hits.join("\n") : "(no matches)") + note;
  }

  private bash(command: string, timeoutArg: number | undefined, signal: AbortSignal): Promise<string> {
    const timeoutMs = Math.min(BASH_MAX_MS, Math.max(1, timeoutArg ?? BASH_DEFAULT_MS));
    return new Promise((resolvePromise) => {
      let sandbox: Sandboxed;
      let out = "";
      let err = "";
      try {
        // A provider the gate cannot reach is named in the tool's result (its stderr part) for the model to read.
        sandbox = sandboxed({ cwd: this.cwd, ...(this.box ? { sandbox: this.box.sandbox } : {}) }, ["/bin/sh", "-c", command], (this.env ??= this.makeEnv()), { endpoints: this.box?.endpoints ?? [] }, (sentence) => {
          if (err.length < RESULT_CAP) err += `${sentence}\n`;
        });
      } catch (e) {
        resolvePromise(`error: ${(e as Error).message}`);
        return;
      }
      const [program, ...args] = sandbox.argv;
      const child = spawnWithUserUmask(() => childProcess().spawn(program!, args, { cwd: this.cwd, env: sandbox.env, detached: true, stdio: ["ignore", "pipe", "pipe"] }));
      const pid = child.pid;
      if (pid !== undefined) {
        trackGroup(pid);
        this.running.add(pid);
      }
      let timedOut = false;
      child.stdout?.on("data", (c: Buffer) => {
        if (out.length < RESULT_CAP) out += c.toString("utf8");
      });
      child.stderr?.on("data", (c: Buffer) => {
        if (err.length < RESULT_CAP) err += c.toString("utf8");
      });
      const kill = () => pid !== undefined && killGroup(pid, "SIGKILL");
      const timer = setTimeout(() => {
        timedOut = true;
        kill();
      }, timeoutMs);
      const onAbort = () => kill();
      signal.addEventListener("abort", onAbort, { once: true });
      child.on("exit", () => kill()); // background children must not outlive the command
      child.on("error", (e) => {
        err += e.message;
      });
      child.on("close", (code) => {
        clearTimeout(timer);
        sandbox.close();
        signal.removeEventListener("abort", onAbort);
        if (pid !== undefined) {
          untrackGroup(pid);
          this.running.delete(pid);
        }
        const head = timedOut ? `timed out after ${timeoutMs} ms (killed)` : `exit code ${code ?? "?"}`;
        resolvePromise(`${head}\n--- stdout\n${out}${err ? `\n--- stderr\n${err}` : ""}`);
      });
    });
  }
}

/** A `list` line: directories end with "/"; what a tool may not open says why. */
function listed(e: DirEntry): string {
  if ("outside" in e) return `${e.name} (symbolic link outside the working directory)`;
  if ("broken" in e) return `${e.name} (broken symbolic link)`;
  if (e.kind === "directory") return `${e.name}/`;
  return e.kind === "file" ? e.name : `${e.name} (${e.kind})`;
}

/** The length of `bytes` without a UTF-8 character cut off at its end. */
function utf8Boundary(bytes: Buffer): number {
  let i = bytes.length;
  while (i > 0 && bytes.length - i < 3 && (bytes[i - 1]! & 0xc0) === 0x80) i--; // continuation bytes
  if (i > 0 && bytes[i - 1]! >= 0xc0) {
    const lead = bytes[i - 1]!;
    const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (bytes.length - (i - 1) < need) return i - 1;
  }
  return bytes.length;
}

function str(a: Record<string, unknown>, key: string, allowEmpty = false): string {
  const v = a[key];
  if (typeof v !== "string" || (!allowEmpty && v === "")) throw new Error(`${key} must be a non-empty string`);
  return v;
}

function num(a: Record<string, unknown>, key: string): number | undefined {
  const v = a[key];
  return typeof v === "number" && Number.isFinite(v) ? Math.floor(v) : undefined;
}

function cap(text: string): string {
  return text.length > RESULT_CAP ? `${text.slice(0, RESULT_CAP)}\n… (${text.length - RESULT_CAP} more characters cut)` : text;
}

/** The task's `tools` option as tool names (absent: the file and shell tools); throws on a name the runner does not have. */
export function enabledTools(requested: string[] | undefined): ToolName[] {
  if (requested === undefined) return [...TOOL_NAMES];
  const known: readonly string[] = [...TOOL_NAMES, ...RUN_TOOL_NAMES];
  const unknown = requested.filter((t) => !known.includes(t));
  if (unknown.length) throw new Error(`unknown tool(s) ${unknown.join(", ")}; the openai runner has ${known.join(", ")}`);
  // Who may ask may be asked: ask_agent brings reply.
  return (requested.includes("ask_agent") && !requested.includes("reply") ? [...requested, "reply"] : requested) as ToolName[];
}


/** An ask_user call's arguments, checked: the question and choices, or why they are refused (the model is told and may try again). */
export function askUserArgs(rawArgs: string): { question: string; choices?: string[] } | { refused: string } {
  let a: unknown;
  try {
    a = JSON.parse(rawArgs || "{}");
  } catch {
    return { refused: `error: the arguments of ask_user are not JSON: ${rawArgs.slice(0, 200)}` };
  }
  const { question, choices } = (typeof a === "object" && a !== null ? a : {}) as { question?: unknown; choices?: unknown };
  if (typeof question !== "string" || question.trim() === "") return { refused: "error: ask_user needs a non-empty question" };
  if (question.length > 8192) return { refused: "error: the question is longer than 8192 characters; ask a shorter one" };
  if (choices === undefined || choices === null) return { question };
  if (!validChoices(choices)) {
    return { refused: `error: ask_user choices must be 1 to ${MAX_CHOICES} distinct non-empty strings of at most ${MAX_CHOICE_LENGTH} characters` };
  }
  return { question, choices };
}
