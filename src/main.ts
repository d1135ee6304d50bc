/**
 * Binary entry point. The same file serves every role: internal roles
 * (worker pool, intercom broker) are selected by a hidden first argument
 * `--internal-…` when the binary re-executes itself; anything else is the
 * command line.
 */

import { importEntry, type EntryPoint } from "./shared/entry-points.ts";
import { makeNonDumpable } from "./shared/non-dumpable.ts";
import { writeStderr } from "./shared/raw-stderr.ts";
import { enterPrivateUmask } from "./shared/private-files.ts";

// Before anything can create a file: what atomic writes is its user's alone (shared/private-files.ts).
enterPrivateUmask();

/**
 * JavaScriptCore's tier-up thresholds, scaled up (Bun.unsafe.setJITPolicy)
 * in every role but the intercom broker. A run's processes execute short
 * bursts of many different functions (a stage's bookkeeping, a replay, IPC
 * messages), rarely one loop hot enough to repay optimizing compilation,
 * which costs CPU on another thread: on 2 CPUs it competes with the stages.
 * Kept (issue 25) on an agent-shaped measurement: 200 openai agent stages
 * on 4 workers against a fake provider answering in 300-800 ms, whole
 * `atomic run` process tree, interleaved pairs on a shared 2-CPU machine:
 * without the policy the run's CPU was 1.25x at load 40-100 (4 pairs, each
 * 1.10-1.41x; wall time 1.16x, 0.82-1.52x) and 1.31x at load about 13
 * (4 pairs, each 1.14-1.64x; wall time the same, 28.7 s against 27.7 s
 * ideal): the CPU is what the other processes of a busy host feel, the
 * run's own makespan only when the host is short of CPU. Code that does
 * get hot is still optimized, later. The broker is the exception: one
 * long-lived message loop, whose round trips measured 4 to 7 % slower
 * under the scaled policy.
 */
const JIT_POLICY = 30;
const DEFAULT_JIT_ROLES = new Set(["--internal-intercom-broker"]);

/** Each role's module, a bundle of its own (shared/entry-points.ts), and the function it starts with. */
const ROLES: Record<string, { entry: EntryPoint; main: string }> = {
  "--internal-pool-coordinator": { entry: "pool/coordinator.ts", main: "coordinatorMain" },
  "--internal-workflow-worker": { entry: "pool/worker.ts", main: "workerMain" },
  "--internal-intercom-broker": { entry: "intercom/broker.ts", main: "brokerMain" },
  "--internal-sandbox-net": { entry: "runners/sandbox/net-init.ts", main: "netInitMain" },
  "--internal-stage-mcp": { entry: "pool/stage-mcp.ts", main: "stageMcpMain" },
  "--internal-stage-tool": { entry: "pool/stage-tool-call.ts", main: "stageToolCallMain" },
  "--internal-capture-page": { entry: "sdk/capture-role.ts", main: "capturePageMain" },
};

// Before anything else: no other process of this user may read this one's environment or memory
// (shared/non-dumpable.ts). An internal role's stderr is its log file; the CLI's is the terminal.
const notDumpable = makeNonDumpable();
if (notDumpable) writeStderr(`warning: ${notDumpable}\n`);

const argv = process.argv.slice(2);
const role = argv[0]?.startsWith("--internal-") ? argv[0] : undefined;

if (!role || !DEFAULT_JIT_ROLES.has(role)) Bun.unsafe.setJITPolicy(JIT_POLICY);

if (role) {
  // Internal roles never touch process.stdout or process.stderr (see shared/raw-stderr.ts); they log
  // through writeStderr, and so does this refusal.
  const known = ROLES[role];
  if (!known) {
    writeStderr(`error: unknown internal role ${role}.\n`);
    process.exit(2);
  }
  const main = (await importEntry(known.entry))[known.main] as (argv: string[]) => Promise<void>;
  await main(argv.slice(1));
} else {
  // The command line writes and exits through cli/output.ts (a slow reader gets every byte; a reader
  // that went away ends the command quietly).
  const { cliMain } = (await importEntry("cli/app.ts")) as typeof import("./cli/app.ts");
  await cliMain(argv);
}
