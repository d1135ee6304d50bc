/**
 * Where the broker of an atomic home lives: `$ATOMIC_HOME/intercom/`
 * (0700), holding the socket `broker.sock` (0600), the pid file
 * `broker.pid`, the log `broker.log` and the spawn lock `spawn.lock`.
 *
 * A unix socket path is limited to 107 bytes. When the home is too deep for
 * that, the socket goes to the user's runtime directory
 * (shared/runtime-dir.ts: `$XDG_RUNTIME_DIR/atomic/intercom/`, checked like
 * the intercom directory), named by a digest of the intercom directory, so
 * each home still has its own broker; never to a shared temp directory,
 * where another user could take the name first. When that is too long as
 * well, the broker cannot start, and says why.
 */

import { join } from "node:path";
import { AtomicError } from "../shared/errors.ts";
import { ensurePrivateDir, runtimeDir } from "../shared/runtime-dir.ts";

const SOCKET_PATH_LIMIT = 100;

export interface IntercomPaths {
  dir: string;
  socket: string;
  pidFile: string;
  logFile: string;
  lockFile: string;
}

export function intercomPaths(home: string): IntercomPaths {
  const dir = join(home, "intercom");
  let socket = join(dir, "broker.sock");
  if (Buffer.byteLength(socket) > SOCKET_PATH_LIMIT) {
    const digest = new Bun.CryptoHasher("sha256").update(dir).digest("hex").slice(0, 24);
    socket = join(runtimeDir(home), "intercom", `${digest}.sock`);
  }
  return {
    dir,
    socket,
    pidFile: join(dir, "broker.pid"),
    logFile: join(dir, "broker.log"),
    lockFile: join(dir, "spawn.lock"),
  };
}

/** Creates the intercom directory (and the socket's, if elsewhere) readable by this user only, and checks them. */
export function ensurePrivateDirs(paths: IntercomPaths): void {
  const hint = "check that --home (ATOMIC_HOME) is a writable directory of yours";
  if (Buffer.byteLength(paths.socket) > SOCKET_PATH_LIMIT) {
    throw new AtomicError("intercom_unavailable", `the broker's socket path ${paths.socket} is longer than a unix socket allows`, "retryable", {
      hint: "set XDG_RUNTIME_DIR to a private directory of yours (mode 0700), or choose a shorter --home",
    });
  }
  for (const dir of new Set([paths.dir, join(paths.socket, "..")])) {
    try {
      ensurePrivateDir(dir, "the intercom directory");
    } catch (err) {
      throw new AtomicError("intercom_unavailable", (err as Error).message, "retryable", { hint, cause: err });
    }
  }
}
