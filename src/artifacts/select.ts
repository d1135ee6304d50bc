/**
 * Which artifact store a process uses, from its journal and config.json's
 * `artifacts` (shared/config/schema.ts):
 *
 * - `artifacts.dir` set: that directory (a filesystem every host mounts),
 *   whatever the journal;
 * - else a journal shared between hosts (Postgres) offers a store in its
 *   own database (Journal.artifactStore): that one;
 * - else none: on the embedded journal every stage runs on this machine, so
 *   the files under the home's artifacts directory are all there is.
 *
 * `artifacts.maxFileBytes` caps each file in either store (default 64 MiB).
 * Every host of one journal must make the same choice (the same `dir`, or
 * none): the README says so.
 */

import { accessSync, constants, statSync } from "node:fs";
import { formatBytes } from "../shared/format-bytes.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import { DirectoryArtifactStore } from "./directory-store.ts";
import { DEFAULT_MAX_FILE_BYTES, type ArtifactStore } from "./store.ts";

/**
 * What a journal offers here (`Journal.artifactStore`, journal/journal.ts),
 * named by shape so that this folder stays below journal/ (the journal
 * implements the store; docs/design/layers.md).
 */
export interface ArtifactStoreSource {
  artifactStore?(opts: { maxFileBytes: number }): ArtifactStore;
}

export function artifactStoreFor(journal: ArtifactStoreSource, config: AtomicConfig): ArtifactStore | undefined {
  const maxFileBytes = config.artifacts?.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES;
  if (config.artifacts?.dir) return new DirectoryArtifactStore(config.artifacts.dir, maxFileBytes);
  return journal.artifactStore?.({ maxFileBytes });
}

export interface ArtifactStoreReport {
  /** "directory", "journal" (the shared journal's own database) or "local" (no store: this machine's files only). */
  store: "directory" | "journal" | "local";
  location: string | null;
  maxFileBytes: number;
  ok: boolean;
  detail: string;
  problem?: string;
  hint?: string;
}

/**
 * `doctor`'s look at the store this configuration selects, without opening
 * or writing anything: a directory is checked for being one this user may
 * write; `sharedJournal` says whether the journal is one hosts share (a
 * journal URL).
 */
export function describeArtifactStore(config: AtomicConfig, sharedJournal: boolean): ArtifactStoreReport {
  const maxFileBytes = config.artifacts?.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES;
  const cap = `files capped at ${formatBytes(maxFileBytes)}`;
  const dir = config.artifacts?.dir;
  if (!dir) {
    return sharedJournal
      ? { store: "journal", location: null, maxFileBytes, ok: true, detail: `in the journal's database, ${cap}` }
      : { store: "local", location: null, maxFileBytes, ok: true, detail: "this machine's artifacts directory only, on the embedded journal" };
  }
  const base = { store: "directory" as const, location: dir, maxFileBytes };
  const st = statSync(dir, { throwIfNoEntry: false });
  if (!st?.isDirectory()) {
    return { ...base, ok: false, detail: "", problem: `the artifacts directory ${dir} ${st ? "is not a directory" : "does not exist"}`, hint: "mount the shared filesystem there, or change artifacts.dir in config.json" };
  }
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
  } catch {
    return { ...base, ok: false, detail: "", problem: `this user may not write to the artifacts directory ${dir}`, hint: "give the user that runs atomic write access to it, on every host" };
  }
  return { ...base, ok: true, detail: `a shared directory, ${cap}` };
}
