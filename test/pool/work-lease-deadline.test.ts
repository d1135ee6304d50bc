/**
 * A worker stops itself when its work lease cannot be renewed by its local
 * deadline (issue 12, item 6; src/pool/work-lease-deadline.ts), through the
 * binary: the test holds the journal's write lock (on Postgres,
 * ATOMIC_TEST_JOURNAL=postgres: the work queue's table, locked against
 * writes), so the coordinator stays responsive (it pings the silent worker)
 * but cannot commit any heartbeat.
 * Past its deadline the worker kills its stage and commits nothing; once the
 * lock is let go the stage runs again elsewhere and the run completes, with
 * the killed copy never having finished.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { Database } from "bun:sqlite";
import pg from "pg";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, groupAlive } from "../e2e/support.ts";

import { untilExists } from "../helpers/gate.ts";
const ONE = join(import.meta.dir, "fixtures", "one-stage.ts");

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

e2eTest("a worker that cannot renew its work lease by its deadline kills its stage and commits nothing", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = `echo $$ > ${d}/stage-$$.pid; ${untilExists(`${d}/gate`)}; echo $$ >> ${d}/ends; echo ok`;
  const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "2", "--work-lease-ms", "2000", "--json"], { home });
  const first: string = await waitUntil(() => readdirSync(d).find((f) => f.startsWith("stage-")) ?? "", 30_000, "the stage to start");
  const pid = Number(/stage-(\d+)\.pid/.exec(first)![1]);
  const unlock = await holdWriteLock(home); // no heartbeat commits from here on
  try {
    await waitUntil(() => !groupAlive(pid), 20_000, "the worker to kill its stage");
  } finally {
    await unlock();
  }
  writeFileSync(join(d, "gate"), "");
  expect(await proc.exited).toBe(0);
  const result = JSON.parse((await new Response(proc.stdout).text()).trim().split("\n").pop()!);
  expect(result.outputs.text).toBe("ok");
  // The killed copy never finished; another one did.
  const ends = readFileSync(join(d, "ends"), "utf8").trim().split("\n");
  expect(ends).toHaveLength(1);
  expect(ends[0]).not.toBe(String(pid));
  const logs = join(home, "artifacts", result.runId, "worker-logs");
  const said = readdirSync(logs).filter((f) => f !== "coordinator.log" && existsSync(join(logs, f))).map((f) => readFileSync(join(logs, f), "utf8"));
  expect(said.join("")).toMatch(/its lease could not be renewed by its deadline; killing the stage, committing nothing/);
});

/** Takes the lock every heartbeat's commit needs and holds it until the returned function is called. */
async function holdWriteLock(home: string): Promise<() => Promise<void>> {
  const url = journalUrlForHome(home);
  if (!url) {
    const db = new Database(join(home, "atomic.db"));
    db.run("begin immediate");
    return async () => {
      db.run("rollback");
      db.close();
    };
  }
  const u = new URL(url);
  const schema = u.searchParams.get("schema")!;
  u.search = "";
  const client = new pg.Client({ connectionString: u.toString(), options: `-c search_path=${schema}` });
  await client.connect();
  await client.query("begin");
  await client.query("lock table work_items in exclusive mode"); // reads go on; no update of an item commits
  return async () => {
    await client.query("rollback");
    await client.end();
  };
}
