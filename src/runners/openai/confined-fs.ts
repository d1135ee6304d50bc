/**
 * The file side of the openai runner's tools (read, write, edit, list,
 * grep): every path they touch is resolved to where it really is, and
 * nothing outside the stage's working directory (the root) is opened,
 * listed, created or written. A model's tool calls are the input of a
 * prompt injection, so these are the rules:
 *
 * - A path argument is normalized against the cwd (`..` segments and
 *   absolute paths included), then its real path is taken (realpath: every
 *   symlink on the way resolved). A path that does not exist yet (a file
 *   about to be written) resolves its nearest existing ancestor and appends
 *   the rest; a dangling symlink anywhere on the way is refused, since
 *   creating through it would land wherever it points.
 * - The real path must be the root or lie under the root's real path;
 *   otherwise the call is refused before anything is touched.
 * - Walking a tree (grep) or listing a directory resolves every entry it
 *   visits the same way: a symlink leading outside is neither followed nor
 *   read (grep says how many it skipped), and a directory already visited
 *   (a symlink loop) is not walked twice.
 * - Only regular files are opened. Fifos, sockets and device files are
 *   refused from their stat, never opened (opening a fifo blocks until a
 *   writer comes). Files are opened by their real path with O_NOFOLLOW and
 *   O_NONBLOCK and checked again with fstat, so a file swapped for a
 *   symlink or a fifo between the check and the open is refused too.
 *
 * What this does not cover: another process that swaps a directory on the
 * path for a symlink between the check and the open (Node has no openat).
 * The tools run one at a time and `bash` is no sandbox anyway (README,
 * Security).
 */

import { closeSync, constants, fchmodSync, fstatSync, lstatSync, openSync, readSync, readdirSync, realpathSync, statSync, writeSync, type Dirent, type Stats } from "node:fs";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { mkdirsForUser, userFileMode } from "../../shared/private-files.ts";

export class ToolRefused extends Error {}

export type EntryKind = "file" | "directory" | "fifo" | "socket" | "device" | "other";

/** A path resolved inside the root; `kind` undefined: it does not exist (yet). */
export interface Resolved {
  real: string;
  /** The path as the model should see it: relative to the root. */
  shown: string;
  kind: EntryKind | undefined;
  size: number;
}

/** One entry of a directory, resolved: `outside` and `broken` are symlinks that lead nowhere a tool may go. */
export type DirEntry = { name: string; real: string; kind: EntryKind } | { name: string; outside: true } | { name: string; broken: true };

const OPEN_NOFOLLOW = constants.O_NOFOLLOW | constants.O_NONBLOCK;

export class ConfinedFs {
  /** The root's real path. */
  readonly root: string;
  private readonly prefix: string;

  constructor(readonly cwd: string) {
    this.root = realpathSync.native(cwd);
    this.prefix = this.root.endsWith(sep) ? this.root : this.root + sep;
  }

  /** `p` (relative to the cwd, or absolute) resolved; ToolRefused when it lies outside the root. */
  resolve(p: string): Resolved {
    const abs = resolve(this.cwd, p);
    const rest: string[] = [];
    let real: string | undefined;
    for (let probe = abs; real === undefined; ) {
      try {
        real = realpathSync.native(probe);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ELOOP") throw new ToolRefused(`refused: ${JSON.stringify(p)} goes through a symbolic link loop`);
        if (code !== "ENOENT") throw err;
        if (lstatOrNull(probe)?.isSymbolicLink()) throw new ToolRefused(`refused: ${JSON.stringify(p)} goes through a symbolic link whose target does not exist`);
        const parent = dirname(probe);
        if (parent === probe) throw err;
        rest.unshift(basename(probe));
        probe = parent;
      }
    }
    const full = rest.length ? join(real, ...rest) : real;
    if (!this.contains(full)) throw outside(p);
    const st = rest.length ? undefined : statSync(full);
    return { real: full, shown: this.shown(full), kind: st ? kindOf(st) : undefined, size: st?.size ?? 0 };
  }

  /** Whether the real path `real` is the root or under it. */
  contains(real: string): boolean {
    return real === this.root || real.startsWith(this.prefix);
  }

  shown(real: string): string {
    return relative(this.root, real) || ".";
  }

  /** The entries of the real directory `dir`, sorted by name, each resolved (symlinks followed only inside the root). */
  entries(dir: string): DirEntry[] {
    // Each entry's type comes with its name (no lstat of each: 64-115 µs a `list` of 18 entries against 13-17,
    // bench/README.md); a filesystem that reports none (DT_UNKNOWN: no is*() holds) has its entries lstat'ed.
    return readdirSync(dir, { withFileTypes: true })
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((d): DirEntry => {
        const name = d.name;
        const path = join(dir, name);
        const lst = d.isSymbolicLink() || kindOf(d) !== "other" ? d : lstatOrNull(path);
        if (!lst) return { name, broken: true }; // removed meanwhile
        if (!lst.isSymbolicLink()) return { name, real: path, kind: kindOf(lst) };
        let real: string;
        try {
          real = realpathSync.native(path);
        } catch {
          return { name, broken: true };
        }
        if (!this.contains(real)) return { name, outside: true };
        return { name, real, kind: kindOf(statSync(real)) };
      });
  }

  /** Up to `max` bytes of the regular file `r` from byte `offset`. */
  readBytes(r: Resolved, offset: number, max: number): Buffer {
    const fd = this.openRegular(r, constants.O_RDONLY);
    try {
      const size = fstatSync(fd).size;
      const buf = Buffer.alloc(Math.max(0, Math.min(max, size - offset)));
      let got = 0;
      while (got < buf.length) {
        const n = readSync(fd, buf, got, buf.length - got, offset + got);
        if (n === 0) break;
        got += n;
      }
      return buf.subarray(0, got);
    } finally {
      closeSync(fd);
    }
  }

  /** Creates or replaces the file `r` (its missing parent directories too, all inside the root). */
  writeText(r: Resolved, text: string): void {
    if (r.kind === undefined) mkdirsForUser(dirname(r.real));
    const fd = this.openRegular(r, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC);
    try {
      // The agent writes the user's files: the user's umask, not atomic's private one (shared/private-files.ts).
      if (r.kind === undefined) fchmodSync(fd, userFileMode());
      const buf = Buffer.from(text, "utf8");
      let done = 0;
      while (done < buf.length) done += writeSync(fd, buf, done, buf.length - done);
    } finally {
      closeSync(fd);
    }
  }

  /** Refuses what is not a regular file (from its stat: a fifo is never opened), then opens it without following a symlink. */
  private openRegular(r: Resolved, flags: number): number {
    if (r.kind !== undefined) requireFile(r);
    const fd = openSync(r.real, flags | OPEN_NOFOLLOW, 0o666);
    const kind = kindOf(fstatSync(fd));
    if (kind !== "file") {
      closeSync(fd);
      requireFile({ ...r, kind });
    }
    return fd;
  }
}

/** ToolRefused unless `r` is a regular file (a directory is a plain error: the model used the wrong tool). */
export function requireFile(r: Resolved): void {
  if (r.kind === "file") return;
  if (r.kind === undefined) throw new Error(`${r.shown} does not exist`);
  if (r.kind === "directory") throw new Error(`${r.shown} is a directory; use list`);
  throw new ToolRefused(`refused: ${r.shown} is a ${r.kind}, not a regular file`);
}

export function kindOf(st: Stats | Dirent): EntryKind {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isFIFO()) return "fifo";
  if (st.isSocket()) return "socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "device";
  return "other";
}

function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

function outside(p: string): ToolRefused {
  return new ToolRefused(`refused: ${JSON.stringify(p)} is outside the stage's working directory`);
}
