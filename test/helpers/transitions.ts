/**
 * Table-driven tests of a state machine (src/shared/state-machine.ts): the
 * test lists every legal move itself, as [from, event, to], and this checks
 * the machine's table against it pair by pair: each listed move leads where
 * the list says, and every (state, event) pair the list does not hold
 * throws IllegalTransition. One bun test per pair, named for the move.
 */

import { expect, test } from "bun:test";
import { IllegalTransition, nextState, type Transitions } from "../../src/shared/state-machine.ts";

export function testTransitions<S extends string, E extends string>(
  machine: string,
  table: Transitions<S, E>,
  states: Record<string, S>,
  events: Record<string, E>,
  legal: readonly (readonly [S, E, S])[],
): void {
  const all = Object.values(states);
  for (const [from, , to] of legal) {
    if (!all.includes(from) || !all.includes(to)) throw new Error(`the expected moves name a state the machine does not have: ${from} -> ${to}`);
  }
  for (const from of all) {
    for (const event of Object.values(events)) {
      const move = legal.find(([f, e]) => f === from && e === event);
      if (move) {
        test(`${from} --${event}--> ${move[2]}`, () => {
          expect(nextState(machine, table, from, event)).toBe(move[2]);
        });
      } else {
        test(`${from} --${event}--> throws`, () => {
          expect(() => nextState(machine, table, from, event)).toThrow(IllegalTransition);
        });
      }
    }
  }
}
