/**
 * The provider network of a sandboxed stage, the side inside the sandbox
 * (internal role `--internal-sandbox-net`): the stage's network namespace
 * has only its own loopback, so this process listens there and forwards
 * each connection to a Unix socket of provider-gate.ts outside — the
 * proxy on PROXY_PORT, each tunnelled loopback endpoint on its own port —
 * then runs the stage's command and exits with its status. It listens
 * before the command starts, so the stage never races it.
 *
 * Arguments: `SOCKET_DIR PROXY_PORT PORT,PORT,… -- COMMAND…`.
 */

import { spawn } from "node:child_process";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { writeStderr } from "../../shared/raw-stderr.ts";

export async function netInitMain(argv: string[]): Promise<void> {
  const sep = argv.indexOf("--");
  const [dir, proxyPort, ports] = argv.slice(0, sep);
  const command = argv.slice(sep + 1);
  if (sep < 0 || !dir || !proxyPort || command.length === 0) {
    writeStderr("atomic sandbox: bad arguments for the network helper\n");
    process.exit(2);
  }
  const forwards: [number, string][] = [[Number(proxyPort), join(dir, "proxy.sock")]];
  for (const p of (ports ?? "").split(",").filter(Boolean)) forwards.push([Number(p), join(dir, `tcp-${p}.sock`)]);
  await Promise.all(
    forwards.map(
      ([port, path]) =>
        new Promise<void>((resolve, reject) => {
          const server = createServer((client) => {
            const upstream = connect(path);
            upstream.on("error", () => client.destroy());
            client.on("error", () => upstream.destroy());
            client.pipe(upstream);
            upstream.pipe(client);
          });
          server.once("error", reject);
          server.listen(port, "127.0.0.1", () => {
            server.unref();
            resolve();
          });
        }),
    ),
  );
  const child = spawn(command[0]!, command.slice(1), { stdio: "inherit" });
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, () => child.kill(sig));
  child.on("error", (e) => {
    writeStderr(`atomic sandbox: ${command[0]}: ${e.message}\n`);
    process.exit(127);
  });
  child.on("exit", (code, signal) => process.exit(code ?? 128 + (signal ? signalNumber(signal) : 0)));
}

function signalNumber(signal: NodeJS.Signals): number {
  const table: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
  return table[signal] ?? 0;
}
