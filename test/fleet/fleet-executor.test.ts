/**
 * The fleet executor's hearing machine (src/fleet/fleet-executor-state.ts)
 * against a real Postgres journal, in this process: the LISTEN connection
 * it holds is read from pg_stat_activity.
 * - connecting → listening at the first stage; a connection the server
 *   ends (pg_terminate_backend) → polling, and the next poll tick listens
 *   again on a new connection; close → closed, its connection gone.
 * - closed while connecting: the connection that attempt still makes is
 *   closed too (not left open for the rest of the process).
 */

import { afterEach, expect, test } from "bun:test";
import { FleetExecutor } from "../../src/fleet/fleet-executor.ts";
import type { FleetStore } from "../../src/journal/fleet.ts";
import { openJournal } from "../../src/journal/open.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { adminQuery, freshDatabase } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  removeTempDirs();
});

async function open(): Promise<{ journal: Journal; fleet: FleetStore; database: string }> {
  const url = await freshDatabase("fx");
  const journal = await openJournal({ home: makeTempDir("atomic-fx-"), durability: "normal", journalUrl: url });
  journals.push(journal);
  return { journal, fleet: journal.fleet!, database: new URL(url).pathname.slice(1) };
}

/** Backends of `database` whose last statement was a LISTEN. */
async function listeners(database: string): Promise<number[]> {
  const rows = await adminQuery<{ pid: number }>("select pid from pg_stat_activity where datname = $1 and query ilike 'listen %'", [database]);
  return rows.map((r) => r.pid);
}

test("listening, lost, polling, listening again on a new connection, closed", async () => {
  const { journal, fleet, database } = await open();
  const executor = new FleetExecutor({ fleet, work: journal.work, rootId: "run-fx" as RunId, leaseMs: 30_000 });
  executor.prepare();
  const [first] = (await waitUntil(async () => {
    const pids = await listeners(database);
    return pids.length === 1 ? pids : undefined;
  }, 30_000, "the LISTEN connection"))!;
  await adminQuery("select pg_terminate_backend($1)", [first]);
  const again = await waitUntil(async () => {
    const pids = await listeners(database);
    return pids.length === 1 && pids[0] !== first ? pids : undefined;
  }, 30_000, "a new LISTEN connection after the poll tick");
  expect(again).not.toContain(first);
  await executor.close();
  await waitUntil(async () => (await listeners(database)).length === 0, 30_000, "no LISTEN connection after close");
});

test("closed while connecting: the connection that attempt makes is closed", async () => {
  const { journal, fleet: real, database } = await open();
  const attempts: Promise<unknown>[] = [];
  const fleet: FleetStore = Object.assign(Object.create(real) as FleetStore, {
    listen: (...args: Parameters<FleetStore["listen"]>) => {
      const attempt = real.listen(...args);
      attempts.push(attempt);
      return attempt;
    },
  });
  const executor = new FleetExecutor({ fleet, work: journal.work, rootId: "run-fx" as RunId, leaseMs: 30_000 });
  executor.prepare();
  expect(attempts.length).toBe(1);
  await executor.close();
  await attempts[0]; // the attempt made its connection after the close
  await waitUntil(async () => (await listeners(database)).length === 0, 30_000, "no LISTEN connection after close");
  expect(attempts.length).toBe(1);
});
