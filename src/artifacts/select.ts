/**
 * Which artifact store a process uses, from its journal and config.json's
 * `artifacts` (shared/config.ts ArtifactsConfig):
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

import type { Journal } from "../journal/types.ts";
import type { AtomicConfig } from "../shared/config.ts";
import { DirectoryArtifactStore } from "./directory-store.ts";
import { DEFAULT_MAX_FILE_BYTES, type ArtifactStore } from "./store.ts";

export function artifactStoreFor(journal: Journal, config: AtomicConfig): ArtifactStore | undefined {
  const maxFileBytes = config.artifacts?.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES;
  if (config.artifacts?.dir) return new DirectoryArtifactStore(config.artifacts.dir, maxFileBytes);
  return journal.artifactStore?.({ maxFileBytes });
}
