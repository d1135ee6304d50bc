/**
 * Starting and stopping the status server: the Hono app on Bun.serve.
 *
 * Bun.serve closes a connection idle for 10 s by default, which would cut
 * quiet event streams: the server's idle timeout is raised, each stream
 * request turns it off for its own connection before anything else runs
 * (app.ts, noIdleTimeout: Bun's timer sweeps every 4 s and would otherwise
 * cut a stream whose opening is slow), and streams send a heartbeat comment
 * every few seconds anyway (for proxies in between).
 *
 * The `/metrics` instruments also go out over OTLP when the OpenTelemetry
 * variables ask for it (./otlp-metrics.ts).
 *
 * Stopping: the OTLP metrics send their last values, event streams end
 * (with `drain`, after the journal's latest events went out), then the
 * listener closes.
 */

import type { Journal } from "../journal/journal.ts";
import { UsageError } from "../shared/errors.ts";
import { createStatusApp, type RunStarting } from "./app.ts";
import { journalControl } from "./control.ts";
import { addSecret } from "../shared/secrets.ts";
import { HostPolicy, isLoopbackHost, loadOrCreateToken } from "./security.ts";
import { StatusSource } from "./source.ts";
import { artifactStoreFor } from "../artifacts/select.ts";
import { loadConfig } from "../shared/config/load.ts";
import type { StreamOptions } from "./stream-hub.ts";
import { startOtlpMetrics } from "./otlp-metrics.ts";

export const DEFAULT_PORT = 4317;
export const DEFAULT_HOST = "127.0.0.1";
const IDLE_TIMEOUT_S = 60;

export interface StatusServerOptions {
  journal: Journal;
  home: string;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Each option given replaces its own default only (StatusSource merges them with DEFAULT_STREAM_OPTIONS). */
  stream?: Partial<StreamOptions>;
  /** Seconds before Bun closes an idle connection (event streams are exempt). */
  idleTimeoutS?: number;
  /** Starts runs posted to `POST /api/runs` (the service has one; without it the route answers 501). */
  starter?: RunStarting;
}

export interface StatusServer {
  /** The page's address, e.g. http://127.0.0.1:4317/ (it needs a session or the token). */
  url: string;
  /** A login URL: the page at `path` with the token, which signs the browser in (auth.ts). */
  loginUrl(path?: string): string;
  host: string;
  port: number;
  tokenPath: string;
  /** The server listens on an address other machines can reach. */
  exposed: boolean;
  source: StatusSource;
  /** Stop serving; with `drain` the open streams get the journal's latest events first. */
  stop(drain?: boolean): Promise<void>;
}

/** Parses a --port value: a whole number from 0 to 65535 (0 picks a free port). */
export function parsePort(text: string | undefined): number {
  if (text === undefined) return DEFAULT_PORT;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isInteger(n) || n < 0 || n > 65535) {
    throw new UsageError("bad_flag", `--port must be a whole number from 0 to 65535, got ${JSON.stringify(text)}`, {
      hint: "use --port 0 to pick a free port",
    });
  }
  return n;
}

export async function startStatusServer(opts: StatusServerOptions): Promise<StatusServer> {
  const host = (opts.host ?? DEFAULT_HOST).trim();
  if (!host) throw new UsageError("bad_flag", "--host needs an address", { hint: `the default is ${DEFAULT_HOST}` });
  const port = opts.port ?? DEFAULT_PORT;
  const { token, path: tokenPath } = loadOrCreateToken(opts.home);
  addSecret(token); // redacted from what this process logs and prints (shared/secrets.ts)
  // Stages that ran on worker hosts: their files in the artifact store (artifacts/select.ts).
  const { config } = loadConfig({ home: opts.home });
  const artifacts = artifactStoreFor(opts.journal, config);
  const source = new StatusSource(opts.journal, { ...(opts.stream ? { stream: opts.stream } : {}), artifacts, home: opts.home });
  const control = journalControl(opts.journal, { home: opts.home });
  let app: ReturnType<typeof createStatusApp> | undefined;
  let server: ReturnType<typeof Bun.serve>;
  try {
    server = Bun.serve({
      hostname: host,
      port,
      idleTimeout: opts.idleTimeoutS ?? IDLE_TIMEOUT_S,
      fetch: (req, srv) => app!.fetch(req, srv),
      // Never Bun's own error page (it shows source lines): the app answers its errors, this is the last net.
      error: (err) => {
        process.stderr.write(`status server: ${err.stack ?? err.message}\n`);
        return Response.json({ error: { code: "internal", message: "internal error", hint: "this is a bug in atomic; the server's stderr has the details" } }, { status: 500 });
      },
    });
  } catch (err) {
    throw listenError(err, host, port);
  }
  const bound = server.port ?? port;
  const hosts = new HostPolicy(host, bound);
  app = createStatusApp({ source, control, token, hosts, ...(opts.starter ? { starter: opts.starter } : {}) });
  // The same metrics over OTLP, when the OTEL_* variables (or the config's telemetry) ask for them.
  const otlp = await startOtlpMetrics(source.metrics, config.telemetry);
  let stopped: Promise<void> | undefined;
  return {
    url: hosts.url("/"),
    loginUrl: (path = "/") => hosts.url(`${path}?token=${token}`),
    host,
    port: bound,
    tokenPath,
    exposed: !isLoopbackHost(host.replace(/^\[|\]$/g, "")),
    source,
    stop(drain = false) {
      stopped ??= (async () => {
        await otlp?.stop();
        await source.close(drain);
        await server.stop(true);
      })();
      return stopped;
    },
  };
}

function listenError(err: unknown, host: string, port: number): Error {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "EADDRINUSE") {
    return new UsageError("port_in_use", `port ${port} on ${host} is already in use`, {
      hint: "is another atomic serve running? choose another port with --port, or --port 0 for a free one",
      cause: err,
    });
  }
  if (code === "EACCES" || code === "EPERM") {
    return new UsageError("port_denied", `not allowed to listen on port ${port} of ${host}`, {
      hint: "ports below 1024 need privileges; choose another with --port",
      cause: err,
    });
  }
  if (code === "EADDRNOTAVAIL" || code === "EINVAL" || code === "ENOTFOUND") {
    return new UsageError("bad_host", `cannot listen on ${host}: it is not an address of this machine`, {
      hint: `use --host ${DEFAULT_HOST} (the default), or an address this machine has`,
      cause: err,
    });
  }
  return err instanceof Error ? err : new Error(String(err));
}
