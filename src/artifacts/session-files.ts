/**
 * An agent session's state travelling between hosts: the files a stage
 * that continues (or forks) an earlier attempt reads from that attempt's
 * artifact directory (SESSION_FILES, ./stage-logs.ts), on whichever
 * machine the continuing stage runs.
 *
 * A continued stage's request names the earlier attempt's directory as the
 * host that ran it recorded it (`continueFrom.artifactDir`). On another
 * machine that path holds nothing, so:
 *
 * - `shipSessionFiles` (the host that ran the attempt, when it ends, before
 *   its result is committed): each session file the attempt left is sent
 *   to the artifact store whole, under the attempt's key, and marked
 *   complete. The runners rewrite these files whole while the stage runs,
 *   so they are not part of the running shipper's files (./shipper.ts
 *   sends what a file grew by); sent once at the end, the store's
 *   append-from-offset contract makes a second send of the same result
 *   harmless.
 * - `sessionHere` (the host that continues it, before the stage starts):
 *   the directory this machine should read the session from. The recorded
 *   path when it holds session files (the same host, or a filesystem the
 *   hosts share); else this machine's copy under its own artifacts root
 *   (`<root>/<runId>/<position>-<slug>/attempt-N`, the same layout every
 *   host uses), fetched from the store into it when it is not there yet.
 *   A file the store capped (bytes dropped from its head) cannot be
 *   restored and is refused rather than continued from a fragment.
 *
 * Nothing here decides what a missing session means: with no copy in the
 * store either (the earlier stage ran where nothing ships, such as a root's
 * own workers on another machine) the recorded path is kept and the runner
 * says the session is missing in its own words.
 */

import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { shipStageFiles } from "./shipper.ts";
import { SESSION_FILES } from "./stage-logs.ts";
import { artifactKeyOf, type ArtifactKey, type ArtifactStore } from "./store.ts";

/** Bytes per read when fetching a session file. */
const READ_BYTES = 1024 * 1024;

/** Sends the attempt's session files in `localDir` to the store, whole, and marks them complete (see the header). */
export async function shipSessionFiles(localDir: string, store: ArtifactStore, key: ArtifactKey, opts: { timeoutMs?: number } = {}): Promise<void> {
  if (!SESSION_FILES.some((name) => existsSync(join(localDir, name)))) return;
  await shipStageFiles(localDir, store, key, { names: SESSION_FILES }).stop(opts);
}

/**
 * Where this machine reads the session of the earlier attempt recorded at
 * `recordedDir` (run tree `rootId`): see the header. `artifactsRoot` is
 * this machine's artifacts directory. Throws when the store fails or holds
 * a capped session file.
 */
export async function sessionHere(recordedDir: string, rootId: string, store: ArtifactStore | undefined, artifactsRoot: string): Promise<string> {
  if (hasSession(recordedDir)) return recordedDir;
  const key = artifactKeyOf(rootId, recordedDir);
  if (!key) return recordedDir;
  const local = join(artifactsRoot, key.stage);
  if (hasSession(local)) return local;
  if (!store) return recordedDir;
  const stored = (await store.list(key)).filter((f) => SESSION_FILES.includes(f.name));
  if (stored.length === 0) return recordedDir;
  const fetched: [string, Buffer][] = [];
  for (const file of stored) {
    if (file.dropped > 0) {
      throw new Error(`its ${file.name} is larger than the artifact store keeps (artifacts.maxFileBytes); ${file.dropped} bytes of its start were dropped`);
    }
    const parts: Uint8Array[] = [];
    for (let offset = 0; offset < file.size; ) {
      const chunk = await store.read(key, file.name, offset, READ_BYTES);
      if (!chunk || chunk.offset !== offset || chunk.data.length === 0) throw new Error(`its ${file.name} ended early in the artifact store (at byte ${offset} of ${file.size})`);
      parts.push(chunk.data);
      offset += chunk.data.length;
    }
    fetched.push([file.name, Buffer.concat(parts)]);
  }
  // Every file read before any is written, each written aside and renamed: a fetch cut short leaves no part of a session.
  mkdirSync(local, { recursive: true });
  for (const [name, bytes] of fetched) {
    const path = join(local, name);
    writeFileSync(`${path}.part`, bytes);
    renameSync(`${path}.part`, path);
  }
  return local;
}

function hasSession(dir: string): boolean {
  return SESSION_FILES.some((name) => existsSync(join(dir, name)));
}
