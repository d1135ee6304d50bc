/**
 * The status server as the CLI starts it (`atomic serve`, `atomic run
 * --serve`): flags, the warning for an address other machines can reach,
 * and opening a browser.
 *
 * The browser is opened on a small redirect file (0600, in the home) that
 * forwards to the login URL, never on the login URL itself: a command
 * line is readable by every user of the machine (/proc/<pid>/cmdline), and
 * the login URL carries the token. Jupyter does the same.
 */

import { spawn } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parsePort, startStatusServer, type StatusServer } from "../status/server.ts";
import type { CliSession } from "./session.ts";
import type { RunStarting } from "../status/app.ts";

export const SERVE_ARGS = {
  port: { type: "string", description: "port to listen on (default 4317; 0 picks a free one)" },
  host: { type: "string", description: "address to listen on (default 127.0.0.1: this machine only)" },
} as const;

export async function startCliServer(
  s: CliSession,
  flags: { port?: string | undefined; host?: string | undefined },
  /** The service's run starter (POST /api/runs); `run --serve` has none. */
  starter?: RunStarting,
): Promise<StatusServer> {
  const port = parsePort(flags.port);
  const server = await startStatusServer({
    journal: await s.journal(),
    home: s.globals.home,
    port,
    ...(flags.host !== undefined ? { host: flags.host } : {}),
    ...(starter ? { starter } : {}),
  });
  if (server.exposed) {
    s.warn(
      `listening on ${server.host}, which other machines may reach: the connection is not encrypted, so whoever sees the login URL, the session cookie or the token in ${server.tokenPath} on the network can read and control every run`,
    );
  }
  return server;
}

/** Opens the login URL in the desktop's browser, through a redirect file (the token stays out of argv). */
export function openLoginInBrowser(s: CliSession, server: StatusServer): void {
  const file = join(s.globals.home, `status-open-${server.port}.html`);
  const target = server.loginUrl("/").replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
  try {
    writeFileSync(file, `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=${target}"><title>atomic</title><a href="${target}">open the atomic status page</a>\n`, { mode: 0o600 });
    chmodSync(file, 0o600);
  } catch (err) {
    s.warn(`cannot write ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)}); open the login URL above yourself`);
    return;
  }
  openBrowser(s, `file://${file}`);
}

/** Opens `url` in the desktop's browser; a machine without one gets a warning, not an error. */
function openBrowser(s: CliSession, url: string): void {
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
