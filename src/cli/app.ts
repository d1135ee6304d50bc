/**
 * The command line: a citty command tree with one lazily loaded file per
 * command, our own help text, and one place that turns errors into one
 * sentence, a hint and an exit code (a stack trace only with --verbose).
 *
 * Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked,
 * 4 cancelled, 5 skipped, 130 interrupted.
 */

import { runCommand, type ArgsDef, type CommandDef } from "citty";
import { AtomicError, ensureError, errorInfo } from "../shared/errors.ts";
import { fileSystemFault } from "../shared/file-system-fault.ts";
import { redact } from "../shared/secrets.ts";
import { closeMatches } from "../shared/close-matches.ts";
import { buildInfo, VERSION } from "../shared/version.ts";
import { liftGlobals } from "./globals.ts";
import { COMMANDS } from "./command-table.ts";
import { commandHelp, kebab, topHelp } from "./help.ts";
import { startSession, type CliSession } from "./session.ts";
import { err as writeErr, exit, installOutput, out } from "./output.ts";
import { setEnv } from "../shared/config/environment.ts";
import { takeReadyFd } from "../shared/ready-pipe.ts";

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
    // Read by the lease code of this process, and inherited by the pool's processes (they are this host too).
    if (globals.hostId) setEnv("ATOMIC_HOST_ID", globals.hostId);
    // A process that started this one may wait on a pipe for it to be ready (a spawned run: recorded); nothing this one starts inherits the name.
    takeReadyFd();
    s = startSession(globals, rest);
    const [name, ...args] = rest;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      out(`${topHelp(COMMANDS, s.style)}\n`);
      return 0;
    }
    if (name === "--version" || name === "-v") {
      out(s.globals.json ? `${JSON.stringify(buildInfo())}\n` : `${VERSION}\n`);
      return 0;
    }
    const entry = COMMANDS[name];
    if (!entry) {
      const near = closeMatches(name, Object.keys(COMMANDS), 3);
      throw new AtomicError("unknown_command", `unknown command "${name}"`, "usage", {
        hint: near.length ? `did you mean ${near.map((c) => `atomic ${c}`).join(", ")}? (see atomic --help)` : "see atomic --help",
      });
    }
    const cmd = await entry.load();
    if (args.includes("--help") || args.includes("-h")) {
      out(`${await commandHelp(name, entry, cmd, s.style)}\n`);
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
  // A positional whose value hint ends in "…" (`FILE…`) takes any number of values.
  const variadic = Object.values(defs).some((def) => def.type === "positional" && "valueHint" in def && def.valueHint?.endsWith("…"));
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
      if (++positionalCount > positionals.length && !variadic) {
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

function reportError(err: unknown, s: CliSession | undefined): number {
  const e = fileSystemFault(err) ?? ensureError(err);
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
  const message = redact(e.message.replace(/\x1b\[[0-9;]*m/g, ""));
  if (hint) hint = redact(hint);
  if (asJson) {
    out(`${JSON.stringify({ type: "error", code, message, hint, exitCode })}\n`);
  } else {
    const red = s?.style.red ?? ((x: string) => x);
    writeErr(`${red("error:")} ${message}${message.endsWith(".") ? "" : "."}\n`);
    if (hint) writeErr(`hint: ${hint}\n`);
  }
  // The stack worth reading is the one of what the user's code threw (a workflow file that fails to load), if any.
  const stack = errorInfo(e).stack ?? e.stack;
  if (verbose && stack) writeErr(`${redact(stack)}\n`);
  return exitCode;
}

