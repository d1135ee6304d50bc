/**
 * Where the broker of an atomic home lives: `$ATOMIC_HOME/intercom/`
 * (0700), holding the socket `broker.sock` (0600), the pid file
 * `broker.pid`, the log `broker.log` and the spawn lock `spawn.lock`.
 *
 * A unix socket path is limited to 107 bytes. When the home is too deep for
 * that, the socket goes to a private directory of this user under the
 * system temp directory (0700), named by a digest of the intercom
 * directory, so each home still has its own broker.
 */

import { chmodSync, lstatSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AtomicError } from "../shared/errors.ts";

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
    const uid = process.getuid?.() ?? 0;
    const digest = new Bun.CryptoHasher("sha256").update(dir).digest("hex").slice(0, 24);
    socket = join(tmpdir(), `atomic-intercom-${uid}`, `${digest}.sock`);
  }
  return {
    dir,
    socket,
    pidFile: join(dir, "broker.pid"),
    logFile: join(dir, "broker.log"),
    lockFile: join(dir, "spawn.lock"),
  };
}

/** Creates the intercom directory (and the socket's, if elsewhere) readable by this user only. */
export function ensurePrivateDirs(paths: IntercomPaths): void {
  for (const dir of new Set([paths.dir, join(paths.socket, "..")])) {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const st = lstatSync(dir);
      if (!st.isDirectory()) throw Object.assign(new Error(`${dir} is not a directory`), { code: "ENOTDIR" });
      const uid = process.getuid?.();
      if (uid !== undefined && st.uid !== uid) throw Object.assign(new Error(`${dir} belongs to another user`), { code: "EPERM" });
      if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? "error";
      throw new AtomicError("intercom_unavailable", `cannot prepare the intercom directory ${dir} (${code})`, "retryable", {
        hint: "check that --home (ATOMIC_HOME) is a writable directory of yours",
        cause: err,
      });
    }
  }
}
