/**
 * A worker host's outbox: stage results that could not be committed to the
 * shared journal (the database is away or cut off), kept in a SQLite file
 * of the host's home (`worker-outbox.db`, synchronous=FULL) until they are.
 *
 * - keep(): the result is written (and fsynced) here; from then on the host
 *   answers its worker as if committed, so the worker is free.
 * - drain() (every DRAIN_MS, and when the host starts: a host killed with
 *   results in its outbox commits them when it comes back): each result is
 *   committed as the worker would have, fenced by its work lease and its
 *   operation id. Committed (or already committed by an earlier try: the
 *   same receipt): deleted and its root woken. Stale (the lease ran out and
 *   another host took the item) or conflicting: refused, logged, deleted —
 *   never applied twice. The database still away: kept for the next drain.
 */

import { Database } from "bun:sqlite";
import { chmodSync, existsSync } from "node:fs";
import { join } from "node:path";
import type { FleetStore } from "../journal/fleet.ts";
import type { WorkFence, WorkQueue } from "../journal/work-queue.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import { ensureError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { faultPoint } from "../shared/fault-points.ts";

const DRAIN_MS = 1_000;

export type Outcome = { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo };

interface Row {
  op_id: string;
  root_id: string;
  fence: string;
  outcome: string;
  digest: string;
}

export class Outbox {
  private readonly db: Database;
  private timer: ReturnType<typeof setInterval> | undefined;
  private draining = false;

  constructor(
    home: string,
    private readonly work: WorkQueue,
    private readonly fleet: FleetStore,
    private readonly log: (line: string) => void,
  ) {
    const path = join(home, "worker-outbox.db");
    const fresh = !existsSync(path);
    this.db = new Database(path, { create: true, strict: true });
    if (fresh) chmodSync(path, 0o600);
    this.db.exec("pragma journal_mode = wal; pragma synchronous = full; pragma busy_timeout = 5000");
    this.db.exec(
      "create table if not exists results (op_id text primary key, root_id text not null, fence text not null, outcome text not null, digest text not null, at integer not null)",
    );
  }

  get size(): number {
    return (this.db.query("select count(*) as n from results").get() as { n: number }).n;
  }

  /** Keeps a result that could not be committed; true once it is on disk here. */
  keep(rootId: RunId, fence: WorkFence, outcome: Outcome, op: { id: string; digest: string }): boolean {
    try {
      this.db
        .query("insert or ignore into results (op_id, root_id, fence, outcome, digest, at) values (?, ?, ?, ?, ?, ?)")
        .run(op.id, rootId, JSON.stringify(fence), JSON.stringify(outcome), op.digest, Date.now());
      this.log(`result of work ${fence.id} kept in the outbox until the journal takes it`);
      return true;
    } catch (err) {
      this.log(`could not keep the result of work ${fence.id} in the outbox: ${ensureError(err).message}`);
      return false;
    }
  }

  start(): void {
    void this.drain();
    this.timer = setInterval(() => void this.drain(), DRAIN_MS);
  }

  /** Commits what it holds, oldest first; stops at the first result the journal cannot take now. */
  async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    try {
      const rows = this.db.query("select op_id, root_id, fence, outcome, digest from results order by at").all() as Row[];
      for (const r of rows) {
        const fence = JSON.parse(r.fence) as WorkFence;
        let receipt;
        try {
          faultPoint("outbox-before-commit");
          receipt = await this.work.complete(fence, JSON.parse(r.outcome) as Outcome, { id: r.op_id, digest: r.digest });
        } catch {
          return; // still away: the next drain tries again
        }
        faultPoint("outbox-after-commit");
        if (receipt.status === "committed") {
          this.log(`committed the result of work ${fence.id} from the outbox`);
          await this.fleet.wakeRoots([r.root_id as RunId]).catch(() => {});
        } else {
          this.log(`the journal refused the outboxed result of work ${fence.id} (${receipt.status}: its lease was lost meanwhile); dropped`);
        }
        this.db.query("delete from results where op_id = ?").run(r.op_id);
      }
    } finally {
      this.draining = false;
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.db.close();
  }
}
