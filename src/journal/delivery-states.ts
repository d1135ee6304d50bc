/**
 * The states of one delivery: a message on its way to one stage (a row of
 * `deliveries`, ./messages.ts). `atomic inbox`, the status page and
 * `atomic attach` show them; docs/design/state-machines.md draws them.
 *
 *   queued ──▶ delivered ──▶ receipt-unverified
 *     │            │   └─────────────┐
 *     │            ▼                 ▼
 *     │         received ──▶ session-replaced
 *     ├──▶ stage-terminal
 *     └──▶ undeliverable (reason)
 *
 * - queued: recorded, waiting for its stage (bound to a started stage, or
 *   for the first stage of its path to start).
 * - delivered: handed to the stage's runner (live, or in the request of an
 *   attempt before it started). Stays so while that attempt runs.
 * - received: the runner confirmed that a model request carried it (the
 *   model saw it).
 * - receipt-unverified: the attempt it was handed to ended and its runner
 *   cannot confirm the model saw it (a CLI agent, a shell stage's stdin),
 *   or it ended before any model request carried it; the reason says which.
 * - session-replaced: a retry replaced the session it was handed to (the
 *   stage's next attempt, perhaps on another worker); the reason says
 *   whether it was delivered again to the new session.
 * - stage-terminal: its stage ended for good before the message reached it.
 * - undeliverable: it can never be delivered, for the reason given (the run
 *   ended, the child workflow holding the stage finished).
 *
 * Events: hand (to the runner), confirm (the runner saw a model request
 * carry it), end (its attempt ended unconfirmed), replace (a retry replaced
 * the session), stageEnded, giveUp. Only the run's driver moves a delivery
 * past queued, under its lease. The rows change through SQL updates fenced
 * by the states an event may start from (`deliveryStatesFrom`), so the
 * backends never spell the drawing out themselves; a move the table does
 * not hold throws (`nextDeliveryState`, src/shared/state-machine.ts).
 */

import { nextState, type Transitions } from "../shared/state-machine.ts";

export const DELIVERY_STATES = [
  "queued",
  "delivered",
  "received",
  "receipt-unverified",
  "session-replaced",
  "stage-terminal",
  "undeliverable",
] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];

export const DELIVERY_EVENTS = ["hand", "confirm", "end", "replace", "stageEnded", "giveUp"] as const;
export type DeliveryEvent = (typeof DELIVERY_EVENTS)[number];

export const DELIVERY_TRANSITIONS: Transitions<DeliveryState, DeliveryEvent> = {
  queued: { hand: "delivered", stageEnded: "stage-terminal", giveUp: "undeliverable" },
  delivered: { confirm: "received", end: "receipt-unverified", replace: "session-replaced" },
  received: { replace: "session-replaced" },
  "receipt-unverified": { replace: "session-replaced" },
  "session-replaced": {},
  "stage-terminal": {},
  undeliverable: {},
};

/** The states a message was handed to a stage in: a fresh attempt of that stage is given these messages again. */
export const HANDED_STATES: readonly DeliveryState[] = ["delivered", "received", "receipt-unverified", "session-replaced"];

/** States as an SQL list (`'delivered', 'received'`): constants of this file, never input. */
export function sqlStates(states: readonly DeliveryState[]): string {
  return states.map((s) => `'${s}'`).join(", ");
}

/** The state `event` moves a delivery in `from` to; throws IllegalTransition for a move the table does not hold. */
export function nextDeliveryState(from: DeliveryState, event: DeliveryEvent): DeliveryState {
  return nextState("delivery", DELIVERY_TRANSITIONS, from, event);
}

/** The states `event` moves a delivery out of (what a backend's conditional update names in its `where`), and where to. */
export function deliveryStatesFrom(event: DeliveryEvent): { from: DeliveryState[]; to: DeliveryState } {
  const from = DELIVERY_STATES.filter((s) => DELIVERY_TRANSITIONS[s][event] !== undefined && DELIVERY_TRANSITIONS[s][event] !== s);
  return { from, to: DELIVERY_TRANSITIONS[from[0]!][event]! };
}
