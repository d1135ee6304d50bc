/**
 * What the parts of the pool coordinator share (coordinator.ts wires them):
 *
 * - root-channel.ts: the IPC channel to the root, both ways;
 * - supervisor.ts: the worker processes, their heartbeats and the liveness
 *   sweep, and what happens to the item of a worker that is lost;
 * - dispatcher.ts: handing ready items to idle workers (fenced claims),
 *   committing their results, and settling items the root cancelled.
 *
 * Each part reaches the others only through this interface, so the parts
 * depend on one small surface rather than on each other's internals.
 */

import type { Journal } from "../journal/types.ts";
import type { RunId } from "../shared/ids.ts";
import type { Dispatcher } from "./dispatcher.ts";
import type { CoordinatorConfig } from "./protocol/root-coordinator.ts";
import type { RootChannel } from "./root-channel.ts";
import type { StallMonitor } from "./stall-monitor.ts";
import type { Supervisor } from "./supervisor.ts";

export interface CoordinatorCore {
  readonly config: CoordinatorConfig;
  readonly rootId: RunId;
  /** This process's own event-loop stalls, credited to workers' leases. */
  readonly stall: StallMonitor;
  /** Open once `attached` (nothing is claimed before). */
  readonly journal: Journal;
  readonly attached: boolean;
  readonly paused: boolean;
  readonly shuttingDown: boolean;
  readonly root: RootChannel;
  readonly workers: Supervisor;
  readonly dispatcher: Dispatcher;
  log(line: string): void;
  /** The pool cannot go on: the root is told (`fatal`) and everything stops. */
  fatal(code: string, message: string): void;
  /** A journal write failed: if the journal takes no writes now (writeStopped), the pool fails at once with storage_unavailable. */
  storageFailed(err: unknown): boolean;
}
