/**
 * Group commit: appends of one lease that arrive in the same event-loop
 * turn share one `journal.append` call, so one transaction and one fsync.
 * This is what lets 200 concurrent steps of a run cost a handful of commits
 * instead of 200.
 *
 * States: idle (nothing queued) → scheduled (the first enqueue set a
 * `setImmediate`) → in flight (one `journal.append` running with everything
 * that was queued) → idle, or scheduled again if entries arrived meanwhile.
 * There is at most one batch in flight: entries queued during a flush wait
 * for the next one, so the order of entries of one run is the order of
 * their `append` calls.
 *
 * Slow start: after an idle spell a batch holds at most FIRST_BATCH
 * entries, and each batch that follows while entries keep coming may hold
 * twice as many as the one before (up to `maxBatch`, MAX_BATCH unless told).
 * The first stages of a fan-out of 500 are then recorded, and their work
 * items claimable, after 32 entries rather than after all 500; a burst
 * still takes a handful of commits, not one per entry. The cap bounds how
 * long one commit holds the journal's write lock: the pool coordinator's
 * claims wait behind it, and the 256 stage starts of one batch held them
 * back 10 to 28 ms as a 500-stage fan-out began (64: at most about 5 ms;
 * bench/pool.ts with ATOMIC_POOL_TRACE).
 *
 * Failure: outcomes are per entry ("error" for a bad entry, as the journal
 * reports it). If the whole batch fails (LeaseLostError, a storage fault),
 * every entry of that batch is rejected with that error.
 */

import type { AppendEntry, AppendOutcome } from "./append.ts";
import type { Journal } from "./journal.ts";
import type { Lease } from "./runs.ts";

interface Queued {
  entry: AppendEntry;
  resolve(outcome: AppendOutcome): void;
  reject(err: unknown): void;
}

const FIRST_BATCH = 32;
const MAX_BATCH = 64;

export interface GroupCommitOptions {
  /** Most entries per transaction; the rest go in the next one (bounds how long the write lock is held). */
  maxBatch?: number;
}

export class GroupCommitWriter {
  #queue: Queued[] = [];
  #scheduled = false;
  #inFlight: Promise<void> | undefined;
  #closed = false;
  readonly #maxBatch: number;
  /** The most entries the next batch may hold (see slow start above). */
  #cap = FIRST_BATCH;

  constructor(
    readonly journal: Journal,
    readonly lease: Lease,
    opts: GroupCommitOptions = {},
  ) {
    this.#maxBatch = Math.max(1, opts.maxBatch ?? MAX_BATCH);
  }

  /** Resolves once the entry is committed (or refused: "exists", "conflict", "error"). */
  append(entry: AppendEntry): Promise<AppendOutcome> {
    if (this.#closed) return Promise.reject(new Error("the group-commit writer is closed"));
    return new Promise<AppendOutcome>((resolve, reject) => {
      this.#queue.push({ entry, resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when everything appended before (and during) the call is committed or refused. */
  async flush(): Promise<void> {
    while (this.#inFlight || this.#queue.length > 0) {
      await (this.#inFlight ?? this.#flushBatch());
    }
  }

  /** Flushes, then refuses further appends. */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
  }

  #schedule(): void {
    if (this.#scheduled || this.#inFlight) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.#flushBatch();
    });
  }

  /** Sends what is queued as one `journal.append`; a no-op while another batch is in flight. */
  #flushBatch(): Promise<void> {
    if (this.#inFlight) return this.#inFlight;
    if (this.#queue.length === 0) return Promise.resolve();
    const batch = this.#queue.splice(0, Math.min(this.#cap, this.#maxBatch));
    this.#inFlight = this.#commit(batch).finally(() => {
      this.#inFlight = undefined;
      if (this.#queue.length > 0) {
        this.#cap *= 2;
        this.#schedule();
      } else this.#cap = FIRST_BATCH;
    });
    return this.#inFlight;
  }

  async #commit(batch: Queued[]): Promise<void> {
    try {
      const outcomes = await this.journal.append(
        this.lease,
        batch.map((q) => q.entry),
      );
      batch.forEach((q, i) => {
        const outcome = outcomes[i];
        if (outcome) q.resolve(outcome);
        else q.reject(new Error(`the journal returned ${outcomes.length} outcomes for ${batch.length} entries`));
      });
    } catch (err) {
      for (const q of batch) q.reject(err);
    }
  }
}
