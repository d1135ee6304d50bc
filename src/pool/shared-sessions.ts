/**
 * A run's own pool on a shared journal (Postgres): agent sessions travel
 * between its workers and worker hosts on other machines as they do between
 * hosts (artifacts/session-files.ts; docs/design/runners.md, "Sessions
 * between machines").
 *
 * - `ship`, before a stage's result is committed: the attempt's session
 *   files go to the artifact store whole, so that a host on another machine
 *   can continue (or fork) the stage. Shell stages and runners that leave
 *   no session file cost a few `stat`s.
 * - `fetch`, before a stage continuing an earlier attempt starts here: when
 *   that attempt ran on another machine (its recorded directory holds no
 *   session), its files are fetched from the store into this machine's
 *   artifacts directory; `localize` then names that copy as the earlier
 *   attempt's directory. A store that fails refuses the stage
 *   (`session_unavailable`) rather than let it start a session that forgot
 *   the conversation.
 *
 * On a journal without a store of its own (SQLite) nothing runs anywhere
 * else, and none of this is used.
 */

import { sessionHere, shipSessionFiles } from "../artifacts/session-files.ts";
import { artifactKeyOf, type ArtifactStore } from "../artifacts/store.ts";
import type { WorkItem } from "../journal/work-queue.ts";
import type { StageRequest } from "../runners/types.ts";
import { ensureError } from "../shared/errors.ts";

/** How long a result waits for its session files to reach the store (as a worker host's last bytes). */
const SHIP_MS = 5_000;
/** Items fetched for and not yet started, at most (more than a pool has workers). */
const FOUND_KEPT = 1_000;

export class SharedSessions {
  /** Per claimed item that continues an earlier attempt: the directory to read it from here, or why it cannot run. */
  private readonly found = new Map<string, string | { refused: string; code: string }>();

  constructor(
    private readonly store: ArtifactStore,
    private readonly artifactsRoot: string,
    private readonly log: (line: string) => void,
  ) {}

  ship(item: WorkItem): Promise<void> | undefined {
    const dir = (item.descriptor as StageRequest).artifactDir;
    const key = artifactKeyOf(item.rootId, dir);
    if (!key) return undefined;
    return shipSessionFiles(dir, this.store, key, { timeoutMs: SHIP_MS }).catch((err: unknown) => this.log(`session files of work ${item.id} not shipped: ${ensureError(err).message}`));
  }

  fetch(item: WorkItem): Promise<void> | undefined {
    const request = item.descriptor as StageRequest;
    const earlier = request.continueFrom;
    if (!earlier) return undefined;
    return sessionHere(earlier.artifactDir, item.rootId, this.store, this.artifactsRoot).then(
      (dir) => this.keep(item.id, dir),
      (err: unknown) =>
        this.keep(item.id, {
          code: "session_unavailable",
          refused: `stage "${request.stageName}": the session it continues ran on another machine, and this run's workers could not fetch it from ${this.store.location}: ${ensureError(err).message} (run it again once the store answers, or on the host that ran the earlier stage)`,
        }),
    );
  }

  private keep(id: string, found: string | { refused: string; code: string }): void {
    // An item claimed and then cancelled is never localized: the oldest such goes.
    if (this.found.size >= FOUND_KEPT) this.found.delete(this.found.keys().next().value!);
    this.found.set(id, found);
  }

  localize(item: WorkItem): StageRequest | { refused: string; code: string } {
    const request = item.descriptor as StageRequest;
    const found = this.found.get(item.id);
    this.found.delete(item.id);
    if (found === undefined || !request.continueFrom) return request;
    if (typeof found === "object") return found;
    return found === request.continueFrom.artifactDir ? request : { ...request, continueFrom: { ...request.continueFrom, artifactDir: found } };
  }
}
