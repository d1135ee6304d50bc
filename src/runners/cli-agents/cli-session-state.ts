/**
 * The life of one CLI agent stage (CliSession in cli-runner.ts): a small
 * state machine over the session's fate. Its agent processes come and go
 * inside it (one per turn for resume adapters, one for the conversation
 * for stream adapters, a new one to resume the session with a message);
 * the process of the moment is the session's `proc`, present while one
 * runs.
 *
 *   open ──wrapUp──▶ wrappingUp
 *     │                  │
 *    stop               stop
 *     ▼                  │
 *   stopping ◀───────────┘
 *
 *   open | wrappingUp | stopping ──end──▶ ended
 *
 * - open: messages are taken: written into the running stream agent's turn
 *   or queued, and queued ones are delivered when the turn ends (the next
 *   user turn, or a resumed session);
 * - wrappingUp: the budget ran out: the wrap-up text went into the running
 *   turn (stream agents) and the queue was dropped; the agent finishes what
 *   it is doing and no queued message is delivered any more;
 * - stopping: cancel or timeout: the running process and everything of the
 *   stage is being ended; the stage ends cancelled (or failed, timed out)
 *   once it is gone, without starting another process;
 * - ended: the stage's result is built; a message now is refused.
 *
 * wrapUp and stop are requests from outside that may come at any moment:
 * the session takes them only where the table has them (wrapUp in open,
 * stop in open and wrappingUp) and ignores them elsewhere. `end` comes
 * exactly once, from the session's own loop.
 */

import type { Transitions } from "../../shared/state-machine.ts";

export const SESSION_STATES = { open: "open", wrappingUp: "wrappingUp", stopping: "stopping", ended: "ended" } as const;
export type SessionState = (typeof SESSION_STATES)[keyof typeof SESSION_STATES];

export const SESSION_EVENTS = { wrapUp: "wrapUp", stop: "stop", end: "end" } as const;
export type SessionEvent = (typeof SESSION_EVENTS)[keyof typeof SESSION_EVENTS];

const S = SESSION_STATES;

export const SESSION_TRANSITIONS: Transitions<SessionState, SessionEvent> = {
  open: { wrapUp: S.wrappingUp, stop: S.stopping, end: S.ended },
  wrappingUp: { stop: S.stopping, end: S.ended },
  stopping: { end: S.ended },
  ended: {},
};
