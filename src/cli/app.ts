/**
 * The command line: a citty command tree with one lazily loaded file per
 * command, our own help text, and one place that turns errors into one
 * sentence, a hint and an exit code (a stack trace only with --verbose).
 *
 * Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked,
 * 4 cancelled, 130 interrupted.
 */

import { runCommand, type ArgsDef, type CommandDef } from "citty";
import { AtomicError, ensureError, errorInfo } from "../shared/errors.ts";
import { HOST_ID_ENV } from "../shared/process-info.ts";
import { redact } from "../shared/secrets.ts";
import { VERSION } from "../shared/version.ts";
import { liftGlobals } from "./globals.ts";
import { commandHelp, kebab, topHelp, type CommandHelp } from "./help.ts";
import { startSession, type CliSession } from "./session.ts";
import { err as writeErr, exit, installOutput, out } from "./output.ts";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each command has its own args type
type Loader = () => Promise<CommandDef<any>>;

export const COMMANDS: Record<string, CommandHelp & { load: Loader }> = {
  run: {
    summary: "run a workflow file, or a builtin by name",
    examples: ["atomic run ./review.ts --input dir=src --input depth=3", "atomic run ./review.ts --detach", "atomic run fan-out-and-synthesize --input prompt=\"Review src/ for bugs\"", "atomic run triage --inputs-json inputs.json --max-cost 2", "atomic run ./review.ts --id review-2026-12-01 --input dir=src", "atomic run ./review.ts --json | jq -c 'select(.type == \"result\")'"],
    load: () => import("./commands/run.ts").then((m) => m.default),
  },
  resume: {
    summary: "continue an interrupted, crashed or failed run",
    examples: ["atomic resume 01m8rf", "atomic resume 01m8rf --max-cost 5", "atomic resume 01m8rf --max-cost 5 --detach"],
    load: () => import("./commands/resume.ts").then((m) => m.default),
  },
  rerun: {
    summary: "start a new run of a run's workflow with its inputs (--input overrides)",
    examples: ["atomic rerun 01m8rf", "atomic rerun 01m8rf --input depth=3"],
    load: () => import("./commands/rerun.ts").then((m) => m.default),
  },
  fork: {
    summary: "start a new run that reuses a run's results up to a step and runs the rest",
    examples: ["atomic fork 01m8rf --at review", "atomic fork 01m8rf --at '#4'"],
    load: () => import("./commands/fork.ts").then((m) => m.default),
  },
  worker: {
    summary: "run stages of any run from a shared Postgres journal on this machine (a worker host)",
    examples: ["atomic worker --journal postgres://atomic@db:5432/atomic", "atomic worker --journal postgres://atomic@db/atomic --slots 8 --queues default,gpu --workdir /srv/checkout"],
    load: () => import("./commands/worker.ts").then((m) => m.default),
  },
  workers: {
    summary: "list worker hosts of a shared Postgres journal and what their workers run",
    examples: ["atomic workers --journal postgres://atomic@db:5432/atomic", "atomic workers --all --json | jq -c 'select(.state == \"lost\")'"],
    load: () => import("./commands/workers.ts").then((m) => m.default),
  },
  gc: {
    summary: "delete old finished runs and their artifacts; shrink the journal",
    examples: ["atomic gc --dry-run", "atomic gc --older-than 7d", "atomic gc --older-than 90d --status failed,crashed --force"],
    load: () => import("./commands/gc.ts").then((m) => m.default),
  },
  runs: {
    summary: "list runs",
    examples: ["atomic runs", "atomic runs --status crashed,failed --since 2h", "atomic runs --workflow review --json"],
    load: () => import("./commands/runs.ts").then((m) => m.default),
  },
  show: {
    summary: "show a run: stages, outputs, errors, timings",
    examples: ["atomic show 01m8rf", "atomic show 01m8rf --json | jq .run.outputs"],
    load: () => import("./commands/show.ts").then((m) => m.default),
  },
  logs: {
    summary: "print a run's stage output (--follow to keep reading)",
    examples: ["atomic logs 01m8rf --stage list", "atomic logs 01m8rf --follow", "atomic logs 01m8rf --stage summarize/report --no-stderr"],
    load: () => import("./commands/logs.ts").then((m) => m.default),
  },
  pause: { summary: "pause a live run: no new step starts", examples: ["atomic pause 01m8rf"], load: () => import("./commands/pause.ts").then((m) => m.default) },
  unpause: { summary: "let a paused run go on", examples: ["atomic unpause 01m8rf"], load: () => import("./commands/unpause.ts").then((m) => m.default) },
  cancel: { summary: "cancel a run (live or not)", examples: ["atomic cancel 01m8rf", "atomic cancel 01m8rf --wait 60"], load: () => import("./commands/cancel.ts").then((m) => m.default) },
  send: {
    summary: "send a message to a stage (live now, or before it starts)",
    examples: ['atomic send 01m8rf review "focus on the tests"', 'atomic send 01m8rf "review/*" "stop and summarize" --mode interrupt'],
    load: () => import("./commands/send.ts").then((m) => m.default),
  },
  answer: { summary: "answer a question a run asked (ctx.ask)", examples: ["atomic answer 01m8rf q2rgm5mf yes"], load: () => import("./commands/answer.ts").then((m) => m.default) },
  inbox: { summary: "list a run's messages per stage and its questions", examples: ["atomic inbox 01m8rf"], load: () => import("./commands/inbox.ts").then((m) => m.default) },
  sessions: { summary: "list intercom sessions: live runs and their running stages", examples: ["atomic sessions", "atomic sessions --run 01m8rf"], load: () => import("./commands/sessions.ts").then((m) => m.default) },
  serve: {
    summary: "the local service: the status page and API, and runs recovered and woken by themselves",
    examples: ["atomic serve", "atomic serve --port 8080 --open", "atomic serve --max-runs 8", "atomic serve --no-recover", "atomic serve --no-schedules"],
    load: () => import("./commands/serve.ts").then((m) => m.default),
  },
  schedule: {
    summary: "add, list, show, pause, unpause, trigger or delete schedules (atomic serve runs them)",
    examples: [
      'atomic schedule add nightly --cron "0 9 * * 1-5" --tz Europe/Berlin ./review.ts --input dir=src',
      "atomic schedule list",
      "atomic schedule trigger nightly",
      "atomic schedule pause nightly",
    ],
    load: () => import("./commands/schedule.ts").then((m) => m.default),
  },
  workflows: {
    summary: "list workflows in .atomic/workflows/ and the builtins (or one's inputs and outputs)",
    examples: ["atomic workflows", "atomic workflows --inputs ./review.ts", "atomic workflows loop-until-done --source"],
    load: () => import("./commands/workflows.ts").then((m) => m.default),
  },
  doctor: { summary: "say which runners (agents) are usable here and why not", examples: ["atomic doctor", "atomic doctor --check-endpoint"], load: () => import("./commands/doctor.ts").then((m) => m.default) },
  version: { summary: "print the version", examples: ["atomic version", "atomic --version --json"], load: () => import("./commands/version.ts").then((m) => m.default) },
};

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
    if (globals.hostId) process.env[HOST_ID_ENV] = globals.hostId;
    s = startSession(globals, rest);
    const [name, ...args] = rest;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      out(`${topHelp(COMMANDS, s.style)}\n`);
      return 0;
    }
    if (name === "--version" || name === "-v") {
      out(s.globals.json ? `${JSON.stringify({ version: VERSION, bun: Bun.version })}\n` : `${VERSION}\n`);
      return 0;
    }
    const entry = COMMANDS[name];
    if (!entry) {
      throw new AtomicError("unknown_command", `unknown command "${name}"`, "usage", { hint: "see atomic --help" });
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

