/**
 * The back-off schedule (src/shared/backoff.ts): doubling from the first
 * wait up to the cap, jitter within its bounds on both sides, the cap
 * holding with jitter too.
 */

import { expect, test } from "bun:test";
import { backoffDelay, type Backoff } from "../../src/shared/backoff.ts";

const policy: Backoff = { firstMs: 100, maxMs: 1_000 };

test("without jitter: the first wait, doubling, then the cap", () => {
  expect([0, 1, 2, 3, 4, 5, 10].map((n) => backoffDelay(policy, n))).toEqual([100, 200, 400, 800, 1_000, 1_000, 1_000]);
  expect(backoffDelay({ ...policy, factor: 3 }, 2)).toBe(900);
  expect(backoffDelay(policy, -1)).toBe(100);
});

test("jitter spreads each wait within its fraction, both ways, and never past the cap", () => {
  const jittered = { ...policy, jitter: 0.2 };
  expect(backoffDelay(jittered, 1, () => 0)).toBe(160);
  expect(backoffDelay(jittered, 1, () => 0.5)).toBe(200);
  expect(backoffDelay(jittered, 1, () => 0.999_999)).toBe(240);
  expect(backoffDelay(jittered, 10, () => 0)).toBe(800);
  expect(backoffDelay(jittered, 10, () => 0.999_999)).toBe(1_000);
  for (let n = 0; n < 12; n++) {
    const nominal = Math.min(1_000, 100 * 2 ** n);
    for (let i = 0; i < 200; i++) {
      const d = backoffDelay(jittered, n);
      expect(d).toBeGreaterThanOrEqual(Math.round(nominal * 0.8));
      expect(d).toBeLessThanOrEqual(Math.min(1_000, Math.round(nominal * 1.2)));
    }
  }
});
