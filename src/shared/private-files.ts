/**
 * Everything atomic writes is its user's alone: the home, the journal
 * (atomic.db and its -wal/-shm, which SQLite creates with the database's
 * mode), artifacts, stage logs, transcripts, worker logs, the runtime
 * directory (runtime-dir.ts).
 *
 * The invariant is kept by the process umask rather than by a mode at each
 * of the many places that create a file: `enterPrivateUmask()` is the first
 * thing src/main.ts does, in every role, so a file or directory atomic
 * creates is at most 0600 / 0700 whatever command comes first and whichever
 * process (root, coordinator, worker, broker) creates it. Explicit modes
 * where files are made stay as a second line of defence.
 *
 * Stages are the user's own programs: the processes a stage starts (a shell
 * stage, an agent's `bash` tool, a CLI agent) and the files an agent's
 * tools write in its working directory get the umask the user started
 * atomic with, not ours. That umask is recorded in ATOMIC_USER_UMASK when the
 * first atomic process starts and passed down to atomic's own roles (their
 * umask is already ours), never to stages (stage-env.ts withholds it).
 * `spawnWithUserUmask` sets it around a synchronous spawn only: the child
 * inherits the umask at fork time, and JavaScript runs nothing else in this
 * thread between the two umask calls.
 *
 * A home that already exists with looser modes (made by an older version,
 * or by hand) is tightened once, with a one-line warning: `ensurePrivateHome`.
 */

import { chmodSync, lstatSync, mkdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { writeStderr } from "./raw-stderr.ts";
import { readEnv, setEnv } from "./config/environment.ts";

export const PRIVATE_UMASK = 0o077;
const DEFAULT_USER_UMASK = 0o022;

let userMask = DEFAULT_USER_UMASK;

/** Makes this process's files private; remembers (or inherits from a parent atomic process) the user's umask. */
export function enterPrivateUmask(): void {
  const before = process.umask(PRIVATE_UMASK);
  userMask = parseUmask(readEnv("ATOMIC_USER_UMASK")) ?? before;
  setEnv("ATOMIC_USER_UMASK", userMask.toString(8).padStart(4, "0"));
}

function parseUmask(text: string | undefined): number | undefined {
  if (text === undefined || !/^[0-7]{1,4}$/.test(text)) return undefined;
  return Number.parseInt(text, 8) & 0o777;
}

/** Runs a synchronous spawn with the user's umask, so the stage's own files get the modes the user expects. */
export function spawnWithUserUmask<T>(spawn: () => T): T {
  const ours = process.umask(userMask);
  try {
    return spawn();
  } finally {
    process.umask(ours);
  }
}

/** The mode a new file of the user's gets (0666 under their umask): for files atomic writes on a stage's behalf in its cwd. */
export function userFileMode(): number {
  return 0o666 & ~userMask;
}

/** mkdir -p for a stage's files in its cwd: the directories it creates get the user's umask, not ours. */
export function mkdirsForUser(dir: string): void {
  const first = mkdirSync(dir, { recursive: true });
  if (first === undefined) return;
  for (let d = dir; d.length >= first.length; d = dirname(d)) {
    chmodSync(d, 0o777 & ~userMask);
    if (d === first) break;
  }
}

/** The entries directly in a home that hold what runs did (tightened with a loose home). */
const HOME_ENTRIES = ["atomic.db", "atomic.db-wal", "atomic.db-shm", "artifacts", "intercom", "run", "status-token"];
const warned = new Set<string>();

/**
 * Creates the home 0700, or tightens an existing one that group or others
 * can enter or read (and the journal and directories directly in it),
 * saying so once per process. A private home is left as it is, whatever
 * the modes below it: nobody else reaches them. Directories below
 * `artifacts/` are not walked, for the same reason.
 */
export function ensurePrivateHome(home: string): void {
  mkdirSync(home, { recursive: true, mode: 0o700 });
  // a home may be a link to where it really is
  const mode = statSync(home).mode & 0o777;
  if ((mode & 0o077) === 0) return;
  const loose: string[] = [];
  for (const path of [home, ...HOME_ENTRIES.map((e) => join(home, e))]) {
    let st;
    try {
      st = path === home ? statSync(path) : lstatSync(path);
    } catch {
      continue; // not there (yet)
    }
    if (st.isSymbolicLink() || (st.mode & 0o077) === 0) continue;
    try {
      chmodSync(path, st.isDirectory() ? 0o700 : 0o600);
      loose.push(`${path} (${(st.mode & 0o777).toString(8)})`);
    } catch {
      // not ours to change (a shared directory given as --home): the files atomic makes there are still private
    }
  }
  if (loose.length > 0 && !warned.has(home)) {
    warned.add(home);
    writeStderr(`warning: the atomic home was open to other users; made private (0700 directories, 0600 files): ${loose.join(", ")}
`);
  }
}
