/**
 * Schedules through the binary: `atomic schedule add/list/show/pause/
 * unpause/trigger/delete`, their bad input (one sentence and a hint, exit
 * 2, nothing written), and `atomic serve` starting the ticks' runs: with
 * two services on one home every tick makes exactly one run (runs counted,
 * and the workflow's side effects), and `--no-schedules` starts none.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { jsonOf, runAtomic, waitUntil } from "../helpers/atomic.ts";
import { trackHomes } from "../helpers/homes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { expectOneSentenceError, listRuns } from "../e2e/support.ts";
import { COUNT, cleanHome, counterGrows, effects, serviceState, startServe } from "./sched-support.ts";

const track = trackHomes();
const homes: string[] = [];
afterEach(async () => {
  for (const h of homes.splice(0)) await cleanHome(h);
});

function newHome(): { home: string; dir: string; log: string } {
  const dir = makeTempDir("atomic-schedule-");
  const home = join(dir, "home");
  track(home);
  homes.push(home);
  return { home, dir, log: join(dir, "effects.log") };
}

interface Shown {
  name: string;
  cron: string;
  timezone: string | null;
  paused: boolean;
  overlap: string;
  catchUp: string;
  inputs: Record<string, unknown>;
  nextTickAt: number | null;
  lastRunId: string | null;
}

test("schedule add, list, show, pause, unpause, trigger and delete", async () => {
  const { home, dir, log } = newHome();
  const at = (args: string[]) => runAtomic(["schedule", ...args], { home, cwd: dir });
  const added = await at(["add", "weekdays", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", COUNT, "--input", `log=${log}`, "--input", "tag=sched", "--overlap", "buffer-one"]);
  expect(added.code).toBe(0);
  expect(added.stdout).toMatch(/^schedule weekdays added: count, next tick \d{4}-\d\d-\d\d 09:00:00 Europe\/Berlin$/m);
  expect((await at(["add", "hourly", "--cron", "0 * * * *", COUNT, "--input", `log=${log}`, "--catch-up", "run-once"])).code).toBe(0);

  const list = await at(["list"]);
  expect(list.code).toBe(0);
  expect(list.stdout.split("\n")[0]).toMatch(/^NAME\s+CRON\s+TZ\s+WORKFLOW\s+STATE/);
  expect(list.stdout).toMatch(/^hourly\s+0 \* \* \* \*\s+UTC\s+/m);
  expect(list.stdout).toMatch(/^weekdays\s+0 9 \* \* 1-5\s+Europe\/Berlin\s+/m);

  const show = jsonOf(await at(["show", "weekdays", "--json"])) as Shown;
  expect(show).toMatchObject({ name: "weekdays", cron: "0 9 * * 1-5", timezone: "Europe/Berlin", paused: false, overlap: "buffer-one", catchUp: "skip", inputs: { log, tag: "sched", sleepMs: 0 }, lastRunId: null });
  expect(new Intl.DateTimeFormat("en-GB", { timeZone: "Europe/Berlin", hour: "2-digit", minute: "2-digit" }).format(show.nextTickAt!)).toBe("09:00");
  expect((await at(["show", "weekdays"])).stdout).toMatch(/^next tick \d{4}-\d\d-\d\d 09:00:00 Europe\/Berlin$/m);

  expect((await at(["pause", "weekdays"])).code).toBe(0);
  const paused = jsonOf(await at(["show", "weekdays", "--json"])) as Shown;
  expect(paused).toMatchObject({ paused: true, nextTickAt: null });
  expect((await at(["unpause", "weekdays"])).code).toBe(0);
  expect((jsonOf(await at(["show", "weekdays", "--json"])) as Shown).paused).toBe(false);

  // trigger: one run now, in the directory the schedule was added in, without a service.
  const trigger = await at(["trigger", "weekdays", "--json"]);
  expect(trigger.code).toBe(0);
  const { runId } = jsonOf(trigger) as { runId: string };
  expect(runId).toMatch(/^sched-weekdays-trigger-\d{8}t\d{6}\.\d{3}z$/);
  await waitUntil(async () => (await listRuns(home)).some((r) => r.id === runId && r.status === "completed"), 30_000, "the triggered run to complete");
  expect(effects(log)).toEqual(["sched"]);
  expect((jsonOf(await at(["show", "weekdays", "--json"])) as Shown).lastRunId).toBe(runId);

  const deleted = await at(["delete", "weekdays"]);
  expect(deleted.code).toBe(0);
  expect(deleted.stdout).toContain("schedule weekdays deleted (its runs stay)");
  const gone = await at(["show", "weekdays"]);
  expect(gone.code).toBe(2);
  expect(expectOneSentenceError(gone.stderr).message).toBe("there is no schedule named weekdays.");
  expect(((jsonOf(await at(["list", "--json"])) as { schedules: Shown[] }).schedules).map((s) => s.name)).toEqual(["hourly"]);
  expect((await listRuns(home)).map((r) => r.id)).toEqual([runId]);
});

test("schedule add refuses a bad cron, an unknown time zone, an unknown workflow, a duplicate name and a bad policy (exit 2, nothing written)", async () => {
  const { home, dir, log } = newHome();
  const at = (args: string[]) => runAtomic(["schedule", ...args], { home, cwd: dir });
  expect((await at(["add", "taken", "--cron", "0 9 * * *", COUNT, "--input", `log=${log}`])).code).toBe(0);
  const cases: [string[], RegExp][] = [
    [["add", "a", "--cron", "0 25 * * *", COUNT, "--input", `log=${log}`], /^--cron "0 25 \* \* \*" is not a cron expression/],
    [["add", "a", "--cron", "every day", COUNT, "--input", `log=${log}`], /is not a cron expression/],
    [["add", "a", "--cron", "0 9 * * *", "--tz", "Mars/Olympus", COUNT, "--input", `log=${log}`], /^--tz "Mars\/Olympus" is not a time zone this machine knows\.$/],
    [["add", "a", "--cron", "0 9 * * *", "no-such-workflow"], /no-such-workflow/],
    [["add", "taken", "--cron", "0 9 * * *", COUNT, "--input", `log=${log}`], /^a schedule named taken exists already\.$/],
    [["add", "a", "--cron", "0 9 * * *", "--overlap", "queue", COUNT, "--input", `log=${log}`], /^--overlap must be one of skip, buffer-one, allow/],
    [["add", "a", "--cron", "0 9 * * *", "--catch-up", "all", COUNT, "--input", `log=${log}`], /^--catch-up must be one of skip, run-once/],
    [["add", "a", "--cron", "0 9 * * *", COUNT], /input "log" is required/],
    [["add", "Upper", "--cron", "0 9 * * *", COUNT, "--input", `log=${log}`], /^schedule name "Upper" must be/],
    [["add", "a", COUNT, "--input", `log=${log}`], /needs --cron/],
    [["pause", "nope"], /^there is no schedule named nope\.$/],
    [["launch", "a"], /^atomic schedule has no action "launch"\.$/],
  ];
  for (const [args, message] of cases) {
    const r = await at(args);
    expect({ args, code: r.code }).toEqual({ args, code: 2 });
    const e = expectOneSentenceError(r.stderr);
    expect(e.message).toMatch(message);
    expect(e.hint).toBeDefined();
  }
  expect(((jsonOf(await at(["list", "--json"])) as { schedules: Shown[] }).schedules).map((s) => s.name)).toEqual(["taken"]);
});

test("two services on one home start each tick exactly once; --no-schedules starts none", async () => {
  const { home, dir, log } = newHome();
  expect((await runAtomic(["schedule", "add", "every2", "--cron", "*/2 * * * * *", COUNT, "--input", `log=${log}`, "--overlap", "allow"], { home, cwd: dir })).code).toBe(0);

  // A service without schedules: two ticks pass (the second one due), nothing starts. With no run unfinished its
  // recovery duty waits for another process's commit (src/service/recovery.ts): one is made here (a schedule added
  // and deleted again), and a whole scan after it shows the service went on past the due ticks.
  const idle = await startServe({ home, cwd: dir }, ["--no-schedules"]);
  const { nextTickAt } = jsonOf(await runAtomic(["schedule", "show", "every2", "--json"], { home, cwd: dir })) as Shown;
  await waitUntil(() => Date.now() > nextTickAt! + 2_000, 30_000, "two ticks to be due");
  const scans = (await serviceState(idle)).recovery.scans as number;
  expect((await runAtomic(["schedule", "add", "probe", "--cron", "0 0 1 1 *", COUNT, "--input", `log=${log}`], { home, cwd: dir })).code).toBe(0);
  expect((await runAtomic(["schedule", "delete", "probe"], { home, cwd: dir })).code).toBe(0);
  await waitUntil(async () => (await serviceState(idle)).recovery.scans >= scans + 1, 30_000, "a recovery scan after the commit");
  expect(await listRuns(home)).toEqual([]);
  idle.proc.kill("SIGINT");
  expect(await idle.proc.exited).toBe(0);

  const a = await startServe({ home, cwd: dir });
  const b = await startServe({ home, cwd: dir });
  const started = () => [...a.out.lines, ...b.out.lines].filter((l) => / schedule every2: tick .* started run /.test(l));
  await waitUntil(() => started().length >= 4, 60_000, "four ticks started");
  // No more ticks; the services drive what was started to its end.
  expect((await runAtomic(["schedule", "pause", "every2"], { home, cwd: dir })).code).toBe(0);
  // A pass that read the schedule before the pause may still start its tick: the active service finishes it and two more.
  const active = (await serviceState(a)).state === "active" ? a : b;
  await counterGrows(active, (st) => st.schedules.passes, 3, "two more schedule passes");
  const ids = started().map((l) => /started run (\S+)$/.exec(l)![1]!);
  expect(new Set(ids).size).toBe(ids.length); // no tick started by both services
  await waitUntil(async () => (await listRuns(home)).filter((r) => r.status === "completed").length === ids.length, 60_000, "every tick's run to complete");
  for (const s of [a, b]) {
    s.proc.kill("SIGINT");
    expect(await s.proc.exited).toBe(0);
  }
  expect(started().length).toBe(ids.length);
  const runs = await listRuns(home);
  expect(runs.map((r) => r.id).sort()).toEqual([...ids].sort());
  for (const id of ids) expect(id).toMatch(/^sched-every2-\d{8}t\d{6}z$/);
  expect(effects(log).length).toBe(ids.length);
}, 120_000);
