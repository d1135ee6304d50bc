/**
 * The root's worker pool as PoolExecutor (pool-executor.ts) sees it: one
 * coordinator process at a time, and what became of it.
 *
 *   idle ──start──▶ starting ──up──▶ running
 *                     ▲  │                │
 *                 start  └────lose────┐   │ lose
 *                     │               ▼   ▼
 *                restarting ◀──restart── lost
 *
 *   any ──close──▶ closed
 *
 * - idle: no coordinator yet (a run whose steps never use a stage never
 *   leaves it);
 * - starting: a coordinator was spawned; its `ready` has not come yet
 *   (after a loss: nor one of its workers' `worker_up`, since the retry
 *   that waits for it needs a worker). Stages wait for it;
 * - running: stages are sent to it and their results awaited; a stage not
 *   heard of for a lease period is asked about;
 * - lost: it exited, was killed for not answering, did not start in time,
 *   speaks another protocol, or reported itself failed (`fatal`). Every
 *   stage waiting on it failed with the loss's infrastructure code. When
 *   the loss is restartable and the drive has pools left, the next stage
 *   to execute moves it on (`restart`); otherwise every stage fails at
 *   once;
 * - restarting: the back-off before a fresh coordinator; the stages that
 *   arrive meanwhile wait for it, and then the pool is starting again;
 * - closed: the drive is over: the coordinator was told to shut down
 *   (killed after a grace period); nothing more is started, and a stage
 *   that still waits is not failed on its account.
 *
 * A second loss is absorbed where the pool is already lost, restarting
 * (the old coordinator's exit during the back-off) or closed (the closed
 * pool's coordinator exiting).
 */

import type { Transitions } from "../shared/state-machine.ts";

export const POOL_STATES = { idle: "idle", starting: "starting", running: "running", lost: "lost", restarting: "restarting", closed: "closed" } as const;
export type PoolState = (typeof POOL_STATES)[keyof typeof POOL_STATES];

export const POOL_EVENTS = { start: "start", up: "up", lose: "lose", restart: "restart", close: "close" } as const;
export type PoolEvent = (typeof POOL_EVENTS)[keyof typeof POOL_EVENTS];

const S = POOL_STATES;

export const POOL_TRANSITIONS: Transitions<PoolState, PoolEvent> = {
  idle: { start: S.starting, close: S.closed },
  starting: { up: S.running, lose: S.lost, close: S.closed },
  running: { lose: S.lost, close: S.closed },
  lost: { lose: S.lost, restart: S.restarting, close: S.closed },
  restarting: { start: S.starting, lose: S.restarting, close: S.closed },
  closed: { lose: S.closed, close: S.closed },
};
