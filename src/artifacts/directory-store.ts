/**
 * The artifact store as a plain directory, for a filesystem every host
 * mounts (NFS, a cluster filesystem): config.json's `artifacts.dir`. The
 * contract is ./store.ts; the layout is the artifacts root's own:
 * `<dir>/<runId>/<position>-<slug>/attempt-N/<name>`, so people read the
 * files with the tools they have.
 *
 * Beside the files, `.atomic-files.json` in each attempt's directory keeps
 * per file what a plain file cannot say: how many bytes the cap dropped
 * from its head and whether it is complete. It is replaced whole (written
 * to a temporary name, then renamed), so a reader sees the old or the new
 * one. One writer per stage attempt (the host that runs it) is the
 * premise; the size is the file's length plus its dropped bytes.
 *
 * The cap: when a file passes it, the file is rewritten keeping its last
 * three quarters of the cap (a rewrite then happens at most once per
 * quarter cap written, not on every append): the tail goes to a temporary
 * file, the meta file records the new dropped count with that file's
 * inode, then the temporary file is renamed over the old one. A reader
 * compares the inode of the file it opened with the meta file's and reads
 * again when they differ, so it never applies one file's dropped count to
 * the other file's bytes.
 *
 * Files are opened without following links (a stage that runs on a host
 * writing straight into this directory could plant one); directories are
 * made 0700 and files 0600, as in the atomic home.
 */

import { removeTree } from "../shared/remove-tree.ts";
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, renameSync, statSync, writeFileSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { capFor, checkKey, gapError, type ArtifactChunk, type ArtifactFileInfo, type ArtifactKey, type ArtifactStore } from "./store.ts";

const META = ".atomic-files.json";

interface Meta {
  /** `ino`: the file's inode since the cap last rewrote it. */
  [name: string]: { dropped?: number; complete?: boolean; ino?: number };
}

export class DirectoryArtifactStore implements ArtifactStore {
  readonly kind = "directory";
  readonly deletedWithRuns = false;
  readonly maxFileBytes: number;

  constructor(
    readonly location: string,
    maxFileBytes: number,
  ) {
    this.maxFileBytes = capFor(maxFileBytes);
  }

  async append(key: ArtifactKey, name: string, offset: number, data: Uint8Array): Promise<number> {
    checkKey(key, name);
    const dir = this.dirOf(key);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const meta = readMeta(dir);
    const dropped = meta[name]?.dropped ?? 0;
    const path = join(dir, name);
    const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_NOFOLLOW, 0o600);
    let stored: number;
    try {
      stored = fstatSync(fd).size;
      const size = dropped + stored;
      if (offset > size) throw gapError(key, name, offset, size);
      const rest = data.subarray(Math.min(data.length, size - offset));
      for (let done = 0; done < rest.length; ) done += writeSync(fd, rest, done, rest.length - done);
      stored += rest.length;
    } finally {
      closeSync(fd);
    }
    if (stored <= this.maxFileBytes) return dropped + stored;
    // Over the cap: keep the tail (three quarters of the cap), record how much went.
    const keep = Math.floor((this.maxFileBytes * 3) / 4);
    const cut = stored - keep;
    const tail = Buffer.alloc(keep);
    const rfd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      readSync(rfd, tail, 0, keep, cut);
    } finally {
      closeSync(rfd);
    }
    // The new file's inode goes into the meta file before the new file takes the name: a reader compares it with
    // the file it opened and reads again when they differ (file note).
    const temp = tempName(path);
    writeFileSync(temp, tail, { mode: 0o600, flag: "wx" });
    writeMeta(dir, { ...meta, [name]: { ...meta[name], dropped: dropped + cut, ino: statSync(temp).ino } });
    renameSync(temp, path);
    return dropped + stored;
  }

  async read(key: ArtifactKey, name: string, offset: number, max: number): Promise<ArtifactChunk | undefined> {
    checkKey(key, name);
    const dir = this.dirOf(key);
    for (let attempt = 0; ; attempt++) {
      const fd = openFile(join(dir, name));
      if (fd === undefined) return undefined;
      try {
        const st = fstatSync(fd);
        const entry = readMeta(dir)[name] ?? {};
        // Capped meanwhile: the meta file names another file than the one opened (file note).
        if (entry.ino !== undefined && entry.ino !== st.ino && attempt < 5) continue;
        const dropped = entry.dropped ?? 0;
        const size = dropped + st.size;
        const from = Math.min(Math.max(offset, dropped), size);
        const want = Math.max(0, Math.min(max, size - from));
        const buf = Buffer.alloc(want);
        const n = want > 0 ? readSync(fd, buf, 0, want, from - dropped) : 0;
        return { name, size, dropped, complete: entry.complete === true, offset: from, data: buf.subarray(0, n) };
      } finally {
        closeSync(fd);
      }
    }
  }

  async list(key: ArtifactKey): Promise<ArtifactFileInfo[]> {
    checkKey(key);
    const dir = this.dirOf(key);
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return [];
    }
    const meta = readMeta(dir);
    const out: ArtifactFileInfo[] = [];
    for (const name of names.sort()) {
      if (name.startsWith(".")) continue;
      const st = lstatSync(join(dir, name), { throwIfNoEntry: false });
      if (!st?.isFile()) continue;
      const dropped = meta[name]?.dropped ?? 0;
      out.push({ name, size: dropped + st.size, dropped, complete: meta[name]?.complete === true });
    }
    return out;
  }

  async complete(key: ArtifactKey, name: string): Promise<void> {
    checkKey(key, name);
    const dir = this.dirOf(key);
    if (!lstatSync(join(dir, name), { throwIfNoEntry: false })?.isFile()) return;
    const meta = readMeta(dir);
    if (meta[name]?.complete) return;
    writeMeta(dir, { ...meta, [name]: { ...meta[name], complete: true } });
  }

  async deleteRun(_rootId: string, runId: string, opts: { dryRun?: boolean } = {}): Promise<{ files: number; bytes: number }> {
    checkKey({ rootId: runId, runId, stage: `${runId}/x/attempt-1` });
    const dir = join(this.location, runId);
    return removeTree(dir, { dryRun: opts.dryRun === true, skip: (name) => name === META });
  }

  async close(): Promise<void> {}

  private dirOf(key: ArtifactKey): string {
    return join(this.location, key.stage);
  }
}

function openFile(path: string): number | undefined {
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    if (fstatSync(fd).isFile()) return fd;
    closeSync(fd);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR" || code === "ELOOP") return undefined;
    throw err;
  }
}

function readMeta(dir: string): Meta {
  const fd = openFile(join(dir, META));
  if (fd === undefined) return {};
  try {
    const parsed = JSON.parse(readFileSync(fd, "utf8")) as unknown;
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Meta) : {};
  } catch {
    return {}; // not ours, or cut: the files themselves still read
  } finally {
    closeSync(fd);
  }
}

/** Replaces the meta file whole: a reader sees the old one or the new, never a mix. */
function writeMeta(dir: string, meta: Meta): void {
  const path = join(dir, META);
  const temp = tempName(path);
  writeFileSync(temp, JSON.stringify(meta), { mode: 0o600, flag: "wx" });
  renameSync(temp, path);
}

/** A name beside `path` that `list` passes over (it starts with a dot). */
function tempName(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${Math.random().toString(36).slice(2, 8)}.tmp`);
}
