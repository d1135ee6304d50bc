/** The delivery states' table (src/journal/delivery-states.ts), move by move: every listed move and nothing else. */

import { describe } from "bun:test";
import { DELIVERY_EVENTS, DELIVERY_STATES, DELIVERY_TRANSITIONS } from "../../src/journal/delivery-states.ts";
import { testTransitions } from "../helpers/transitions.ts";

describe("delivery states", () => {
  testTransitions(
    "delivery",
    DELIVERY_TRANSITIONS,
    Object.fromEntries(DELIVERY_STATES.map((s) => [s, s])),
    Object.fromEntries(DELIVERY_EVENTS.map((e) => [e, e])),
    [
      ["queued", "hand", "delivered"],
      ["queued", "stageEnded", "stage-terminal"],
      ["queued", "giveUp", "undeliverable"],
      ["delivered", "confirm", "received"],
      ["delivered", "end", "receipt-unverified"],
      ["delivered", "replace", "session-replaced"],
      ["received", "replace", "session-replaced"],
      ["receipt-unverified", "replace", "session-replaced"],
    ],
  );
});
