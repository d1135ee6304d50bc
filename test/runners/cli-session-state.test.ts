/**
 * The CLI agent session's state machine (src/runners/cli-agents/cli-session-state.ts),
 * table-driven: every legal move, and every other (state, event) pair throws.
 * The session's behaviour in each state is tested through real (fake) agent
 * CLIs in cli-agents.test.ts.
 */

import { describe } from "bun:test";
import { SESSION_EVENTS as E, SESSION_STATES as S, SESSION_TRANSITIONS } from "../../src/runners/cli-agents/cli-session-state.ts";
import { testTransitions } from "../helpers/transitions.ts";

describe("CLI session transitions", () => {
  testTransitions("a CLI agent session", SESSION_TRANSITIONS, S, E, [
    [S.open, E.wrapUp, S.wrappingUp],
    [S.open, E.stop, S.stopping],
    [S.open, E.end, S.ended],
    [S.wrappingUp, E.stop, S.stopping],
    [S.wrappingUp, E.end, S.ended],
    [S.stopping, E.end, S.ended],
  ]);
});
