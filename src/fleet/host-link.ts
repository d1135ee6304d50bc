/**
 * A worker host's way to the roots whose stages it runs: the shared
 * journal's fleet tables (../journal/fleet.ts) in place of the IPC channel a
 * run's own pool has (../pool/root-channel.ts).
 *
 * - Live events are coalesced per item (EventBatcher, about every 250 ms,
 *   a stage's `started` at once) and posted up to the item's root. An
 *   item's pending events are posted before its result is committed
 *   (`flush`, from the host's beforeCommit), so a root that sees the item
 *   settled has had all of them.
 * - A result is the item's committed outcome, already in the queue when
 *   `done` is called: `done` only posts what is pending and wakes the root.
 * - Delivery answers go up as they are; the rest of the pool protocol's
 *   messages (worker_up, control acks, fatal) concern the host alone and are
 *   not sent (the host logs what matters of them itself).
 * Posting is best effort: a post that fails (the database is away) is
 * logged and dropped. Live events are a view; the stage's files and result
 * keep everything.
 */

import type { FleetStore } from "../journal/fleet.ts";
import type { RunId } from "../shared/ids.ts";
import type { RunnerEvent } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import { ensureError } from "../shared/errors.ts";
import type { RootLink } from "../pool/coordinator-core.ts";
import { EventBatcher } from "../pool/event-batcher.ts";
import type { FromCoordinator } from "../pool/protocol/root-coordinator.ts";

const EVENT_BATCH_MS = 250;

export class HostLink implements RootLink {
  private readonly batchers = new Map<string, EventBatcher>();
  /** The root of every item this host holds or held lately (work id → root id). */
  private readonly roots = new Map<string, RunId>();
  private readonly answered = new Set<string>();

  constructor(
    private readonly fleet: FleetStore,
    private readonly log: (line: string) => void,
    /** An item ended (its result is committed): what the host keeps for it goes. */
    private readonly ended: (workId: string) => void = () => {},
  ) {}

  /** `workId` belongs to `rootId` (called when it is claimed). */
  track(workId: string, rootId: RunId): void {
    this.roots.set(workId, rootId);
  }

  events(workId: string, events: RunnerEvent[], opts: { hold?: boolean } = {}): void {
    const rootId = this.roots.get(workId);
    if (!rootId) return;
    let b = this.batchers.get(workId);
    if (!b) {
      b = new EventBatcher(EVENT_BATCH_MS, (batch) => this.post(rootId, [{ type: "work_events", batch: [{ workId, events: batch }] }]));
      this.batchers.set(workId, b);
    }
    for (const event of events) b.push(event);
    if (!opts.hold && events.some((e) => e.type === "started")) b.flush();
  }

  /**
   * Posts `workId`'s pending events now (before its result is committed: a
   * root that sees the item settled has its events already, its `started`
   * among them). Never throws: a post that fails is logged.
   */
  async flush(workId: string): Promise<void> {
    const rootId = this.roots.get(workId);
    const events = this.batchers.get(workId)?.take() ?? [];
    if (!rootId || events.length === 0) return;
    await this.fleet
      .postUp(rootId, [{ type: "work_events", batch: [{ workId, events }] }])
      .catch((err: unknown) => this.log(`live events for run ${rootId} not posted: ${ensureError(err).message}`));
  }

  done(workId: string, _result: StageResult): void {
    this.ended(workId);
    const rootId = this.roots.get(workId);
    if (!rootId || this.answered.has(workId)) return;
    this.answered.add(workId);
    const events = this.batchers.get(workId)?.take() ?? [];
    this.batchers.delete(workId);
    const pending = events.length > 0 ? [{ type: "work_events" as const, batch: [{ workId, events }] }] : [];
    void this.fleet
      .postUp(rootId, pending)
      .then(() => this.fleet.wakeRoots([rootId]))
      .catch((err: unknown) => this.log(`could not tell run ${rootId} that work ${workId} ended: ${ensureError(err).message} (it polls)`))
      .finally(() => {
        this.roots.delete(workId);
        this.answered.delete(workId);
      });
  }

  send(msg: FromCoordinator): void {
    if (msg.type !== "deliver_result") return;
    const rootId = this.roots.get(msg.workId);
    if (rootId) this.post(rootId, [msg]);
  }

  private post(rootId: RunId, bodies: FromCoordinator[]): void {
    this.fleet.postUp(rootId, bodies).catch((err: unknown) => this.log(`live events for run ${rootId} not posted: ${ensureError(err).message}`));
  }
}
