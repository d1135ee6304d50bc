/**
 * The artifact store: where a stage's files (stdout.log, stderr.log,
 * transcript.md, events.jsonl, turns.jsonl) are kept so that every host of a
 * shared journal can read them, not only the host that ran the stage.
 *
 * A file is named by its key and its name. The key is the stage attempt's
 * artifact directory relative to the artifacts root, as every host lays it
 * out (`<runId>/<position>-<slug>/attempt-N`, engine/steps/stage.ts), with
 * the run's root id (retention deletes by tree). The same relative path is
 * what a directory store writes under its root.
 *
 * The contract every implementation keeps (test/artifacts/store.test.ts runs
 * one suite over all of them):
 * - A file is a byte sequence that only grows: `append(key, name, offset,
 *   bytes)` puts `bytes` at `offset`. The store's `size` is the number of
 *   bytes ever appended (the end offset). Appending bytes that are there
 *   already is harmless: the part of `bytes` below `size` is skipped, so a
 *   writer that lost its connection during an append sends the same range
 *   again without doubling anything. An offset past `size` (a gap) is
 *   refused (`artifact_gap`): a writer sends bytes in order.
 * - A per-file cap (`maxFileBytes`): when a file grows past it, bytes at its
 *   head are dropped and the tail is kept; `dropped` says how many. Offsets
 *   keep counting from the file's start, so a reader at an offset below
 *   `dropped` is given the bytes from `dropped` on and told so. Postgres
 *   drops whole chunks (it keeps at most the cap); a directory rewrites the
 *   file keeping three quarters of the cap (a rewrite at most once per
 *   quarter cap written).
 * - `complete(key, name)`: the writer will append no more (the stage
 *   ended). A reader following a file stops when it is complete.
 * - `deleteRun(rootId, runId)`: every file of the run's stages (retention).
 *
 * Which store a process uses (the journal URL and config.json's
 * `artifacts`) is ./select.ts.
 */

import { UsageError } from "../shared/errors.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";

export interface ArtifactKey {
  /** The root run of the tree (retention deletes a tree at a time). */
  rootId: string;
  /** The stage's own run (a child run's stages have theirs). */
  runId: string;
  /** The attempt's directory relative to the artifacts root: `<runId>/<position>-<slug>/attempt-N`. */
  stage: string;
}

export interface ArtifactFileInfo {
  name: string;
  /** Bytes ever appended (the file's end offset). */
  size: number;
  /** Bytes dropped from the head (the cap); the stored bytes are [dropped, size). */
  dropped: number;
  /** The writer said it is done. */
  complete: boolean;
}

export interface ArtifactChunk extends ArtifactFileInfo {
  /** Where `data` starts: the offset asked for, or `dropped` when that is later. */
  offset: number;
  data: Uint8Array;
}

export interface ArtifactStore {
  /** "postgres" or "directory". */
  readonly kind: string;
  /** Where the files are, for messages (a redacted URL or a path). */
  readonly location: string;
  /** The per-file cap in bytes. */
  readonly maxFileBytes: number;
  /**
   * The journal deletes these files itself, in the transaction that deletes
   * their runs (a store in the journal's own database): retention need not
   * call deleteRun.
   */
  readonly deletedWithRuns: boolean;
  /** Puts `data` at `offset` (see the contract above); the file's size after it. */
  append(key: ArtifactKey, name: string, offset: number, data: Uint8Array): Promise<number>;
  /** At most `max` bytes from `offset` (or from `dropped`); undefined when there is no such file. */
  read(key: ArtifactKey, name: string, offset: number, max: number): Promise<ArtifactChunk | undefined>;
  /** The files of one stage attempt, by name. */
  list(key: ArtifactKey): Promise<ArtifactFileInfo[]>;
  /** The writer is done with the file (no-op for a file that does not exist). */
  complete(key: ArtifactKey, name: string): Promise<void>;
  /** Deletes every file of `runId`'s stages (with `dryRun` only counts them); what was deleted. */
  deleteRun(rootId: string, runId: string, opts?: { dryRun?: boolean }): Promise<{ files: number; bytes: number }>;
  close(): Promise<void>;
}

/** The default per-file cap (its reason: the config schema's `artifacts.maxFileBytes`). */
export const DEFAULT_MAX_FILE_BYTES = CONFIG_DEFAULTS.artifacts.maxFileBytes;
/** Postgres keeps files in chunks of this size (a chunk is the unit the cap drops); also the smallest cap (shared/config/schema.ts checks it too). */
export const CHUNK_BYTES = 256 * 1024;

const RUN_PART = /^[a-z0-9][a-z0-9._-]*$/;
const STAGE_PART = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const ATTEMPT_PART = /^attempt-\d+$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * The key of the stage attempt whose artifact directory is `artifactDir`
 * (absolute, on whichever host ran it): its last three components.
 * Undefined when the path does not look like one atomic made.
 */
export function artifactKeyOf(rootId: string, artifactDir: string): ArtifactKey | undefined {
  const parts = artifactDir.replace(/\/+$/, "").split("/").slice(-3);
  if (parts.length !== 3 || !RUN_PART.test(parts[0]!) || !STAGE_PART.test(parts[1]!) || !ATTEMPT_PART.test(parts[2]!)) return undefined;
  return { rootId, runId: parts[0]!, stage: parts.join("/") };
}

/**
 * Refuses a key or a name that could name something outside the stage's
 * place (a directory store joins them into paths): one clear error.
 */
export function checkKey(key: ArtifactKey, name?: string): void {
  const parsed = key.stage.split("/").length === 3 ? artifactKeyOf(key.rootId, key.stage) : undefined;
  if (!parsed || parsed.runId !== key.runId || !RUN_PART.test(key.rootId)) {
    throw new UsageError("bad_artifact_key", `${JSON.stringify(key.stage)} is not a stage attempt's artifact path of run ${key.runId}`, {
      hint: "name it as <runId>/<position>-<slug>/attempt-N",
    });
  }
  if (name !== undefined && !NAME.test(name)) {
    throw new UsageError("bad_artifact_key", `${JSON.stringify(name)} is not a file name the artifact store keeps`, { hint: "use a plain file name such as stdout.log" });
  }
}

/** The offset past the stored size: a writer skipped bytes. */
export function gapError(key: ArtifactKey, name: string, offset: number, size: number): UsageError {
  return new UsageError("artifact_gap", `cannot append ${key.stage}/${name} at offset ${offset}: the store has ${size} bytes of it`, {
    hint: "append from the store's size (list the stage's files to read it)",
  });
}

/** A configured cap as the stores apply it: whole bytes, at least one chunk. */
export function capFor(maxFileBytes: number): number {
  return Math.max(CHUNK_BYTES, Math.floor(maxFileBytes));
}
