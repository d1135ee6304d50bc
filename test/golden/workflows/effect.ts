/**
 * The side effect of every tool step in the golden workflows: appends the
 * step's idempotency key to the file named by GOLDEN_SIDE_FILE (when set)
 * and returns `value`. A replay that re-ran a recorded step would show up
 * in that file. The path comes from the environment, not from inputs, so
 * it is not part of any recorded step's arguments.
 */

import { appendFileSync } from "node:fs";

export function effect<T>(value: T): (info: { idempotencyKey: string }) => T {
  return ({ idempotencyKey }) => {
    const file = process.env.GOLDEN_SIDE_FILE;
    if (file) appendFileSync(file, `${idempotencyKey}\n`);
    return value;
  };
}
