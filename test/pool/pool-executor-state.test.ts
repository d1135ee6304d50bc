/**
 * The worker pool's state machine as the root sees it
 * (src/pool/pool-executor-state.ts), table-driven: every legal move, and
 * every other (state, event) pair throws. PoolExecutor's behaviour in these
 * states (a coordinator lost and replaced, a pool that failed for good, a
 * coordinator that does not answer) is tested end to end in this folder
 * (fresh-pool.test.ts, liveness.test.ts, pool.test.ts).
 */

import { describe } from "bun:test";
import { POOL_EVENTS as E, POOL_STATES as S, POOL_TRANSITIONS } from "../../src/pool/pool-executor-state.ts";
import { testTransitions } from "../helpers/transitions.ts";

describe("pool executor transitions", () => {
  testTransitions("the worker pool", POOL_TRANSITIONS, S, E, [
    [S.idle, E.start, S.starting],
    [S.idle, E.close, S.closed],
    [S.starting, E.up, S.running],
    [S.starting, E.lose, S.lost],
    [S.starting, E.close, S.closed],
    [S.running, E.lose, S.lost],
    [S.running, E.close, S.closed],
    [S.lost, E.lose, S.lost],
    [S.lost, E.restart, S.restarting],
    [S.lost, E.close, S.closed],
    [S.restarting, E.start, S.starting],
    [S.restarting, E.lose, S.restarting],
    [S.restarting, E.close, S.closed],
    [S.closed, E.lose, S.closed],
    [S.closed, E.close, S.closed],
  ]);
});
