/**
 * `atomic serve [--port 4317] [--host 127.0.0.1] [--open] [--no-recover] [--no-schedules] [--max-runs N]
 * [--workers N] [--work-lease-ms MS] [--lease-ms MS]`: the local service: the status page and API, and the
 * service's duties (src/service/: recovery and waking of runs, schedules) until SIGTERM or Ctrl-C. Stopping
 * ends the drives it started resumably, then the server. `--workers`, `--work-lease-ms` and `--lease-ms` are
 * handed to every drive it starts (`atomic resume`'s flags, checked here first): `--workers 0` leaves a
 * drive's stages to worker hosts; a run lease longer than a database outage lets a drive ride it out instead
 * of stopping, and a work lease longer than it lets the drive's own workers keep their stages instead of
 * stopping them to run again (docs/guides/durability.md).
 * Runs posted to `POST /api/runs` are started by service/run-starter.ts.
 */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { SERVICE_DUTIES } from "../../service/duties.ts";
import { DEFAULT_MAX_RUNS } from "../../service/recovery.ts";
import { Service, type ServiceLogEvent } from "../../service/service.ts";
import { Operator } from "../../service/operator.ts";
import { session, type CliSession } from "../session.ts";
import { SERVE_ARGS, openLoginInBrowser, startCliServer, untilSignal } from "../status-server.ts";
import { SERVICE_POOL_ARGS, driveFlags, executorOption } from "../pool-options.ts";
import { leaseOption } from "./run.ts";

export default defineCommand({
  meta: { name: "serve", description: "Serve the status page, JSON API and event streams, and recover, wake and run runs as the local service" },
  args: {
    ...SERVE_ARGS,
    open: { type: "boolean", description: "open the page in a browser" },
    recover: { type: "boolean", default: true, description: "resume crashed runs and wake answered, sleeping and budget-raised ones (--no-recover: only serve the page)" },
    schedules: { type: "boolean", default: true, description: "run schedules (--no-schedules: do not)" },
    maxRuns: { type: "string", description: `how many runs the service drives at once (default ${DEFAULT_MAX_RUNS})` },
    ...SERVICE_POOL_ARGS,
    leaseMs: { type: "string", description: "the run lease of each run the service drives, in ms (default 30000)" },
  },
  async run({ args }) {
    const s = session();
    const maxRuns = parseMaxRuns(args.maxRuns);
    // Checked as the drives' `atomic resume` checks them, so a bad value is refused here and not in every drive.
    executorOption(s, { workers: args.workers, workLeaseMs: args.workLeaseMs });
    leaseOption(args.leaseMs);
    const driveArgs = [...driveFlags(args), ...(args.leaseMs !== undefined ? ["--lease-ms", args.leaseMs.trim()] : [])];
    // Listen for Ctrl-C before the URL is printed: whoever reads it may stop us at once.
    const stopRequested = untilSignal();
    const journal = await s.journal();
    // Starts, resumes, reruns and forks for the API and the page: the actions `atomic mcp` takes too.
    const starter = new Operator({ journal, home: s.globals.home, cwd: process.cwd(), journalUrl: s.globals.journal, recover: args.recover !== false });
    const server = await startCliServer(s, args, starter);
    const service = new Service(
      {
        journal,
        home: s.globals.home,
        journalUrl: s.globals.journal,
        durability: s.globals.durability,
        recover: args.recover !== false,
        schedules: args.schedules !== false,
        maxRuns,
        driveArgs,
        log: (event) => logLine(s, event),
      },
      SERVICE_DUTIES,
    );
    server.source.service = service;
    if (s.globals.json) {
      s.json({ type: "serving", url: server.url, loginUrl: server.loginUrl(), host: server.host, port: server.port, tokenFile: server.tokenPath, duties: service.dutyNames() });
    } else {
      // The login URL signs a browser in (a session cookie); keep it to yourself like a password.
      s.result(`status page: ${server.loginUrl()}`);
      s.info(s.style.dim(`open the link above to sign in · JSON API under ${server.url}api/ with Authorization: Bearer <the token in ${server.tokenPath}> · Ctrl-C stops`));
    }
    service.start();
    if (args.open) openLoginInBrowser(s, server);
    const signal = await stopRequested;
    logLine(s, { type: "stopping", message: `${signal}: stopping; the runs this service drives stop resumably` });
    await service.stop();
    await server.stop();
    if (s.globals.json) s.json({ type: "stopped", signal });
    else s.info("service and status server stopped");
  },
});

function parseMaxRuns(text: string | undefined): number {
  if (text === undefined) return DEFAULT_MAX_RUNS;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 1000) {
    throw new UsageError("bad_flag", `--max-runs must be a whole number from 1 to 1000, got ${JSON.stringify(text)}`, {
      hint: `the default is ${DEFAULT_MAX_RUNS}`,
    });
  }
  return n;
}

/** The service's log: NDJSON with --json, else a line with the time (on stdout; its problems as warnings on stderr). */
function logLine(s: CliSession, event: ServiceLogEvent): void {
  if (s.globals.json) s.json({ ...event, at: Date.now() });
  else if (event.type === "service_error") s.warn(event.message);
  else s.info(`${s.style.dim(new Date().toISOString())} ${event.message}`);
}
