/**
 * `atomic run FILE [--input k=v ...] [--inputs-json FILE] [--serve [--port N] [--host H]]`:
 * start a run and drive it to its end. With --serve the status server runs
 * in this process for the run's lifetime (started before the run, so a
 * busy port stops everything before anything is written).
 */

import { defineCommand } from "citty";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { RootRun } from "../../engine/driver.ts";
import { parseInputPairs } from "../../engine/inputs.ts";
import { hasWorkflowExtension, loadWorkflowFile } from "../../engine/loader.ts";
import { UsageError } from "../../shared/errors.ts";
import { BUILTIN_PREFIX, builtinSource } from "../../engine/builtins.ts";
import { newRunId } from "../../shared/ids.ts";
import { driveRun } from "../drive.ts";
import { repeatedFlag } from "../globals.ts";
import { POOL_ARGS, executorOption } from "../pool-options.ts";
import { BUDGET_ARGS, budgetOption, warnIfUnpriced } from "../budget-options.ts";
import { loadConfig } from "../../shared/config.ts";
import { checkRunner, defaultRunner } from "../../runners/agent-setup.ts";
import { session } from "../session.ts";
import { SERVE_ARGS, startCliServer } from "../status-server.ts";
import { createRunView, type RunView } from "../view/run-view.ts";
import type { CliSession } from "../session.ts";
import type { StatusServer } from "../../status/server.ts";
import { exit, out } from "../output.ts";

export default defineCommand({
  meta: { name: "run", description: "Run a workflow file" },
  args: {
    file: { type: "positional", description: "workflow file (.ts), the name of one in .atomic/workflows/, or a builtin's name (atomic workflows lists them)", required: true },
    input: { type: "string", description: "an input; repeat the flag for more inputs (an array input takes it several times)" },
    inputsJson: { type: "string", description: "a JSON file with the inputs" },
    leaseMs: { type: "string", description: "lease timeout in ms (default 30000)" },
    ...POOL_ARGS,
    ...BUDGET_ARGS,
    serve: { type: "boolean", description: "serve the status page while the run runs" },
    ...SERVE_ARGS,
  },
  async run({ args }) {
    const s = session();
    const lease = leaseOption(args.leaseMs);
    const budget = budgetOption(args);
    const choice = executorOption(s, args).executor;
    if (!args.serve && (args.port !== undefined || args.host !== undefined)) {
      throw new UsageError("bad_flag", "--port and --host only go with --serve", { hint: "add --serve, or use atomic serve" });
    }
    const file = resolveWorkflowArg(args.file);
    // The worker pool starts with the run's first stage (the stage step asks for it), not here: a run whose
    // steps never use a stage (ctx.tool only) pays for no coordinator and no worker.
    const runId = newRunId();
    let root: RootRun | undefined;
    let server: StatusServer | undefined;
    // Ctrl-C before the run is recorded: nothing was written, nothing to resume.
    const stopEarly = () => void exit(130);
    process.once("SIGINT", stopEarly);
    process.once("SIGTERM", stopEarly);
    const startedOrRefused = () => {
      process.off("SIGINT", stopEarly);
      process.off("SIGTERM", stopEarly);
    };
    try {
      const loaded = await loadWorkflowFile(file);
      const json = args.inputsJson ? readInputsJson(args.inputsJson) : undefined;
      const inputs = parseInputPairs(loaded.definition.inputs ?? {}, repeatedFlag(s.rawArgs, "input"), json, args.file);
      const { config } = loadConfig({ home: s.globals.home });
      // A workflow that names its runner is checked before anything is written (a missing key, a missing CLI).
      if (loaded.definition.runner) {
        const runner = defaultRunner(config, loaded.definition.runner);
        const problem = checkRunner(runner, config, loaded.definition.model ?? config.model);
        if (problem) throw new UsageError(problem.code, `workflow ${loaded.definition.name}: ${problem.message}`, { hint: problem.hint });
      }
      warnIfUnpriced(s, config, loaded.definition, budget);
      const journal = await s.journal();
      server = args.serve ? await startCliServer(s, args) : undefined;
      const view = createRunView(s);
      root = await RootRun.start(
        { journal, home: s.globals.home, observer: view.observer, config, ...lease, executor: choice },
        { definition: loaded.definition, workflowPath: loaded.path, digest: loaded.digest, inputs, runId, ...(budget ? { budget } : {}) },
      );
      startedOrRefused(); // from here on, Ctrl-C is the run's to handle (driveRun)
      if (server) announce(s, view, server, root.runId);
      await driveRun(s, root, view);
    } finally {
      startedOrRefused();
      // The page gets the run's last events before the server goes.
      await server?.stop(true);
    }
  },
});

function announce(s: CliSession, view: RunView, server: StatusServer, runId: string): void {
  // A login URL: opening it signs the browser in and shows the run's page.
  const url = server.loginUrl(`/runs/${runId}`);
  if (s.globals.json) s.json({ type: "status_server", url, port: server.port });
  else if (s.globals.quiet) out(`status page: ${url}\n`);
  else view.note(`status page: ${url}`);
}

/**
 * `atomic run triage` finds `.atomic/workflows/triage.ts` when no file of
 * that name exists, else the builtin of that name (`builtin:triage`): a
 * local workflow wins over a builtin.
 */
export function resolveWorkflowArg(arg: string): string {
  if (existsSync(arg) || arg.includes("/")) return arg;
  const named = localWorkflowPath(arg);
  if (existsSync(named)) return named;
  if (builtinSource(arg) !== undefined) return `${BUILTIN_PREFIX}${arg}`;
  return arg;
}

export function localWorkflowPath(name: string): string {
  return join(".atomic", "workflows", name.endsWith(".ts") ? name : `${name}.ts`);
}

export function leaseOption(text: string | undefined): { leaseTimeoutMs?: number } {
  if (text === undefined) return {};
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1000) {
    throw new UsageError("bad_flag", `--lease-ms must be a whole number of milliseconds of at least 1000, got ${JSON.stringify(text)}`);
  }
  return { leaseTimeoutMs: n };
}

function readInputsJson(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    throw new UsageError("bad_input", `cannot read the inputs file ${file}`, { hint: "check the path given to --inputs-json" });
  }
  try {
    const value = JSON.parse(text) as unknown;
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // fall through to the error below
  }
  throw new UsageError("bad_input", `the inputs file ${file} is not a JSON object`, { hint: 'write it as {"key": value, ...}' });
}
