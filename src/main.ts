/**
 * Binary entry point. The same file serves every role: internal roles
 * (worker pool, intercom broker) are selected by a hidden first argument
 * `--internal-…` when the binary re-executes itself; anything else is the
 * command line.
 */

/**
 * JavaScriptCore's tier-up thresholds, scaled up (Bun.unsafe.setJITPolicy)
 * in every role but the intercom broker. A run's processes execute short
 * bursts of many different functions (a stage's bookkeeping, a replay, IPC
 * messages), rarely one loop hot enough to repay optimizing compilation,
 * which costs CPU on another thread: on 2 CPUs it competes with the stages.
 * Measured with 500 shell stages on the pool (bench/pool.ts): CPU per stage
 * -12 to -14 %, makespan -13 %; a resume's replay of 1,000 steps to its
 * first new step -15 %. Code that does get hot is still optimized, later.
 * The broker is the exception: one long-lived message loop, whose round
 * trips measured 4 to 7 % slower under the scaled policy.
 */
const JIT_POLICY = 30;
const DEFAULT_JIT_ROLES = new Set(["--internal-intercom-broker"]);

/** Internal roles, each loaded only when this process plays it. */
const ROLES: Record<string, () => Promise<(argv: string[]) => Promise<void>>> = {
  "--internal-pool-coordinator": () => import("./pool/coordinator.ts").then((m) => m.coordinatorMain),
  "--internal-workflow-worker": () => import("./pool/worker.ts").then((m) => m.workerMain),
  "--internal-intercom-broker": () => import("./intercom/broker.ts").then((m) => m.brokerMain),
};

// A reader that went away (`atomic runs --json | head`) is not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
}

export {};

const argv = process.argv.slice(2);
const role = argv[0]?.startsWith("--internal-") ? argv[0] : undefined;

if (!role || !DEFAULT_JIT_ROLES.has(role)) Bun.unsafe.setJITPolicy(JIT_POLICY);

if (role) {
  const load = ROLES[role];
  if (!load) {
    process.stderr.write(`error: unknown internal role ${role}.\n`);
    process.exit(2);
  }
  await (await load())(argv.slice(1));
} else {
  const { runCli } = await import("./cli/app.ts");
  process.exit(await runCli(argv));
}
