/**
 * oncePerTick (src/shared/once-per-tick.ts): a burst of calls in one turn
 * runs the function once, after the turn's synchronous code; a call after
 * it ran schedules it again.
 */

import { expect, test } from "bun:test";
import { oncePerTick } from "../../src/shared/once-per-tick.ts";

test("a burst runs once, after the synchronous code; the next burst runs again", async () => {
  const ran: string[] = [];
  const nudge = oncePerTick(() => ran.push("ran"));
  for (let i = 0; i < 500; i++) nudge();
  ran.push("sync code done");
  await Promise.resolve();
  expect(ran).toEqual(["sync code done", "ran"]);
  nudge();
  nudge();
  await Promise.resolve();
  expect(ran).toEqual(["sync code done", "ran", "ran"]);
});
