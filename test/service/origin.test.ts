/**
 * Runs searchable by origin (issue 29), through dist/atomic on either
 * journal (ATOMIC_TEST_JOURNAL=postgres for the Postgres pass): runs
 * started by `atomic run`, `rerun`, `fork`, a schedule's trigger and
 * `POST /api/runs` on `atomic serve`; `GET /api/runs?origin=` and `atomic
 * runs --origin` list each origin's runs and refuse an unknown one (400 /
 * exit 2, one sentence naming the valid ones). A run recorded before
 * `startedBy` was (its run_started edited back to that form) still matches
 * `schedule` by its id and no longer `cli`. `recovery` is checked where the
 * service recovers a run (recovery.test.ts).
 */

import { pgJson, sqliteJson, startOriginSql, type JsonText } from "../../src/journal/run-origin-sql.ts";
import { afterEach, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { trackHomes } from "../helpers/homes.ts";
import { adminQuery, journalUrlForHome } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { expectOneSentenceError, listRuns } from "../e2e/support.ts";
import { COUNT, cleanHome, startServe } from "./sched-support.ts";

const track = trackHomes();
const homes: string[] = [];
afterEach(async () => {
  for (const h of homes.splice(0)) await cleanHome(h);
});

const idOf = (stdout: string) => /atomic show (\S+)/.exec(stdout)![1]!;

/**
 * Removes `startedBy` from a run's run_started, as runs recorded before it was look, and the run's stored origin
 * with it, as the migration that stores origins (journal/run-origin-sql.ts) fills it from such an event.
 */
async function asRecordedBefore(home: string, runId: string): Promise<void> {
  const field = (json: JsonText) => startOriginSql("e.payload", "e.run_id", json);
  const url = journalUrlForHome(home);
  if (url) {
    const schema = new URL(url).searchParams.get("schema")!;
    await adminQuery(`update "${schema}".events set payload = (payload::jsonb - 'startedBy')::text where run_id = $1 and seq = 1`, [runId]);
    await adminQuery(`update "${schema}".runs set origin = (select ${field(pgJson)} from "${schema}".events e where e.run_id = runs.id and e.seq = 1) where id = $1`, [runId]);
    return;
  }
  const db = new Database(join(home, "atomic.db"));
  try {
    db.run("update events set payload = json_remove(payload, '$.startedBy') where run_id = ? and seq = 1", [runId]);
    db.run(`update runs set origin = (select ${field(sqliteJson)} from events e where e.run_id = runs.id and e.seq = 1) where id = ?`, [runId]);
  } finally {
    db.close();
  }
}

test("runs by origin: cli, rerun, fork, schedule, api through GET /api/runs?origin= and atomic runs --origin; bad origins refused", async () => {
  const dir = makeTempDir("atomic-origin-");
  const home = join(dir, "home");
  track(home);
  homes.push(home);
  const log = join(dir, "effects.log");
  mkdirSync(join(dir, ".atomic", "workflows"), { recursive: true });
  copyFileSync(COUNT, join(dir, ".atomic", "workflows", "counter.ts"));
  const at = (args: string[]) => runAtomic(args, { home, cwd: dir });

  const first = await at(["--json", "run", COUNT, "--input", `log=${log}`, "--input", "sleepMs=1"]);
  expect(first.code).toBe(0);
  const cli = (await listRuns(home))[0]!.id as string;
  const reran = await at(["rerun", cli]);
  expect(reran.code).toBe(0);
  const rerun = idOf(reran.stdout);
  const forked = await at(["fork", cli, "--at", "wait"]);
  expect(forked.code).toBe(0);
  const fork = idOf(forked.stdout);
  expect((await at(["schedule", "add", "nightly", "--cron", "0 3 * * *", COUNT, "--input", `log=${log}`])).code).toBe(0);
  const trigger = await at(["schedule", "trigger", "nightly", "--json"]);
  expect(trigger.code).toBe(0);
  const scheduled = (JSON.parse(trigger.stdout) as { runId: string }).runId;

  const { url, token } = await startServe({ home, cwd: dir }, ["--no-schedules"]);
  const posted = await fetch(`${url}api/runs`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify({ workflow: "counter", inputs: { log } }) });
  expect(posted.status).toBe(201);
  const api = ((await posted.json()) as { runId: string }).runId;
  await waitUntil(async () => (await listRuns(home)).filter((r) => r.status === "completed").length === 5, 60_000, "the five runs to complete");

  const get = (query: string) => fetch(`${url}api/runs?${query}`, { headers: { authorization: `Bearer ${token}` } });
  const byApi = async (origin: string) => {
    const res = await get(`origin=${origin}`);
    expect(res.status).toBe(200);
    const page = (await res.json()) as { runs: { id: string }[]; total: number };
    expect(page.total).toBe(page.runs.length);
    return page.runs.map((r) => r.id).sort();
  };
  const byCli = async (origin: string) => {
    const r = await at(["runs", "--origin", origin, "--json"]);
    expect(r.code).toBe(0);
    return r.stdout.trim() ? r.stdout.trim().split("\n").map((l) => (JSON.parse(l) as { id: string }).id).sort() : [];
  };
  const expected: Record<string, string[]> = { cli: [cli], rerun: [rerun], fork: [fork], schedule: [scheduled], api: [api], recovery: [] };
  for (const [origin, ids] of Object.entries(expected)) {
    expect([origin, await byApi(origin)]).toEqual([origin, ids.sort()]);
    expect([origin, await byCli(origin)]).toEqual([origin, ids.sort()]);
  }
  // Each run's origin in the list: the page's `origins`, the ORIGIN column and `origins` of atomic runs.
  const all = (await (await get("")).json()) as { runs: { id: string; origins: string[] }[] };
  const shown = Object.fromEntries(all.runs.map((r) => [r.id, r.origins]));
  expect(shown).toEqual({ [cli]: ["cli"], [rerun]: ["rerun"], [fork]: ["fork"], [scheduled]: ["schedule"], [api]: ["api"] });
  const json = (await at(["runs", "--json"])).stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; origins: string[] });
  expect(Object.fromEntries(json.map((r) => [r.id, r.origins]))).toEqual(shown);
  const table = (await runAtomic(["runs"], { home, cwd: dir, env: { COLUMNS: "250" } })).stdout.split("\n");
  expect(table[0]).toMatch(/\bORIGIN\b/);
  for (const [id, origins] of Object.entries(shown)) expect(table.find((l) => l.startsWith(id))).toMatch(new RegExp(`\\s${origins[0]}\\s`));
  // With the other filters: both must hold.
  expect(await (await get(`origin=cli&status=failed`)).json()).toMatchObject({ runs: [], total: 0 });

  const bad = await get("origin=page");
  expect(bad.status).toBe(400);
  expect(((await bad.json()) as { error: { code: string; message: string } }).error).toMatchObject({
    code: "bad_origin",
    message: 'origin must be one of schedule, api, cli, rerun, fork, recovery, got "page"',
  });
  const refused = await at(["runs", "--origin", "page"]);
  expect(refused.code).toBe(2);
  expect(expectOneSentenceError(refused.stderr).message).toBe('--origin must be one of schedule, api, cli, rerun, fork, recovery, got "page".');

  // Runs recorded before startedBy was: a schedule's is still known by its id; a command's is neither cli nor api.
  await asRecordedBefore(home, scheduled);
  await asRecordedBefore(home, cli);
  expect(await byCli("schedule")).toEqual([scheduled]);
  expect(await byCli("cli")).toEqual([]);
  expect(await byCli("api")).toEqual([api]);
}, 120_000);
