/**
 * The journal: the source of truth for every run.
 *
 * This file is the contract's entry: the `Journal` interface, which hands
 * out the stores it holds in the same database, each with a contract file
 * of its own:
 *
 * - ./runs.ts: runs, events and leases (the records the interface reads);
 * - ./append.ts: what one append writes;
 * - ./work-queue.ts: the queue of stage executions (`Journal.work`);
 * - ./messages.ts, ./stage-index.ts, ./prompts.ts: messages to stages and
 *   prompts to humans (`Journal.messages`);
 * - ./views.ts: reads for the status server (`Journal.views`);
 * - ./retention.ts: deleting finished runs (`Journal.retention`);
 * - ./schedules.ts and ./fleet.ts: schedules and worker hosts;
 * - ./code.ts: the workflow code each run is pinned to;
 * - ../artifacts/store.ts: the artifact store a shared journal offers.
 *
 * A backend (sqlite/, postgres/) is a folder implementing `Journal`;
 * ./memory.ts is the SQLite one kept in memory (testRun's). The
 * conformance suite in test/conformance runs against every backend.
 * Nothing outside journal/ may depend on which backend it talks to.
 */

import type { StorageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import type { ArtifactStore } from "../artifacts/store.ts";
import type { AppendEntry, AppendOutcome } from "./append.ts";
import type { FleetStore } from "./fleet.ts";
import type { MessageStore } from "./messages.ts";
import type { RunRetention } from "./retention.ts";
import type { HolderInfo, JournalEvent, Lease, RunRecord, RunStatus } from "./runs.ts";
import type { ScheduleStore } from "./schedules.ts";
import type { CodeStore } from "./code.ts";
import type { CommitWatch } from "./commit-watch.ts";
import type { RunOriginFilter } from "./run-origin.ts";
import type { RunTagStore } from "./tags.ts";
import type { JournalCounters } from "./counters.ts";
import type { JournalViews } from "./views.ts";
import type { WorkQueue } from "./work-queue.ts";

export interface AcquireOptions {
  timeoutMs: number;
  /** Take the lease even from a live holder (used only by tests and `cancel --force`). */
  force?: boolean;
}

export interface ListRunsFilter {
  status?: RunStatus;
  /** Any of these stored statuses (with `status`, both must hold). */
  statuses?: readonly RunStatus[];
  /** Runs of the workflow of this name. */
  workflowName?: string;
  /** Runs created at or after this time (ms since the epoch). */
  createdSince?: number;
  /** Runs created before this time (ms since the epoch). */
  createdBefore?: number;
  /**
   * Runs whose id, workflow name, inputs, outputs or error contain this
   * text, ignoring ASCII case (./run-search.ts says how it is matched).
   */
  text?: string;
  /** Runs with every one of these tags (./tags.ts). */
  tags?: Readonly<Record<string, string>>;
  /** Runs of this origin (./run-origin.ts says what each selects). */
  origin?: RunOriginFilter;
  /** Root runs only (default true). */
  rootsOnly?: boolean;
  parentId?: RunId;
  limit?: number;
  offset?: number;
}

export type Durability = "full" | "normal";

export interface Journal {
  /** Human description of where the journal lives (path or redacted URL). */
  readonly location: string;
  /**
   * Throws the backend's storage_readonly refusal when this journal was
   * opened read-only or its storage cannot be written now (a home this
   * process may read but not write, a read-only mount), so a
   * command that will change runs says why before it does anything else.
   * Optional: a backend that is never opened read-only has none.
   */
  assertWritable?(): void;

  /**
   * Take the lease on a root run: created if absent; taken over (epoch + 1)
   * if expired, released, or held by a process of this host that no longer
   * exists. A live or remote unexpired holder: throws LeaseHeldError.
   */
  acquireLease(rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease>;
  /** Extend the lease; throws LeaseLostError if holder/epoch no longer match. */
  renewLease(lease: Lease): Promise<Lease>;
  /** Give the lease up (a later acquire takes it at once). Fenced; a lost lease is ignored. */
  releaseLease(lease: Lease): Promise<void>;
  getLease(rootId: RunId): Promise<Lease | undefined>;

  /**
   * Append entries in one transaction: the lease is checked first (throws
   * LeaseLostError and writes nothing if lost), then each entry runs inside
   * its own savepoint so one bad entry yields an "error" outcome without
   * sinking the others. Outcomes are in entry order.
   */
  append(lease: Lease, entries: AppendEntry[]): Promise<AppendOutcome[]>;

  getRun(id: RunId): Promise<RunRecord | undefined>;
  /** Runs whose id starts with `prefix` (at most `limit`), newest first. */
  findRuns(prefix: string, limit: number): Promise<RunRecord[]>;
  listRuns(filter?: ListRunsFilter): Promise<RunRecord[]>;
  countRuns(filter?: ListRunsFilter): Promise<number>;
  /** Events with seq > afterSeq, ascending, at most `limit` (default: all). */
  readEvents(runId: RunId, afterSeq?: number, limit?: number): Promise<JournalEvent[]>;

  /**
   * Ask the process driving a run to do something ("cancel", "pause",
   * "unpause"): unfenced, bumps controlRev and returns the new revision.
   * The driver sees it on its next poll and records `controlAck` once it
   * (and every worker) applied it.
   */
  requestControl(runId: RunId, action: string): Promise<number>;

  /** The work queue of stage executions (./work-queue.ts; docs/design/pool.md), in the same database. */
  readonly work: WorkQueue;

  /** Reads for the status server whose cost follows what changed, not the history (below). */
  readonly views: JournalViews;

  /** Messages to stages and prompts to humans (./messages.ts; docs/design/intercom.md), in the same database. */
  readonly messages: MessageStore;

  /** Deleting finished runs and giving their space back (`atomic gc`, the service's retention). */
  readonly retention: RunRetention;
  /** Schedules (`atomic schedule`, the service's scheduler): the contract is ./schedules.ts. */
  readonly schedules: ScheduleStore;
  /** The workflow code runs are pinned to (./code.ts): stored once per file, kept while a run uses it. */
  readonly code: CodeStore;
  /** Tags of root runs (./tags.ts). */
  readonly tags: RunTagStore;
  /** Counters of the whole journal, not of a run (./counters.ts). */
  readonly counters: JournalCounters;
  /** Worker hosts (./fleet.ts): only on a journal that several machines share. */
  readonly fleet?: FleetStore;

  /**
   * An artifact store in the journal's own database that every host of it
   * can read (../artifacts/store.ts), for backends shared between hosts;
   * absent on the embedded journal (the local files are the store).
   */
  artifactStore?(opts: { maxFileBytes: number }): ArtifactStore;

  /**
   * Whether the storage is still the one this process opened: a
   * `storage_unavailable` error to stop with when it is not (the embedded
   * journal's file was deleted or replaced: writes would go to a file
   * nobody reads); undefined while it is. Cheap (a stat): called before a
   * run reports how it ended and periodically while it runs.
   */
  storageFault(): StorageError | undefined;

  /**
   * The process is stopping (SIGTERM, Ctrl-C): a storage that cannot be
   * reached is not waited for any more, so the process ends at once and
   * the run stays resumable. Absent where nothing is waited for (the
   * embedded journal's waits are its busy timeout).
   */
  stopWaiting?(): void;

  /**
   * Another process's commit, waited for rather than polled (./commit-watch.ts).
   * Present where that costs no server round trip (the embedded journal's file);
   * absent elsewhere: callers poll.
   */
  readonly commits?: CommitWatch;

  /**
   * The journal's own clock (ms since the epoch), for times that hosts with
   * different clocks must agree on (a durable sleep's wake-up: engine/steps/sleep.ts).
   * Present where the journal has one every host reads (Postgres: the
   * database's); absent where its times come from the writers' own clocks.
   */
  clockNow?(): Promise<number>;

  close(): Promise<void>;
}

