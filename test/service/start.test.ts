/**
 * Idempotent starts through the binary: `atomic run --id KEY` (a second
 * start gets the run, finished or live; other inputs are refused; a key
 * that could be a generated id's prefix is refused), and `POST /api/runs`
 * on the service (one run for one id, other inputs refused, a path outside
 * the allowed directories refused, no token refused), counting runs and
 * the workflow's side effects.
 */

import { afterEach, expect, test } from "bun:test";
import { mkdirSync, copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { trackHomes } from "../helpers/homes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { expectOneSentenceError, listRuns } from "../e2e/support.ts";
import { COUNT, cleanHome, effects, startServe } from "./sched-support.ts";

const track = trackHomes();
const homes: string[] = [];
afterEach(async () => {
  for (const h of homes.splice(0)) await cleanHome(h);
});

function newHome(): { home: string; dir: string; log: string } {
  const dir = makeTempDir("atomic-start-");
  const home = join(dir, "home");
  track(home);
  homes.push(home);
  return { home, dir, log: join(dir, "effects.log") };
}

test("atomic run --id: a second start with the same id and inputs gets the run; other inputs are refused (exit 2)", async () => {
  const { home, log } = newHome();
  const first = await runAtomic(["run", COUNT, "--id", "Nightly-2026-12-01", "--input", `log=${log}`, "--input", "tag=a"], { home });
  expect(first.code).toBe(0);
  expect(first.stdout).toContain('"tag": "a"');
  const again = await runAtomic(["run", COUNT, "--input", "tag=a", "--input", `log=${log}`, "--id", "nightly-2026-12-01"], { home });
  expect(again.code).toBe(0);
  expect(again.stdout).toContain("run nightly-2026-12-01 exists (completed): not started again");
  expect(again.stdout).toContain('"tag": "a"');
  const other = await runAtomic(["run", COUNT, "--id", "nightly-2026-12-01", "--input", `log=${log}`, "--input", "tag=b"], { home });
  expect(other.code).toBe(2);
  expect(expectOneSentenceError(other.stderr).message).toBe("a run with id nightly-2026-12-01 exists and it was started with other inputs.");
  expect((await listRuns(home)).map((r) => r.id)).toEqual(["nightly-2026-12-01"]);
  expect(effects(log)).toEqual(["a"]);
  const shown = await runAtomic(["show", "nightly-2026-12-01", "--json"], { home });
  expect(shown.code).toBe(0);
});

test("atomic run --id while that run is live: the second start follows it to its end; one run, one side effect", async () => {
  const { home, log } = newHome();
  const args = ["run", COUNT, "--id", "job-live", "--input", `log=${log}`, "--input", "sleepMs=2500"];
  const driver = runAtomic(args, { home });
  await waitUntil(() => effects(log).length === 1, 30_000, "the first start's side effect");
  const follower = await runAtomic(args, { home });
  expect(follower.code).toBe(0);
  expect(follower.stdout).toContain("run job-live exists (running): following it");
  expect(follower.stdout).toContain("run job-live completed");
  expect((await driver).code).toBe(0);
  expect((await listRuns(home)).length).toBe(1);
  expect(effects(log)).toEqual(["x"]);
});

test("atomic run --id refuses an id that could be (the start of) a generated run id, and malformed ones, before anything is written", async () => {
  const { home, log } = newHome();
  for (const [id, problem] of [
    ["01m8rf", "could be taken for (the start of) a generated run id"],
    ["has space", "must be 1-100 characters"],
    ["_lead", "must be 1-100 characters"],
    ["a:b", "must be 1-100 characters"],
  ] as const) {
    const r = await runAtomic(["run", COUNT, "--id", id, "--input", `log=${log}`], { home });
    expect(r.code).toBe(2);
    expect(expectOneSentenceError(r.stderr).message).toContain(problem);
  }
  expect(effects(log)).toEqual([]);
  expect(await listRuns(home)).toEqual([]);
});

test("POST /api/runs: one run per id, other inputs refused, paths outside the allowed directory refused, the token required", async () => {
  const { home, dir, log } = newHome();
  const allowed = join(dir, "allowed");
  const outside = join(dir, "outside");
  mkdirSync(allowed);
  mkdirSync(outside);
  copyFileSync(COUNT, join(allowed, "count.ts"));
  copyFileSync(COUNT, join(outside, "count.ts"));
  // A registered workflow of the service's directory, started by its name.
  mkdirSync(join(dir, ".atomic", "workflows"), { recursive: true });
  copyFileSync(COUNT, join(dir, ".atomic", "workflows", "counter.ts"));
  mkdirSync(home, { recursive: true, mode: 0o700 });
  writeFileSync(join(home, "config.json"), JSON.stringify({ service: { workflowDirs: [allowed] } }));
  const { url, token } = await startServe({ home, cwd: dir }, ["--no-schedules"]);
  const post = (body: unknown, auth = true) =>
    fetch(`${url}api/runs`, { method: "POST", headers: auth ? { authorization: `Bearer ${token}` } : {}, body: JSON.stringify(body) });
  const start = { workflow: join(allowed, "count.ts"), inputs: { log, tag: "api" }, id: "order-4711" };

  const anonymous = await post(start, false);
  expect(anonymous.status).toBe(401);
  expect(((await anonymous.json()) as { error: { code: string } }).error.code).toBe("token_required");

  const first = await post(start);
  expect(first.status).toBe(201);
  expect(await first.json()).toMatchObject({ runId: "order-4711", created: true, url: "/api/runs/order-4711" });
  const second = await post(start);
  expect(second.status).toBe(200);
  expect(await second.json()).toMatchObject({ runId: "order-4711", created: false });

  const conflict = await post({ ...start, inputs: { log, tag: "other" } });
  expect(conflict.status).toBe(409);
  expect(((await conflict.json()) as { error: { code: string } }).error.code).toBe("run_id_conflict");

  for (const path of [join(outside, "count.ts"), join(allowed, "..", "outside", "count.ts")]) {
    const refused = await post({ workflow: path, inputs: { log, tag: "outside" } });
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("workflow_not_allowed");
  }
  const badId = await post({ ...start, id: "abc123" });
  expect(badId.status).toBe(400);

  // Two requests with one id at once: one run.
  const race = await Promise.all([1, 2].map(() => post({ ...start, id: "order-race", inputs: { log, tag: "race" } })));
  for (const r of race) {
    expect([200, 201]).toContain(r.status);
    expect(((await r.json()) as { runId: string }).runId).toBe("order-race");
  }

  const byName = await post({ workflow: "counter", inputs: { log, tag: "named" } });
  expect(byName.status).toBe(201);
  const named = (await byName.json()) as { runId: string };

  // Follow both to their end with GET /api/runs/:id.
  for (const id of ["order-4711", "order-race", named.runId]) {
    await waitUntil(async () => {
      const r = (await (await fetch(`${url}api/runs/${id}`, { headers: { authorization: `Bearer ${token}` } })).json()) as { run: { status: string } };
      return r.run.status === "completed";
    }, 30_000, `run ${id} to complete`);
  }
  const runs = await listRuns(home);
  expect(runs.map((r) => r.id).sort()).toEqual([named.runId, "order-4711", "order-race"].sort());
  expect(effects(log).sort()).toEqual(["api", "named", "race"]);
});

test("POST /api/runs without any allowed directory configured refuses every path", async () => {
  const { home, dir, log } = newHome();
  const { url, token } = await startServe({ home, cwd: dir }, ["--no-schedules"]);
  const r = await fetch(`${url}api/runs`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify({ workflow: COUNT, inputs: { log } }) });
  expect(r.status).toBe(403);
  expect(await listRuns(home)).toEqual([]);
});
