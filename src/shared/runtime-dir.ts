/**
 * Where atomic keeps host-wide state of its user that is not a run's (the
 * agent session slots; a broker socket whose path under the home would be
 * too long): the user's runtime directory, never a predictable path in a
 * shared /tmp, where another user could create it first and so block or
 * read it.
 *
 * - `$XDG_RUNTIME_DIR/atomic` when XDG_RUNTIME_DIR is set to an absolute
 *   directory that is this user's, not a symbolic link, and 0700 (what
 *   systemd-logind makes: one per user, on tmpfs);
 * - else `<home>/run` in the atomic home (then the per-user session limit
 *   counts the sessions of the runs sharing that home).
 *
 * Every directory handed out here, and the intercom directory, is made and
 * checked by `ensurePrivateDir`: ours, a real directory, not writable by
 * anyone else (else refused with one sentence: whoever could write it may
 * have planted files there), and tightened to 0700 when merely readable.
 */

import { chmodSync, lstatSync, mkdirSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { AtomicError } from "./errors.ts";
import { readEnv, type EnvSource } from "./config/environment.ts";

/** The runtime directory for the atomic home `home` (not created: see ensurePrivateDir). */
export function runtimeDir(home: string, env?: EnvSource): string {
  const xdg = readEnv("XDG_RUNTIME_DIR", env);
  if (xdg && isAbsolute(xdg) && isOwnPrivateDir(xdg)) return join(xdg, "atomic");
  return join(home, "run");
}

function isOwnPrivateDir(dir: string): boolean {
  try {
    const st = lstatSync(dir);
    return st.isDirectory() && st.uid === ownUid(st.uid) && (st.mode & 0o077) === 0;
  } catch {
    return false;
  }
}

function ownUid(fallback: number): number {
  return process.getuid?.() ?? fallback;
}

/** Why `dir` may not hold this user's private state, or undefined when it may. */
function unsafeReason(dir: string): string | undefined {
  const st = lstatSync(dir);
  if (st.isSymbolicLink()) return "is a symbolic link";
  if (!st.isDirectory()) return "is not a directory";
  if (st.uid !== ownUid(st.uid)) return `belongs to another user (uid ${st.uid})`;
  if ((st.mode & 0o022) !== 0) return `is writable by other users (mode ${(st.mode & 0o777).toString(8)})`;
  if ((st.mode & 0o077) !== 0) chmodSync(dir, 0o700);
  return undefined;
}

/**
 * Creates `dir` (0700, with its parents) or checks the one that is there:
 * ours, a real directory, writable by no one else. Throws a terminal
 * AtomicError `unsafe_directory` naming it otherwise (`what` says what it
 * is for: "the runtime directory").
 */
export function ensurePrivateDir(dir: string, what: string): void {
  let reason: string | undefined;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    reason = unsafeReason(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new AtomicError("unsafe_directory", `cannot prepare ${what} ${dir} (${code})`, "terminal", {
      hint: "check that it is a writable directory of yours",
      cause: err,
    });
  }
  if (reason) {
    throw new AtomicError("unsafe_directory", `refusing ${what} ${dir}: it ${reason}`, "terminal", {
      hint: `remove it or make it yours with mode 0700 (chmod 700 ${dir})`,
    });
  }
}
