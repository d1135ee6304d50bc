/**
 * FleetExecutor's two state machines (src/fleet/fleet-executor-state.ts),
 * table-driven: every legal move, and every other (state, event) pair
 * throws. The executor's behaviour in these states is tested end to end
 * with worker hosts on Postgres (hosts.test.ts, network.test.ts, and the
 * other tests of this folder).
 */

import { describe } from "bun:test";
import {
  HEARING_EVENTS as HE,
  HEARING_STATES as H,
  HEARING_TRANSITIONS,
  SYNC_EVENTS as YE,
  SYNC_STATES as Y,
  SYNC_TRANSITIONS,
} from "../../src/fleet/fleet-executor-state.ts";
import { testTransitions } from "../helpers/transitions.ts";

describe("fleet executor: hearing", () => {
  testTransitions("the fleet executor's listener", HEARING_TRANSITIONS, H, HE, [
    [H.idle, HE.watch, H.connecting],
    [H.idle, HE.close, H.closed],
    [H.connecting, HE.listened, H.listening],
    [H.connecting, HE.lost, H.polling],
    [H.connecting, HE.close, H.closed],
    [H.listening, HE.lost, H.polling],
    [H.listening, HE.close, H.closed],
    [H.polling, HE.lost, H.polling],
    [H.polling, HE.relisten, H.connecting],
    [H.polling, HE.close, H.closed],
    [H.closed, HE.lost, H.closed],
    [H.closed, HE.close, H.closed],
  ]);
});

describe("fleet executor: syncing", () => {
  testTransitions("the fleet executor's sync", SYNC_TRANSITIONS, Y, YE, [
    [Y.idle, YE.wake, Y.syncing],
    [Y.syncing, YE.wake, Y.pending],
    [Y.syncing, YE.done, Y.idle],
    [Y.pending, YE.wake, Y.pending],
    [Y.pending, YE.done, Y.syncing],
  ]);
});
