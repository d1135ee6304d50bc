/**
 * `atomic run FILE [--input k=v ...] [--inputs-json FILE] [--id KEY] [--serve [--port N] [--host H]]`:
 * start a run and drive it to its end. With --serve the status server runs
 * in this process for the run's lifetime (started before the run, so a
 * busy port stops everything before anything is written). With `--id KEY`
 * the start is idempotent (engine/keyed-start.ts): when a run of that id exists
 * already, this command follows it (cli/follow-keyed.ts) instead.
 */

import { defineCommand } from "citty";
import { readFileSync } from "node:fs";
import { RootRun } from "../../engine/driver.ts";
import { parseInputPairs } from "../../engine/inputs.ts";
import { loadWorkflowFile } from "../../engine/loader.ts";
import { BUILTIN_PREFIX } from "../../engine/builtins.ts";
import { checkWorkflows, reportChecks } from "../project/check.ts";
import type { StartedBy } from "../../journal/run-origin.ts";
import { takeEnv } from "../../shared/config/environment.ts";
import { UsageError } from "../../shared/errors.ts";
import { resolveWorkflowArg } from "../../engine/workflow-names.ts";
import { newRunId, parseRunKey, parseRunRef, type RunId } from "../../shared/ids.ts";
import { startOrAttach } from "../../engine/keyed-start.ts";
import { tellStarter } from "../../shared/ready-pipe.ts";
import { followKeyedRun } from "../follow-keyed.ts";
import { driveRun } from "../drive.ts";
import { repeatedFlag } from "../globals.ts";
import { parseTagPairs } from "../../shared/tags.ts";
import { POOL_ARGS, executorOption } from "../pool-options.ts";
import { BUDGET_ARGS, budgetOption, warnIfUnpriced } from "../budget-options.ts";
import { loadConfig } from "../../shared/config/load.ts";
import type { AtomicConfig } from "../../shared/config/schema.ts";
import type { BudgetOptions, WorkflowDefinition } from "../../sdk/types.ts";
import { checkRunner, defaultRunner } from "../../runners/agent-setup.ts";
import { resolveSandbox } from "../../shared/sandbox-option.ts";
import { sandboxProblem } from "../../runners/sandbox/bwrap.ts";
import { session } from "../session.ts";
import { SERVE_ARGS, startCliServer } from "../status-server.ts";
import { createRunView, type RunView } from "../view/run-view.ts";
import type { CliSession } from "../session.ts";
import type { StatusServer } from "../../status/server.ts";
import { exit, out } from "../output.ts";
import { announceDetached, requireService } from "../detach.ts";
import { CONSOLE_VIEW, TUI_ARGS, driveInConsole, requireTerminal } from "../tui-run.ts";

export default defineCommand({
  meta: { name: "run", description: "Run a workflow file" },
  args: {
    file: { type: "positional", description: "workflow file (.ts), the name of one in .atomic/workflows/, or a builtin's name (atomic workflows lists them)", required: true },
    input: { type: "string", description: "an input; repeat the flag for more inputs (an array input takes it several times)" },
    inputsJson: { type: "string", description: "a JSON file with the inputs" },
    tag: { type: "string", valueHint: "KEY=VALUE", description: "tag the run (atomic runs --tag finds it); repeat the flag for more" },
    id: { type: "string", description: "the run's id, chosen by you: a second start with this id gets the existing run (same inputs) or is refused (other inputs)" },
    leaseMs: { type: "string", description: "lease timeout in ms (default 30000)" },
    ...POOL_ARGS,
    ...BUDGET_ARGS,
    detach: { type: "boolean", description: "record the run and leave it to the service (atomic serve), printing its id at once" },
    serve: { type: "boolean", description: "serve the status page while the run runs" },
    check: { type: "boolean", description: "check the workflow first, as atomic check does; start nothing if it fails" },
    ...TUI_ARGS,
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
    if (args.detach && args.serve) {
      throw new UsageError("bad_flag", "--detach and --serve do not go together: a detached run is driven by the service", { hint: "the service's page (atomic serve) shows it" });
    }
    if (args.tui) {
      if (args.detach || args.serve) throw new UsageError("bad_flag", `--tui does not go with --${args.detach ? "detach" : "serve"}`, { hint: "atomic tui shows any run, detached or served" });
      requireTerminal(s, "atomic run --tui");
    }
    const file = resolveWorkflowArg(args.file);
    // Builtins ship checked; a file is checked before anything is recorded (a failed check exits 1).
    if (args.check && !file.startsWith(BUILTIN_PREFIX)) reportChecks(s, (await checkWorkflows([file])).filter((r) => r.errors.length > 0));
    // The worker pool starts with the run's first stage (the stage step asks for it), not here: a run whose
    // steps never use a stage (ctx.tool only) pays for no coordinator and no worker.
    const tags = parseTagPairs(repeatedFlag(s.rawArgs, "tag"));
    const keyed = args.id !== undefined;
    const runId = keyed ? runKeyOption(args.id!) : newRunId();
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
      const config = checkedConfig(s, loaded.definition, budget);
      const journal = await s.journal();
      if (args.detach) await requireService(journal, { name: loaded.definition.name, recover: loaded.definition.recover !== false });
      server = args.serve ? await startCliServer(s, args) : undefined;
      const view = args.tui ? CONSOLE_VIEW : createRunView(s);
      const opts = { journal, home: s.globals.home, observer: view.observer, config, ...lease, executor: choice };
      const req = { definition: loaded.definition, workflowPath: loaded.path, digest: loaded.digest, ...(loaded.code ? { code: loaded.code } : {}), inputs, runId, ...(budget ? { budget } : {}), startedBy: startedByOfThisProcess() };
      if (keyed) {
        const start = await startOrAttach(opts, req);
        if (start.kind === "existing") {
          startedOrRefused();
          tellStarter(); // the run is recorded (by the start that came first)
          view.close();
          // Detached: the existing run is the answer (its id); following it is for a terminal that waits.
          if (args.detach) announceDetached(s, start.run.id);
          else await followKeyedRun(s, start.run);
          return;
        }
        root = start.root;
      } else {
        root = await RootRun.start(opts, req);
      }
      startedOrRefused(); // from here on, Ctrl-C is the run's to handle (driveRun)
      tellStarter(); // the run is recorded: a service that spawned this process waits for that (src/service/spawn-run.ts)
      if (Object.keys(tags).length > 0) await journal.tags.set(root.runId, tags, Date.now());
      if (args.detach) {
        await root.detach();
        announceDetached(s, root.runId);
        return;
      }
      if (server) announce(s, view, server, root.runId);
      if (args.tui) await driveInConsole(s, root);
      else await driveRun(s, root, view);
    } finally {
      startedOrRefused();
      // The page gets the run's last events before the server goes.
      await server?.stop(true);
    }
  },
});

/**
 * The config a new run runs with, once its workflow's runner is checked
 * (before anything is written: a missing key, a missing CLI), with a warning
 * when --max-cost meets a runner that reports no cost.
 */
export function checkedConfig(s: CliSession, definition: WorkflowDefinition, budget: BudgetOptions | undefined): AtomicConfig {
  const { config } = loadConfig({ home: s.globals.home });
  if (definition.runner) {
    const runner = defaultRunner(config, definition.runner);
    const problem = checkRunner(runner, config, definition.model ?? config.model);
    if (problem) throw new UsageError(problem.code, `workflow ${definition.name}: ${problem.message}`, { hint: problem.hint });
  }
  checkSandboxes(definition, config);
  warnIfUnpriced(s, config, definition, budget);
  return config;
}

/**
 * The workflow's and the config's `sandbox`, before the run starts (exit 2, nothing written): a path that does
 * not exist, or a sandbox asked for where bubblewrap cannot make one (a stage's own option is checked when it starts).
 */
function checkSandboxes(definition: WorkflowDefinition, config: AtomicConfig): void {
  for (const setting of [
    { value: definition.sandbox, where: `workflow ${definition.name}` },
    { value: config.sandbox, where: "the config file" },
  ]) {
    const { spec, problem } = resolveSandbox([setting], false);
    if (problem) throw new UsageError("bad_sandbox", problem.message, { hint: problem.hint });
    const unavailable = spec ? sandboxProblem() : undefined;
    if (unavailable) throw new UsageError("bad_sandbox", `${setting.where} asks for a sandbox, but ${unavailable.message}`, { hint: unavailable.hint });
  }
}

function announce(s: CliSession, view: RunView, server: StatusServer, runId: string): void {
  // A login URL: opening it signs the browser in and shows the run's page.
  const url = server.loginUrl(`/runs/${runId}`);
  if (s.globals.json) s.json({ type: "status_server", url, port: server.port });
  else if (s.globals.quiet) out(`status page: ${url}\n`);
  else view.note(`status page: ${url}`);
}

/** `--id KEY`: a caller's run id (shared/ids.ts says which keys can be told from generated ids), or a full generated one. */
export function runKeyOption(text: string): RunId {
  const ref = parseRunRef(text);
  if (ref) return ref;
  const key = parseRunKey(text);
  if ("problem" in key) throw new UsageError("bad_run_id", key.problem, { hint: "for example --id nightly-2026-12-01 or --id order.4711" });
  return key.id;
}

export function leaseOption(text: string | undefined): { leaseTimeoutMs?: number } {
  if (text === undefined) return {};
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1000) {
    throw new UsageError("bad_flag", `--lease-ms must be a whole number of milliseconds of at least 1000, got ${JSON.stringify(text)}`, { hint: "for example --lease-ms 30000 (the default)" });
  }
  return { leaseTimeoutMs: n };
}

export function readInputsJson(file: string): Record<string, unknown> {
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

let startedBy: StartedBy | undefined;
/**
 * How the run this command starts was started (journal/run-origin.ts): the
 * service's ATOMIC_STARTED_BY for the `atomic run` child it spawns (taken
 * from the environment on first use, so nothing this process starts
 * inherits it), else `cli`.
 */
export function startedByOfThisProcess(): StartedBy {
  if (startedBy) return startedBy;
  const given = takeEnv("ATOMIC_STARTED_BY");
  startedBy = given === "api" || given === "schedule" ? given : "cli";
  return startedBy;
}
