/**
 * One worker process as the coordinator sees it: a small state machine.
 *
 *   starting --ready--> idle --assign--> busy --finish--> idle
 *       |                 |                |
 *       +-----------------+----------------+--retire--> retired --exit--> gone
 *
 * - starting: spawned, its `ready` not yet received;
 * - idle: can take an item;
 * - busy: holds a work item under (generation, epoch); `renewedAt` is its
 *   last heartbeat (performance.now(), like every time here: a stepped wall
 *   clock must not expire a lease), `stallAtRenew` the coordinator's stall counter then;
 *   past its lease it is pinged (`pingSentAt`, `pingedFor`), and its
 *   answer must name that same item;
 * - retired: lost or being shut down; it may still send a late message,
 *   which is refused as stale; it is killed after a grace period;
 * - gone: its process exited.
 * Every transition goes through `setState`, which checks it is allowed.
 */

import type { Subprocess } from "bun";
import { closeSync, openSync, readSync, statSync } from "node:fs";
import type { WorkFence, WorkItem } from "../journal/work-queue.ts";
import type { ToWorker } from "./protocol/coordinator-worker.ts";

export const SLOT_STATES = ["starting", "idle", "busy", "retired", "gone"] as const;
export type SlotState = (typeof SLOT_STATES)[number];

const ALLOWED: Record<SlotState, readonly SlotState[]> = {
  starting: ["idle", "retired", "gone"],
  idle: ["busy", "retired", "gone"],
  busy: ["idle", "retired", "gone"],
  retired: ["gone"],
  gone: [],
};

export class WorkerSlot {
  state: SlotState = "starting";
  item: WorkItem | undefined;
  /** Process group of the stage it runs (killed when the worker is lost). */
  pgid: number | undefined;
  renewedAt = 0;
  stallAtRenew = 0;
  pingSentAt: number | undefined;
  /** The item the outstanding ping asked about. */
  pingedFor: WorkFence | undefined;
  pongAt = 0;
  readonly spawnedAt = performance.now();

  constructor(
    readonly id: string,
    readonly proc: Subprocess,
    readonly logPath: string,
  ) {}

  setState(to: SlotState): void {
    if (to === this.state) return;
    if (!ALLOWED[this.state].includes(to)) {
      throw new Error(`internal: worker ${this.id} cannot go from ${this.state} to ${to}`);
    }
    this.state = to;
  }

  assign(item: WorkItem, now: number, stalledMs: number): void {
    this.setState("busy");
    this.item = item;
    this.pgid = undefined;
    this.renewedAt = now;
    this.stallAtRenew = stalledMs;
    this.pingSentAt = undefined;
    this.pingedFor = undefined;
  }

  finish(): void {
    this.setState("idle");
    this.item = undefined;
    this.pgid = undefined;
    this.pingSentAt = undefined;
    this.pingedFor = undefined;
  }

  renewed(now: number, stalledMs: number): void {
    this.renewedAt = now;
    this.stallAtRenew = stalledMs;
    this.pingSentAt = undefined;
    this.pingedFor = undefined;
  }

  fence(): WorkFence | undefined {
    const item = this.item;
    return item ? { id: item.id, workerId: this.id, generation: item.generation, epoch: item.epoch } : undefined;
  }

  /** Holds `ref` exactly (same item, generation, epoch) and is not retired. */
  owns(ref: { workId: string; generation: number; epoch: number }): boolean {
    const item = this.item;
    return (
      this.state === "busy" && item !== undefined && item.id === ref.workId && item.generation === ref.generation && item.epoch === ref.epoch
    );
  }

  send(msg: ToWorker): void {
    if (this.state === "gone") return;
    try {
      this.proc.send(msg);
    } catch {
      // the process is going away; its exit is handled elsewhere
    }
  }

  get alive(): boolean {
    return this.state !== "gone";
  }
}

/** The last `bytes` of a log file, for failure messages. */
export function logTail(path: string, bytes = 8 * 1024): string {
  try {
    const size = statSync(path).size;
    const start = Math.max(0, size - bytes);
    const fd = openSync(path, "r");
    try {
      const buf = Buffer.alloc(size - start);
      readSync(fd, buf, 0, buf.length, start);
      return buf.toString("utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return "";
  }
}
