/**
 * FleetExecutor's two state machines (fleet-executor.ts): how the root
 * hears of its stages on worker hosts, and its syncs with the work queue.
 * They are independent (a sync runs whether or not the root listens), so
 * they are two small machines rather than one of their product.
 *
 * Hearing:
 *
 *   idle ──watch──▶ connecting ──listened──▶ listening
 *                     ▲    │                    │
 *              relisten    lost                lost
 *                     │    ▼                    │
 *                    polling ◀──────────────────┘
 *
 *   any ──close──▶ closed
 *
 * - idle: no stage was prepared or executed yet: no timer, no connection;
 * - connecting: a LISTEN connection on the root's channel is being set
 *   up; the poll timer runs (every state but idle and closed has it: a
 *   sync every POLL_MS while stages are out);
 * - listening: the connection is up; a notification syncs at once;
 * - polling: the connection failed or was lost: the poll alone hears of
 *   remote stages, and its next tick connects again (`relisten`). A failed
 *   attempt may report its lost connection and then its failure, so `lost`
 *   is absorbed here;
 * - closed: the drive is over. An attempt under way when it closed ends
 *   here (its failure absorbed; a connection it still made is closed).
 *
 * Syncing (take the root's messages up, reap expired leases, read settled
 * items; one at a time):
 *
 *   idle ──wake──▶ syncing ──wake──▶ pending ──wake──▶ pending
 *     ▲               │  ▲              │
 *     └─────done──────┘  └─────done─────┘ (and it syncs again)
 *
 * - idle: no sync runs; a wake starts one;
 * - syncing: one runs; a wake now asks for one more after it;
 * - pending: one runs and another follows it (however many wakes came).
 */

import type { Transitions } from "../shared/state-machine.ts";

export const HEARING_STATES = { idle: "idle", connecting: "connecting", listening: "listening", polling: "polling", closed: "closed" } as const;
export type HearingState = (typeof HEARING_STATES)[keyof typeof HEARING_STATES];

export const HEARING_EVENTS = { watch: "watch", listened: "listened", lost: "lost", relisten: "relisten", close: "close" } as const;
export type HearingEvent = (typeof HEARING_EVENTS)[keyof typeof HEARING_EVENTS];

const H = HEARING_STATES;

export const HEARING_TRANSITIONS: Transitions<HearingState, HearingEvent> = {
  idle: { watch: H.connecting, close: H.closed },
  connecting: { listened: H.listening, lost: H.polling, close: H.closed },
  listening: { lost: H.polling, close: H.closed },
  polling: { lost: H.polling, relisten: H.connecting, close: H.closed },
  closed: { lost: H.closed, close: H.closed },
};

export const SYNC_STATES = { idle: "idle", syncing: "syncing", pending: "pending" } as const;
export type SyncState = (typeof SYNC_STATES)[keyof typeof SYNC_STATES];

export const SYNC_EVENTS = { wake: "wake", done: "done" } as const;
export type SyncEvent = (typeof SYNC_EVENTS)[keyof typeof SYNC_EVENTS];

const Y = SYNC_STATES;

export const SYNC_TRANSITIONS: Transitions<SyncState, SyncEvent> = {
  idle: { wake: Y.syncing },
  syncing: { wake: Y.pending, done: Y.idle },
  pending: { wake: Y.pending, done: Y.syncing },
};
