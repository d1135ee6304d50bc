/**
 * The status server as the CLI starts it (`atomic serve`, `atomic run
 * --serve`): flags, the warning for an address other machines can reach,
 * and opening a browser.
 */

import { spawn } from "node:child_process";
import { parsePort, startStatusServer, type StatusServer } from "../status/server.ts";
import type { CliSession } from "./session.ts";

export const SERVE_ARGS = {
  port: { type: "string", description: "port to listen on (default 4317; 0 picks a free one)" },
  host: { type: "string", description: "address to listen on (default 127.0.0.1: this machine only)" },
} as const;

export async function startCliServer(s: CliSession, flags: { port?: string | undefined; host?: string | undefined }): Promise<StatusServer> {
  const port = parsePort(flags.port);
  const server = await startStatusServer({
    journal: await s.journal(),
    home: s.globals.home,
    port,
    ...(flags.host !== undefined ? { host: flags.host } : {}),
  });
  if (server.exposed) {
    s.warn(
      `listening on ${server.host}, which other machines may reach: they can read every run's inputs, outputs and logs (pause and cancel still need the token in ${server.tokenPath})`,
    );
  }
  return server;
}

/** Opens `url` in the desktop's browser; a machine without one gets a warning, not an error. */
export function openBrowser(s: CliSession, url: string): void {
  const cmd = process.platform === "darwin" ? "open" : process.platform === "win32" ? "explorer" : "xdg-open";
  if (!Bun.which(cmd)) {
    s.warn(`cannot open a browser here (no ${cmd}); open ${url} yourself`);
    return;
  }
  try {
    const child = spawn(cmd, [url], { detached: true, stdio: "ignore" });
    child.on("error", () => s.warn(`could not open a browser; open ${url} yourself`));
    child.unref();
  } catch {
    s.warn(`could not open a browser; open ${url} yourself`);
  }
}

/** Resolves on the first SIGINT or SIGTERM. */
export function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const done = (sig: NodeJS.Signals) => {
      process.off("SIGINT", done);
      process.off("SIGTERM", done);
      resolve(sig);
    };
    process.on("SIGINT", done);
    process.on("SIGTERM", done);
  });
}
