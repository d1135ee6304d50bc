/**
 * Binary entry point. The same file serves every role: internal roles
 * (worker pool, intercom broker) are selected by a hidden first argument
 * `--internal-…` when the binary re-executes itself; anything else is the
 * command line.
 */

import { runCli } from "./cli/app.ts";

// A reader that went away (`atomic runs --json | head`) is not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
}

const argv = process.argv.slice(2);
const role = argv[0]?.startsWith("--internal-") ? argv[0] : undefined;

if (role) {
  process.stderr.write(`error: unknown internal role ${role}.\n`);
  process.exit(2);
} else {
  const code = await runCli(argv);
  process.exit(code);
}
