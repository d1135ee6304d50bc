/**
 * The state machine helper (src/shared/state-machine.ts): a move the table
 * holds changes the state and is reported once as {from, to, event}; an
 * event absorbed where it is (a move back to the same state) is reported to
 * the caller but not to the listener; an illegal one throws, names the
 * machine, the state and the event, and leaves the state as it was.
 */

import { describe, expect, test } from "bun:test";
import { IllegalTransition, Machine, type StateChange, type Transitions } from "../../src/shared/state-machine.ts";

const STATES = { off: "off", on: "on", broken: "broken" } as const;
type State = (typeof STATES)[keyof typeof STATES];
const EVENTS = { flip: "flip", drop: "drop" } as const;
type Event = (typeof EVENTS)[keyof typeof EVENTS];
const TABLE: Transitions<State, Event> = {
  off: { flip: "on", drop: "broken" },
  on: { flip: "off", drop: "broken" },
  broken: { drop: "broken" },
};

describe("Machine", () => {
  test("a legal move changes the state and is reported once", () => {
    const m = new Machine("the switch", TABLE, STATES.off);
    const seen: StateChange<State, Event>[] = [];
    m.onChange = (c) => seen.push(c);
    expect(m.fire(EVENTS.flip)).toEqual({ from: "off", to: "on", event: "flip" });
    expect(m.state).toBe("on");
    expect(m.is(STATES.on, STATES.broken)).toBe(true);
    expect(m.is(STATES.off)).toBe(false);
    expect(seen).toEqual([{ from: "off", to: "on", event: "flip" }]);
  });

  test("an absorbed event keeps the state and tells no listener", () => {
    const m = new Machine("the switch", TABLE, STATES.broken);
    const seen: StateChange<State, Event>[] = [];
    m.onChange = (c) => seen.push(c);
    expect(m.fire(EVENTS.drop)).toEqual({ from: "broken", to: "broken", event: "drop" });
    expect(seen).toEqual([]);
  });

  test("an illegal move throws, names machine, state and event, and changes nothing", () => {
    const m = new Machine("the switch", TABLE, STATES.broken);
    let err: unknown;
    try {
      m.fire(EVENTS.flip);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(IllegalTransition);
    expect((err as IllegalTransition).message).toBe('internal: the switch cannot take "flip" in state "broken"');
    expect(err).toMatchObject({ machine: "the switch", from: "broken", event: "flip", name: "IllegalTransition" });
    expect(m.state).toBe("broken");
  });
});
