/**
 * A process that takes one heavy slot (heavy.ts; shared through
 * ATOMIC_TEST_HEAVY_SLOTS_DIR) for test/helpers/heavy.test.ts: it prints
 * "asking", then "held" once it holds a slot, keeps it until a line comes
 * on its stdin, and prints "released".
 */

import { withHeavySlot } from "./heavy.ts";

console.log("asking");
await withHeavySlot(async () => {
  console.log("held");
  for await (const _ of console) break;
});
console.log("released");
