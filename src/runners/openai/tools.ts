/**
 * The openai runner's tool set, confined to the stage's working directory:
 * read, write, edit, list, grep, bash.
 *
 * Confinement: every path argument is resolved against the cwd; a path
 * that lands outside it — lexically (`../x`, `/etc/passwd`) or through a
 * symlink (the real path of its nearest existing ancestor) — is refused
 * before anything is touched, and the refusal goes back to the model as
 * the tool's error result. `bash` runs `/bin/sh -c` with the cwd as its
 * working directory, in its own process group, with a timeout (default
 * 120 s, at most 600 s); it is not a sandbox (a command can `cd ..`), which
 * is why it can be left out with the task's `tools` option.
 *
 * Tool results are capped (32 KiB) so one big file cannot flood the
 * context window.
 */

import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { killGroup, trackGroup, untrackGroup } from "../shell/process-groups.ts";
import { inheritedEnv } from "../stage-env.ts";

export const TOOL_NAMES = ["read", "write", "edit", "list", "grep", "bash"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

const RESULT_CAP = 32 * 1024;
const BASH_DEFAULT_MS = 120_000;
const BASH_MAX_MS = 600_000;

export const TOOL_SPECS: Record<ToolName, { description: string; parameters: Record<string, unknown> }> = {
  read: {
    description: "Read a text file in the working directory. Optional 1-based line offset and line limit.",
    parameters: {
      type: "object",
      properties: { path: { type: "string" }, offset: { type: "integer" }, limit: { type: "integer" } },
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
};

export class ToolRefused extends Error {}

export interface ToolOutcome {
  ok: boolean;
  output: string;
}

/** Runs the tools of one stage; `cancel()` kills a running bash command's process group. */
export class ToolBox {
  private readonly realCwd: string;
  private readonly running = new Set<number>();

  constructor(
    readonly cwd: string,
    readonly enabled: readonly ToolName[],
    /** The `bash` tool's environment: the stage's (runners/stage-env.ts), never atomic's own credentials. */
    private readonly env: Record<string, string> = inheritedEnv(),
  ) {
    this.realCwd = realpathSync.native(cwd);
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
      case "read": {
        const path = this.inside(str(a, "path"));
        const lines = readFileSync(path, "utf8").split("\n");
        const offset = Math.max(1, num(a, "offset") ?? 1);
        const limit = num(a, "limit") ?? lines.length;
        return lines.slice(offset - 1, offset - 1 + limit).join("\n");
      }
      case "write": {
        const path = this.inside(str(a, "path"));
        const content = str(a, "content", true);
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(path, content);
        return `wrote ${content.length} characters to ${this.shown(path)}`;
      }
      case "edit": {
        const path = this.inside(str(a, "path"));
        const oldText = str(a, "old_text", true);
        const newText = str(a, "new_text", true);
        if (oldText === "") throw new Error("old_text is empty");
        const text = readFileSync(path, "utf8");
        const count = text.split(oldText).length - 1;
        if (count === 0) throw new Error(`old_text does not occur in ${this.shown(path)}`);
        if (count > 1 && a.replace_all !== true) throw new Error(`old_text occurs ${count} times in ${this.shown(path)}; make it unique or set replace_all`);
        writeFileSync(path, a.replace_all === true ? text.split(oldText).join(newText) : text.replace(oldText, () => newText));
        return `replaced ${a.replace_all === true ? count : 1} occurrence(s) in ${this.shown(path)}`;
      }
      case "list": {
        const path = this.inside(typeof a.path === "string" ? a.path : ".");
        const entries = readdirSync(path, { withFileTypes: true })
          .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
          .sort();
        return entries.length ? entries.join("\n") : "(empty)";
      }
      case "grep":
        return this.grep(str(a, "pattern"), typeof a.path === "string" ? a.path : ".");
      case "bash":
        return this.bash(str(a, "command"), num(a, "timeout_ms"), signal);
    }
  }

  /** The absolute path for `p`, or ToolRefused when it leaves the working directory. */
  inside(p: string): string {
    const abs = resolve(this.cwd, p);
    const rel = relative(this.cwd, abs);
    if (rel.startsWith("..") || isAbsolute(rel)) throw refused(p);
    if (rel === "") return abs; // the working directory itself
    // Symlinks: the real path of the nearest existing ancestor must stay inside too.
    const real = realOfNearest(abs);
    if (real !== this.realCwd && !real.startsWith(this.realCwd + sep)) throw refused(p);
    return abs;
  }

  private shown(abs: string): string {
    return relative(this.cwd, abs) || ".";
  }

  private grep(pattern: string, under: string): string {
    let re: RegExp;
    try {
      re = new RegExp(pattern);
    } catch (err) {
      throw new Error(`bad regular expression: ${(err as Error).message}`);
    }
    const root = this.inside(under);
    const hits: string[] = [];
    const walk = (path: string) => {
      if (hits.length >= 200) return;
      const st = statSync(path);
      if (st.isDirectory()) {
        for (const e of readdirSync(path)) {
          if (e === ".git" || e === "node_modules") continue;
          walk(join(path, e));
          if (hits.length >= 200) return;
        }
        return;
      }
      if (!st.isFile() || st.size > 2 * 1024 * 1024) return;
      const text = readFileSync(path, "utf8");
      if (text.includes("\u0000")) return;
      const lines = text.split("\n");
      for (let i = 0; i < lines.length && hits.length < 200; i++) {
        if (re.test(lines[i]!)) hits.push(`${this.shown(path)}:${i + 1}: ${lines[i]!.slice(0, 300)}`);
      }
    };
    walk(root);
    return hits.length ? hits.join("\n") : "(no matches)";
  }

  private bash(command: string, timeoutArg: number | undefined, signal: AbortSignal): Promise<string> {
    const timeoutMs = Math.min(BASH_MAX_MS, Math.max(1, timeoutArg ?? BASH_DEFAULT_MS));
    return new Promise((resolvePromise) => {
      const child = spawn("/bin/sh", ["-c", command], { cwd: this.cwd, env: this.env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
      const pid = child.pid;
      if (pid !== undefined) {
        trackGroup(pid);
        this.running.add(pid);
      }
      let out = "";
      let err = "";
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

/** realpath of `abs`, or of its nearest existing ancestor (a file about to be written). */
function realOfNearest(abs: string): string {
  for (let probe = abs; ; probe = dirname(probe)) {
    try {
      return realpathSync.native(probe);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || dirname(probe) === probe) throw err;
    }
  }
}

function refused(p: string): ToolRefused {
  return new ToolRefused(`refused: ${JSON.stringify(p)} is outside the stage's working directory`);
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

/** The task's `tools` option as tool names; throws on a name the runner does not have. */
export function enabledTools(requested: string[] | undefined): ToolName[] {
  if (requested === undefined) return [...TOOL_NAMES];
  const unknown = requested.filter((t) => !(TOOL_NAMES as readonly string[]).includes(t));
  if (unknown.length) throw new Error(`unknown tool(s) ${unknown.join(", ")}; the openai runner has ${TOOL_NAMES.join(", ")}`);
  return requested as ToolName[];
}
