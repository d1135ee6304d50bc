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

/**
 * What each role loads: a module of its own, imported by a specifier the
 * bundler cannot see, so each is a separate entry point of the binary
 * (scripts/build.ts lists them; the same relative paths resolve inside it)
 * and this file stays a few lines long. A role then loads its own code
 * only: starting the binary costs about 10 ms of CPU per process when it
 * holds the whole 1.2 MB bundle, most of it in loading that bundle, and a
 * run starts up to six processes at once (root, coordinator, workers).
 */
export const ENTRY_MODULES = {
  cli: "./cli/app.ts",
  "--internal-pool-coordinator": "./pool/coordinator.ts",
  "--internal-workflow-worker": "./pool/worker.ts",
  "--internal-intercom-broker": "./intercom/broker.ts",
} as const;

type RoleName = Exclude<keyof typeof ENTRY_MODULES, "cli">;
const ROLE_MAIN: Record<RoleName, string> = {
  "--internal-pool-coordinator": "coordinatorMain",
  "--internal-workflow-worker": "workerMain",
  "--internal-intercom-broker": "brokerMain",
};

async function load(name: keyof typeof ENTRY_MODULES): Promise<Record<string, unknown>> {
  const specifier: string = ENTRY_MODULES[name];
  return (await import(specifier)) as Record<string, unknown>;
}

const argv = process.argv.slice(2);
const role = argv[0]?.startsWith("--internal-") ? argv[0] : undefined;

if (!role || !DEFAULT_JIT_ROLES.has(role)) Bun.unsafe.setJITPolicy(JIT_POLICY);

if (role) {
  // Internal roles never touch process.stdout or process.stderr (see shared/raw-stderr.ts); they log
  // through writeStderr. An unknown role gets its line the same way (fd 2, no stream).
  if (!(role in ROLE_MAIN)) {
    await Bun.write(Bun.stderr, `error: unknown internal role ${role}.\n`);
    process.exit(2);
  }
  const name = role as RoleName;
  const main = (await load(name))[ROLE_MAIN[name]] as (argv: string[]) => Promise<void>;
  await main(argv.slice(1));
} else {
  // A reader that went away (`atomic runs --json | head`) is not an error.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "EPIPE") process.exit(0);
      throw err;
    });
  }
  const { runCli } = (await load("cli")) as typeof import("./cli/app.ts");
  process.exit(await runCli(argv));
}
