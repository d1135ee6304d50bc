/**
 * `atomic serve [--port 4317] [--host 127.0.0.1] [--open] [--no-schedules]`: the status page and API until
 * Ctrl-C, and the service's duties: starting runs posted to `POST /api/runs` (service/run-starter.ts) and
 * the schedules (service/scheduler.ts).
 */

import { defineCommand } from "citty";
import { session } from "../session.ts";
import { SERVE_ARGS, openLoginInBrowser, startCliServer, untilSignal } from "../status-server.ts";
import { RunStarter } from "../../service/run-starter.ts";
import { journalScheduler, type SchedulerEvent } from "../../service/scheduler.ts";
import type { CliSession } from "../session.ts";

export default defineCommand({
  meta: { name: "serve", description: "Serve the status page, JSON API and event streams" },
  args: {
    ...SERVE_ARGS,
    open: { type: "boolean", description: "open the page in a browser" },
    schedules: { type: "boolean", default: true, description: "run the schedules (atomic schedule); --no-schedules leaves them to another service" },
  },
  async run({ args }) {
    const s = session();
    // Listen for Ctrl-C before the URL is printed: whoever reads it may stop us at once.
    const stopRequested = untilSignal();
    const journal = await s.journal();
    const journalUrl = s.globals.journal;
    const starter = new RunStarter({ journal, home: s.globals.home, cwd: process.cwd(), ...(journalUrl ? { journalUrl } : {}) });
    const server = await startCliServer(s, args, starter);
    const scheduler = args.schedules ? journalScheduler({ journal, home: s.globals.home, ...(journalUrl ? { journalUrl } : {}), onEvent: (e) => reportTick(s, e) }) : undefined;
    scheduler?.start();
    if (s.globals.json) {
      s.json({ type: "serving", url: server.url, loginUrl: server.loginUrl(), host: server.host, port: server.port, tokenFile: server.tokenPath });
    } else {
      // The login URL signs a browser in (a session cookie); keep it to yourself like a password.
      s.result(`status page: ${server.loginUrl()}`);
      s.info(s.style.dim(`open the link above to sign in · JSON API under ${server.url}api/ with Authorization: Bearer <the token in ${server.tokenPath}> · Ctrl-C stops`));
    }
    if (args.open) openLoginInBrowser(s, server);
    const signal = await stopRequested;
    await scheduler?.stop();
    await server.stop();
    if (s.globals.json) s.json({ type: "stopped", signal });
    else s.info("status server stopped");
  },
});

/** One line per schedule decision on the service's output (NDJSON with --json). */
function reportTick(s: CliSession, e: SchedulerEvent): void {
  if (s.globals.json) {
    s.json({ ...e, type: `schedule_${e.type}` });
    return;
  }
  const at = "tickAt" in e ? ` tick ${new Date(e.tickAt).toISOString()}` : "";
  if (e.type === "started") s.info(`schedule ${e.schedule}:${at} started run ${e.runId}${e.buffered ? " (buffered)" : ""}${e.repaired ? " (again: its start was not recorded)" : ""}`);
  else if (e.type === "skipped") s.info(`schedule ${e.schedule}:${at} skipped (${e.reason === "overlap" ? "its last run still runs" : "missed while no service ran"})`);
  else if (e.type === "buffered") s.info(`schedule ${e.schedule}:${at} kept until its last run ends`);
  else s.warn(`schedule ${e.schedule}: ${e.message}`);
}
