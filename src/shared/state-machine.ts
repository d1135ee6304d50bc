/**
 * A finite state machine as this code base writes them
 * (docs/design/state-machines.md): a const object of states and one of
 * events (the types derived from them), and one table from (state, event)
 * to the next state. `nextState` is the one transition function: a pair the
 * table does not hold is an illegal transition and throws
 * `IllegalTransition`, naming the machine, the state and the event; it is a
 * bug in the caller, never a condition to handle. A pair that leads back to
 * its own state (`lost --lose--> lost`) is legal and says the event is
 * absorbed there.
 *
 * `Machine` holds one object's current state: `fire(event)` is its only
 * way to change it (the one setState), and reports each change as
 * `{ from, to, event }` to its listener (tests, traces). Whatever data a
 * state carries (a process, a promise, why it failed) stays on the owning
 * object, set and cleared by the method that fires the event.
 */

export type Transitions<S extends string, E extends string> = { readonly [K in S]: { readonly [V in E]?: S } };

export interface StateChange<S extends string, E extends string> {
  from: S;
  to: S;
  event: E;
}

export class IllegalTransition extends Error {
  override name = "IllegalTransition";
  constructor(
    readonly machine: string,
    readonly from: string,
    readonly event: string,
  ) {
    super(`internal: ${machine} cannot take "${event}" in state "${from}"`);
  }
}

/** The state `event` leads to from `from`; throws IllegalTransition when the table holds no such move. */
export function nextState<S extends string, E extends string>(machine: string, table: Transitions<S, E>, from: S, event: E): S {
  const to = table[from][event];
  if (to === undefined) throw new IllegalTransition(machine, from, event);
  return to;
}

export class Machine<S extends string, E extends string> {
  private current: S;
  /** Told of every change of state (not of an event absorbed where it is). */
  onChange: ((change: StateChange<S, E>) => void) | undefined;

  constructor(
    readonly name: string,
    readonly table: Transitions<S, E>,
    initial: S,
  ) {
    this.current = initial;
  }

  get state(): S {
    return this.current;
  }

  is(...states: S[]): boolean {
    return states.includes(this.current);
  }

  /** Takes `event`: the move it makes (`from === to` when it is absorbed); throws IllegalTransition when it is not allowed here. */
  fire(event: E): StateChange<S, E> {
    const from = this.current;
    const to = nextState(this.name, this.table, from, event);
    this.current = to;
    const change = { from, to, event };
    if (to !== from) this.onChange?.(change);
    return change;
  }
}
