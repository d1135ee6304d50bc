/**
 * Finding the broker of a home, starting it when none answers.
 *
 * `connectBroker(home, { spawn: true })`: connect; if nothing answers,
 * take the spawn lock, check once more, start the broker detached
 * (re-executing this binary with `--internal-intercom-broker`, stdout and
 * stderr to broker.log) and wait until it answers; without the lock, wait
 * for whoever holds it. So processes racing to start it end with one
 * broker (and the broker itself exits when it finds another answering).
 * No broker is started for a home that no longer exists (removed while a
 * reconnecting client ran): its directory is not made again.
 *
 * From source (`bun src/main.ts`, tests) the binary is bun and the entry
 * file must follow; compiled, `process.execPath` is atomic itself.
 */

import { spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, statSync, truncateSync } from "node:fs";
import { AtomicError } from "../shared/errors.ts";
import { Link, unavailable, type LinkHandlers } from "./link.ts";
import { ensurePrivateDirs, intercomPaths, type IntercomPaths } from "./paths.ts";
import { tryLock, unlock } from "./spawn-lock.ts";
import { ROLE, selfCommand } from "../shared/self-exec.ts";
import { PROCESS_MARKERS } from "../shared/run-processes.ts";
import { childEnv } from "../shared/config/environment.ts";
import { loadConfig } from "../shared/config/load.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";

export const BROKER_ROLE = ROLE.broker;
/**
 * How often a starter tries the broker's socket while the broker comes up: neither the broker (detached, its
 * output in broker.log) nor another starter holding the spawn lock tells anyone when it listens, so the tries
 * back off, from 5 ms (a broker listens within some tens of ms) to at most every 100 ms, up to
 * timeouts.brokerStartMs (docs/design/processes.md "Waiting for another process").
 */
const START_BACKOFF: Backoff = { firstMs: 5, maxMs: 100, jitter: 0.2 };
const MAX_LOG_BYTES = 1024 * 1024;

/** The command that starts a broker for `home` (this binary, or bun + the entry file from source). */
/** The broker's command line: its home goes through ATOMIC_HOME, not argv (self-exec.ts). */
export function brokerCommand(): string[] {
  return selfCommand(ROLE.broker);
}

/** True when a broker answers hello at `socket`. */
export async function probeBroker(socket: string): Promise<boolean> {
  try {
    const link = await Link.open(socket, "probe", {}, 2_000);
    link.close();
    return true;
  } catch {
    return false;
  }
}

export interface ConnectOptions {
  /** Start the broker when none answers (default true). */
  spawn?: boolean;
  role?: string;
  handlers?: LinkHandlers;
}

/** A link to the home's broker, started on demand. Throws intercom_unavailable when it cannot be had. */
export async function connectBroker(home: string, opts: ConnectOptions = {}): Promise<Link> {
  const paths = intercomPaths(home);
  const role = opts.role ?? "client";
  try {
    return await Link.open(paths.socket, role, opts.handlers);
  } catch (err) {
    if (opts.spawn === false) throw err;
  }
  // A home removed under a running process (a reconnecting client of `serve`'s page, `attach` or a worker host's
  // relays whose broker left with the home) is not made again just to hold a broker nobody else will use.
  if (!existsSync(home)) throw unavailable(`the home ${home} no longer exists, so no intercom broker is started for it`);
  ensurePrivateDirs(paths);
  // How long a starter waits for a broker to answer: the config's timeouts.brokerStartMs (read only when one must start).
  const startTimeoutMs = loadConfig({ home }).config.timeouts?.brokerStartMs ?? CONFIG_DEFAULTS.timeouts.brokerStartMs;
  const deadline = Date.now() + startTimeoutMs;
  let spawned: { pid: number; exited: () => boolean } | undefined;
  let look = 0;
  for (;;) {
    const lock = tryLock(paths.lockFile);
    if (lock) {
      try {
        const again = await Link.open(paths.socket, role, opts.handlers).catch(() => undefined);
        if (again) return again;
        spawned ??= startBroker(paths, home);
        while (Date.now() < deadline) {
          const link = await Link.open(paths.socket, role, opts.handlers).catch(() => undefined);
          if (link) return link;
          if (spawned.exited()) break;
          await Bun.sleep(backoffDelay(START_BACKOFF, look++));
        }
      } finally {
        unlock(lock);
      }
      throw unavailable(`the intercom broker did not start${spawned?.exited() ? " (it exited)" : ` within ${startTimeoutMs} ms`}; its log: ${paths.logFile}${logTail(paths.logFile)}`);
    }
    // Someone else is starting it: wait for it to answer, or for the lock to go (then try ourselves).
    const link = await Link.open(paths.socket, role, opts.handlers).catch(() => undefined);
    if (link) return link;
    if (Date.now() > deadline) throw unavailable(`the intercom broker did not start within ${startTimeoutMs} ms; its log: ${paths.logFile}${logTail(paths.logFile)}`);
    await Bun.sleep(backoffDelay(START_BACKOFF, look++));
  }
}

/** Starts a detached broker writing to broker.log; the caller waits for it to answer. */
function startBroker(paths: IntercomPaths, home: string): { pid: number; exited: () => boolean } {
  try {
    if (statSync(paths.logFile).size > MAX_LOG_BYTES) truncateSync(paths.logFile, 0);
  } catch {
    // no log yet
  }
  const log = openSync(paths.logFile, "a", 0o600);
  // The broker serves every run: it must not look like a process of the run (or the stage) that happened to start it.
  const env = childEnv({ ATOMIC_HOME: home }, (k) => k === "ATOMIC_FAULT_POINTS" || PROCESS_MARKERS.includes(k));
  const [cmd, ...args] = brokerCommand();
  let exited = false;
  try {
    const child = spawn(cmd!, args, { detached: true, stdio: ["ignore", log, log], env, cwd: paths.dir });
    child.on("exit", () => (exited = true));
    child.on("error", () => (exited = true));
    child.unref();
    return { pid: child.pid ?? 0, exited: () => exited };
  } catch (err) {
    throw new AtomicError("intercom_unavailable", `could not start the intercom broker (${(err as Error).message})`, "retryable", { cause: err });
  } finally {
    closeSync(log);
  }
}

function logTail(file: string): string {
  try {
    const text = readFileSync(file, "utf8").trim().split("\n").slice(-3).join(" | ");
    return text ? ` (last lines: ${text.slice(-600)})` : "";
  } catch {
    return "";
  }
}

/** The broker's pid from its pid file (undefined when none runs or the file is gone). */
export function brokerPid(home: string): number | undefined {
  try {
    const pid = (JSON.parse(readFileSync(intercomPaths(home).pidFile, "utf8")) as { pid?: unknown }).pid;
    return typeof pid === "number" ? pid : undefined;
  } catch {
    return undefined;
  }
}
