/**
 * A stage attempt's files wherever this machine can read them, for the
 * readers (`atomic logs`, the status page): the attempt's artifact
 * directory when it is here (the stage ran on this machine), else the
 * artifact store when the process has one and it holds files of the
 * attempt (a worker host ran it and shipped them, ./shipper.ts), else
 * nothing (the caller says the files are elsewhere).
 *
 * Local files are opened as every reader of an artifact directory opens
 * them (openArtifactFile: no link followed; UnsafeArtifactError); their
 * `complete` is always false (a local reader follows the run's status
 * instead), and nothing is ever dropped from them.
 */

import { closeSync, existsSync, fstatSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { STDERR_LOG, STDOUT_LOG, TRANSCRIPT, openArtifactFile, type LogStream } from "./stage-logs.ts";
import { artifactKeyOf, type ArtifactChunk, type ArtifactStore } from "./store.ts";

export interface StageFiles {
  /** "local" (this machine's artifact directory) or "store". */
  readonly where: "local" | "store";
  /** The directory, or the store's location: for messages. */
  readonly location: string;
  /** Whether the file exists. */
  has(name: string): Promise<boolean>;
  /** At most `max` bytes from `offset` (from the first kept byte when the store dropped the ones asked for); undefined: no such file. */
  read(name: string, offset: number, max: number): Promise<ArtifactChunk | undefined>;
}

/**
 * The files of the attempt whose artifact directory (as recorded, on
 * whichever host ran it) is `artifactDir`, in the tree of `rootId`;
 * undefined when neither this machine nor the store has them.
 */
export async function openStageFiles(artifactDir: string, rootId: string, store: ArtifactStore | undefined): Promise<StageFiles | undefined> {
  if (existsSync(artifactDir)) return localFiles(artifactDir);
  const key = store ? artifactKeyOf(rootId, artifactDir) : undefined;
  if (!store || !key) return undefined;
  const names = new Set((await store.list(key)).map((f) => f.name));
  if (names.size === 0) return undefined;
  return {
    where: "store",
    location: store.location,
    has: async (name) => names.has(name) || (await store.list(key)).some((f) => f.name === name),
    read: (name, offset, max) => store.read(key, name, offset, max),
  };
}

function localFiles(dir: string): StageFiles {
  return {
    where: "local",
    location: dir,
    has: async (name) => existsSync(join(dir, name)),
    read: async (name, offset, max) => readLocal(join(dir, name), offset, max),
  };
}

/** A local artifact file's bytes from `offset` (at most `max`), as the store answers; undefined when it does not exist. */
export function readLocal(path: string, offset: number, max: number): ArtifactChunk | undefined {
  const fd = openArtifactFile(path);
  if (fd === undefined) return undefined;
  try {
    const size = fstatSync(fd).size;
    const from = Math.min(Math.max(0, offset), size);
    const want = Math.max(0, Math.min(max, size - from));
    const buf = Buffer.alloc(want);
    const n = want > 0 ? readSync(fd, buf, 0, want, from) : 0;
    return { name: basename(path), size, dropped: 0, complete: false, offset: from, data: buf.subarray(0, n) };
  } finally {
    closeSync(fd);
  }
}

/** The file holding `stream`: stderr.log; for stdout, stdout.log, else an agent stage's transcript.md (./stage-logs.ts). */
export async function logNameOf(files: StageFiles, stream: LogStream): Promise<string> {
  if (stream === "stderr") return STDERR_LOG;
  if (await files.has(STDOUT_LOG)) return STDOUT_LOG;
  return (await files.has(TRANSCRIPT)) ? TRANSCRIPT : STDOUT_LOG;
}
