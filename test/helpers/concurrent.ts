/**
 * Tests that run concurrently inside their file (bun's `test.concurrent`)
 * while the file keeps one cleanup after each test: bun runs `afterEach` as
 * soon as each concurrent test ends while the others go on, so a cleanup
 * that kills every process the file spawned and removes its temp dirs must
 * wait until no such test is still running (`whenIdle`). Each test keeps to
 * a home of its own; what one leaves is cleaned up once the last ends
 * (the file's afterAll checks still see every home).
 *
 *   afterEach(whenIdle(async () => { await killSpawned(); removeTempDirs(); }));
 *   concurrentTest("...", async () => { ... }, 120_000);
 */

import { test } from "bun:test";

let inFlight = 0;

/** A test that runs concurrently with the file's other concurrent tests. */
export function concurrentTest(name: string, fn: () => Promise<void>, timeoutMs?: number): void {
  test.concurrent(
    name,
    async () => {
      inFlight++;
      try {
        await fn();
      } finally {
        inFlight--;
      }
    },
    timeoutMs,
  );
}

/** An afterEach body that runs only once no concurrent test is still running (a sequential test: every time). */
export function whenIdle(cleanup: () => Promise<void> | void): () => Promise<void> {
  return async () => {
    if (inFlight === 0) await cleanup();
  };
}
