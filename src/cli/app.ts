/**
 * The command line: a citty command tree with one lazily loaded file per
 * command, our own help text, and one place that turns errors into one
 * sentence, a hint and an exit code (a stack trace only with --verbose).
 *
 * Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked,
 * 4 cancelled, 130 interrupted.
 */

import { renderUsage, runCommand, type ArgsDef, type CommandDef } from "citty";
import { AtomicError, ensureError } from "../shared/errors.ts";
import { VERSION } from "../shared/version.ts";
import { GLOBAL_HELP, liftGlobals } from "./globals.ts";
import { startSession, type CliSession } from "./session.ts";
import { err as writeErr, exit, installOutput, out } from "./output.ts";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each command has its own args type
type Loader = () => Promise<CommandDef<any>>;

export const COMMANDS: Record<string, { summary: string; load: Loader }> = {
  run: { summary: "run a workflow file", load: () => import("./commands/run.ts").then((m) => m.default) },
  resume: { summary: "continue an interrupted, crashed or failed run", load: () => import("./commands/resume.ts").then((m) => m.default) },
  runs: { summary: "list runs", load: () => import("./commands/runs.ts").then((m) => m.default) },
  show: { summary: "show a run: stages, outputs, errors, timings", load: () => import("./commands/show.ts").then((m) => m.default) },
  logs: { summary: "print a run's stage output (--follow to keep reading)", load: () => import("./commands/logs.ts").then((m) => m.default) },
  pause: { summary: "pause a live run: no new step starts", load: () => import("./commands/pause.ts").then((m) => m.default) },
  unpause: { summary: "let a paused run go on", load: () => import("./commands/unpause.ts").then((m) => m.default) },
  cancel: { summary: "cancel a run (live or not)", load: () => import("./commands/cancel.ts").then((m) => m.default) },
  send: { summary: "send a message to a stage (live now, or before it starts)", load: () => import("./commands/send.ts").then((m) => m.default) },
  answer: { summary: "answer a question a run asked (ctx.ask)", load: () => import("./commands/answer.ts").then((m) => m.default) },
  inbox: { summary: "list a run's messages per stage and its questions", load: () => import("./commands/inbox.ts").then((m) => m.default) },
  sessions: { summary: "list intercom sessions: live runs and their running stages", load: () => import("./commands/sessions.ts").then((m) => m.default) },
  serve: { summary: "serve the status page, JSON API and event streams", load: () => import("./commands/serve.ts").then((m) => m.default) },
  workflows: { summary: "list workflows in .atomic/workflows/ (or a file's inputs)", load: () => import("./commands/workflows.ts").then((m) => m.default) },
  doctor: { summary: "say which runners (agents) are usable here and why not", load: () => import("./commands/doctor.ts").then((m) => m.default) },
  version: { summary: "print the version", load: () => import("./commands/version.ts").then((m) => m.default) },
};

function topHelp(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  const cmds = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  const gw = Math.max(...GLOBAL_HELP.map(([f]) => f.length));
  const globals = GLOBAL_HELP.map(([f, d]) => `  ${f.padEnd(gw)}  ${d}`);
  return [
    `atomic ${VERSION}: durable workflows for AI-agent pipelines`,
    "",
    "Usage: atomic <command> [options]",
    "",
    "Commands:",
    ...cmds,
    "",
    "Global options:",
    ...globals,
    "",
    "Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked, 4 cancelled, 130 interrupted.",
    "Run `atomic <command> --help` for a command's options.",
  ].join("\n");
}

/** The binary's command line: runs `argv`, then exits once stdout and stderr have been read. */
export async function cliMain(argv: readonly string[]): Promise<never> {
  installOutput();
  return exit(await runCli(argv));
}

/** Runs the CLI with argv (without the executable); resolves to the exit code. */
export async function runCli(argv: readonly string[]): Promise<number> {
  let s: CliSession | undefined;
  try {
    const { globals, rest } = liftGlobals(argv);
    s = startSession(globals, rest);
    const [name, ...args] = rest;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      out(`${topHelp()}\n`);
      return 0;
    }
    if (name === "--version" || name === "-v") {
      out(`${VERSION}\n`);
      return 0;
    }
    const entry = COMMANDS[name];
    if (!entry) {
      throw new AtomicError("unknown_command", `unknown command "${name}"`, "usage", { hint: "see atomic --help" });
    }
    const cmd = await entry.load();
    if (args.includes("--help") || args.includes("-h")) {
      let usage = await renderUsage(cmd);
      if (!s.style.enabled) usage = usage.replace(/\x1b\[[0-9;]*m/g, "");
      // citty names options after their keys (inputsJson); the command line takes them in kebab case.
      usage = usage.replace(/--([a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+)/g, (_m, key: string) => `--${kebab(key)}`);
      const gw = Math.max(...GLOBAL_HELP.map(([f]) => f.length));
      out(`${usage}\n\nGlobal options (any command):\n${GLOBAL_HELP.map(([f, d]) => `  ${f.padEnd(gw)}  ${d}`).join("\n")}\n`);
      return 0;
    }
    await checkFlags(cmd, name, args);
    await runCommand(cmd, { rawArgs: args });
    return s.exitCode;
  } catch (err) {
    return reportError(err, s);
  } finally {
    await s?.close();
  }
}

/** citty ignores unknown flags; a typo must not silently change behaviour. */
async function checkFlags(cmd: CommandDef<ArgsDef>, name: string, args: string[]): Promise<void> {
  const defs = (typeof cmd.args === "function" ? await cmd.args() : cmd.args) ?? {};
  const known = new Set<string>();
  const needsValue = new Set<string>();
  const positionals = Object.entries(defs).filter(([, def]) => def.type === "positional").map(([key]) => key);
  let positionalCount = 0;
  for (const [key, def] of Object.entries(defs)) {
    if (def.type === "positional") continue;
    known.add(kebab(key));
    if (def.type === "string") needsValue.add(kebab(key));
    if (def.type === "boolean") known.add(`no-${kebab(key)}`);
    const alias = "alias" in def ? def.alias : undefined;
    for (const a of Array.isArray(alias) ? alias : alias ? [alias] : []) {
      known.add(a);
      if (def.type === "string") needsValue.add(a);
    }
  }
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") break;
    const m = /^--?([^=]+)/.exec(arg);
    if (!m || arg === "-" || /^-\d/.test(arg)) {
      if (++positionalCount > positionals.length) {
        throw new AtomicError("extra_argument", `unexpected argument ${JSON.stringify(arg)} for atomic ${name}`, "usage", {
          hint: `see atomic ${name} --help`,
        });
      }
      continue;
    }
    if (!known.has(m[1]!)) {
      throw new AtomicError("unknown_flag", `unknown option ${arg.split("=")[0]} for atomic ${name}`, "usage", {
        hint: `see atomic ${name} --help`,
      });
    }
    // citty reads `--stage` without a value as an empty string: refuse it instead of ignoring the flag.
    if (needsValue.has(m[1]!) && !arg.includes("=")) {
      const value = args[i + 1];
      if (value === undefined || (value.startsWith("-") && !/^-\d/.test(value))) {
        throw new AtomicError("bad_flag", `${arg} needs a value`, "usage", { hint: `see atomic ${name} --help` });
      }
      i++;
    }
  }
}

function kebab(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

function reportError(err: unknown, s: CliSession | undefined): number {
  const e = ensureError(err);
  const verbose = s?.globals.verbose ?? process.argv.includes("--verbose");
  const asJson = s?.globals.json ?? false;
  let code: string;
  let hint: string | undefined;
  let exitCode: number;
  if (e instanceof AtomicError) {
    code = e.code;
    hint = e.hint;
    exitCode = e.exitCode;
  } else if (e.name === "CLIError") {
    code = "usage";
    hint = "see atomic --help";
    exitCode = 2;
  } else {
    code = "internal";
    hint = "this is a bug in atomic; run again with --verbose and report the output";
    exitCode = 1;
  }
  const message = e.message.replace(/\x1b\[[0-9;]*m/g, "");
  if (asJson) {
    out(`${JSON.stringify({ type: "error", code, message, hint, exitCode })}\n`);
  } else {
    const red = s?.style.red ?? ((x: string) => x);
    writeErr(`${red("error:")} ${message}${message.endsWith(".") ? "" : "."}\n`);
    if (hint) writeErr(`hint: ${hint}\n`);
  }
  if (verbose && e.stack) writeErr(`${e.stack}\n`);
  return exitCode;
}

