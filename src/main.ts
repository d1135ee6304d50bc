/**
 * Binary entry point. The same file serves every role: internal roles
 * (worker pool, intercom broker) are selected by a hidden first argument
 * `--internal-…` when the binary re-executes itself; anything else is the
 * command line.
 */

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
