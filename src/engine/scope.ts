/**
 * Replay positions.
 *
 * Every primitive call takes the next position in its scope: "0", "1", ...
 * at the top of a run; a parallel or chain at position "4" gives each of its
 * branches a scope of its own ("4.0", "4.1"), whose steps are "4.0.0",
 * "4.0.1", ... So a step's position depends only on the path the workflow
 * code took, never on how concurrent branches interleaved in time, and a
 * resumed run (where recorded steps return at once) asks for the same
 * positions in whatever order.
 *
 * The current scope travels with the async call chain (AsyncLocalStorage),
 * so code inside a branch that calls the outer `ctx` still lands in the
 * branch's scope.
 */

import { AsyncLocalStorage } from "node:async_hooks";

export class Scope {
  private counter = 0;
  constructor(
    /** Identifies the run this scope belongs to (a child run has its own scopes). */
    readonly owner: object,
    readonly path: string,
    readonly signal: AbortSignal,
  ) {}

  nextPosition(): string {
    const n = this.counter++;
    return this.path === "" ? String(n) : `${this.path}.${n}`;
  }

  branch(position: string, index: number, signal: AbortSignal = this.signal): Scope {
    return new Scope(this.owner, `${position}.${index}`, signal);
  }
}

const storage = new AsyncLocalStorage<Scope>();

export function currentScope(owner: object, fallback: Scope): Scope {
  const scope = storage.getStore();
  return scope && scope.owner === owner ? scope : fallback;
}

export function inScope<T>(scope: Scope, fn: () => T): T {
  return storage.run(scope, fn);
}
