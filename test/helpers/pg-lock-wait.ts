/**
 * For Postgres tests of a statement that must wait for a row another
 * transaction holds: instead of sleeping and checking that it has not
 * finished, wait until the database says a session waits for a lock.
 */

import type pg from "pg";
import { waitUntil } from "./atomic.ts";

/** Waits until a session of the database `client` is connected to waits for a lock (pg_stat_activity). */
export async function untilSomeoneWaitsForLock(client: pg.ClientBase | pg.Pool, timeoutMs = 20_000): Promise<void> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  await waitUntil(async () => (await client.query<{ n: number }>(sql)).rows[0]!.n > 0, timeoutMs, "a session to wait for a lock");
}
