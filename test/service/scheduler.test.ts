/**
 * The scheduler's decisions, driven by a test clock (injected; the wall
 * clock never decides) over a real SQLite journal's schedule store: ticks
 * across Europe/Berlin's daylight-saving changes, each overlap policy, each
 * catch-up policy after a downtime, two schedulers racing for one tick, the
 * repair of a claimed tick whose run was never recorded, and tick run ids
 * that every service derives alike. What starts a run is a recorder here;
 * through the binary (schedule-cli.test.ts) it is a real detached driver.
 */

import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import type { CatchUpPolicy, OverlapPolicy } from "../../src/journal/schedules.ts";
import { REPAIR_MS, Scheduler, tickRunId, type RunState, type SchedulerEvent } from "../../src/service/scheduler.ts";
import { makeTempDir, removeTempDir } from "../helpers/temp.ts";

const MIN = 60_000;

let dir: string;
let journal: SqliteJournal;

beforeEach(async () => {
  dir = makeTempDir("atomic-sched-");
  journal = await SqliteJournal.open(join(dir, "atomic.db"));
});
afterEach(async () => {
  await journal.close();
  removeTempDir(dir);
});

/** A scheduler over the journal's store with a clock and run states the test sets. */
function harness(now: number) {
  const clock = { t: now, now: () => clock.t };
  const states = new Map<string, RunState>();
  const started: string[] = [];
  const make = () =>
    new Scheduler({
      store: journal.schedules,
      clock,
      async start(_s, runId) {
        started.push(runId);
        states.set(runId, "live");
      },
      async runState(runId) {
        return states.get(runId) ?? "absent";
      },
    });
  return { clock, states, started, scheduler: make(), make };
}

async function addSchedule(name: string, cron: string, createdAt: number, opts: { tz?: string; overlap?: OverlapPolicy; catchUp?: CatchUpPolicy } = {}) {
  expect(
    await journal.schedules.add({
      name,
      cron,
      timezone: opts.tz ?? null,
      workflow: "builtin:loop-until-done",
      inputs: {},
      cwd: dir,
      overlap: opts.overlap ?? "skip",
      catchUp: opts.catchUp ?? "skip",
      createdAt,
    }),
  ).toBe(true);
}

/** Steps the clock from its time to `until` in `step`s, a pass at each, every started run ending at once. */
async function drive(h: ReturnType<typeof harness>, until: number, step: number, endRuns = true) {
  while (h.clock.t < until) {
    h.clock.t = Math.min(until, h.clock.t + step);
    await h.scheduler.pass();
    if (endRuns) for (const id of h.started) h.states.set(id, "ended");
  }
}


describe("ticks across daylight-saving changes (Europe/Berlin)", () => {
  test("spring forward: 02:30 does not exist on 29 March 2026 and fires once at 03:00 CEST; the days around fire at 02:30", async () => {
    const h = harness(Date.parse("2026-03-27T12:00:00Z"));
    await addSchedule("night", "30 2 * * *", h.clock.t, { tz: "Europe/Berlin" });
    await drive(h, Date.parse("2026-03-31T12:00:00Z"), 10 * MIN);
    expect(h.started).toEqual([
      tickRunId("night", Date.parse("2026-03-28T01:30:00Z")), // 02:30 CET
      tickRunId("night", Date.parse("2026-03-29T01:00:00Z")), // 03:00 CEST: the first time after the gap
      tickRunId("night", Date.parse("2026-03-30T00:30:00Z")), // 02:30 CEST
      tickRunId("night", Date.parse("2026-03-31T00:30:00Z")),
    ]);
  });

  test("fall back: 02:30 exists twice on 25 October 2026 and fires once, at its first occurrence", async () => {
    const h = harness(Date.parse("2026-10-23T12:00:00Z"));
    await addSchedule("night", "30 2 * * *", h.clock.t, { tz: "Europe/Berlin" });
    await drive(h, Date.parse("2026-10-26T12:00:00Z"), 10 * MIN);
    expect(h.started).toEqual([
      tickRunId("night", Date.parse("2026-10-24T00:30:00Z")), // 02:30 CEST
      tickRunId("night", Date.parse("2026-10-25T00:30:00Z")), // 02:30 CEST, not again at 02:30 CET (01:30Z)
      tickRunId("night", Date.parse("2026-10-26T01:30:00Z")), // 02:30 CET
    ]);
  });

  test("fall back: an hourly schedule fires in both copies of the repeated hour, once each", async () => {
    const h = harness(Date.parse("2026-10-24T23:30:00Z"));
    await addSchedule("hourly", "0 * * * *", h.clock.t, { tz: "Europe/Berlin" });
    await drive(h, Date.parse("2026-10-25T03:30:00Z"), 5 * MIN);
    expect(h.started).toEqual(["2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"].map((t) => tickRunId("hourly", Date.parse(t))));
    expect(new Set(h.started).size).toBe(h.started.length);
  });
});

describe("overlap policies (a tick while the last run still runs)", () => {
  const t0 = Date.parse("2026-12-01T08:30:00Z");
  const tick = (h: number) => tickRunId("job", Date.parse(`2026-12-01T${String(h).padStart(2, "0")}:00:00Z`));

  test("skip (the default): the tick starts nothing and is not kept", async () => {
    const h = harness(t0);
    await addSchedule("job", "0 * * * *", t0);
    await drive(h, Date.parse("2026-12-01T11:30:00Z"), 10 * MIN, false); // the 09:00 run never ends
    expect(h.started).toEqual([tick(9)]);
    h.states.set(tick(9), "ended");
    await drive(h, Date.parse("2026-12-01T12:10:00Z"), 10 * MIN, false);
    expect(h.started).toEqual([tick(9), tick(12)]);
  });

  test("buffer-one: the first overlapping tick is kept and starts when the run ends; later ones are skipped", async () => {
    const h = harness(t0);
    await addSchedule("job", "0 * * * *", t0, { overlap: "buffer-one" });
    await drive(h, Date.parse("2026-12-01T11:30:00Z"), 10 * MIN, false);
    expect(h.started).toEqual([tick(9)]);
    expect((await journal.schedules.get("job"))!.bufferedTickAt).toBe(Date.parse("2026-12-01T10:00:00Z"));
    h.states.set(tick(9), "ended");
    await h.scheduler.pass();
    expect(h.started).toEqual([tick(9), tick(10)]);
    expect((await journal.schedules.get("job"))!.bufferedTickAt).toBeNull();
    h.states.set(tick(10), "ended");
    await drive(h, Date.parse("2026-12-01T12:10:00Z"), 10 * MIN, false);
    expect(h.started).toEqual([tick(9), tick(10), tick(12)]);
  });

  test("allow: every tick starts its run", async () => {
    const h = harness(t0);
    await addSchedule("job", "0 * * * *", t0, { overlap: "allow" });
    await drive(h, Date.parse("2026-12-01T11:30:00Z"), 10 * MIN, false);
    expect(h.started).toEqual([tick(9), tick(10), tick(11)]);
  });
});

describe("catch-up after a downtime (no service ran for hours)", () => {
  const t0 = Date.parse("2026-12-01T08:30:00Z");
  const back = Date.parse("2026-12-01T13:20:00Z"); // 09:00 … 13:00 passed unseen; 13:00 is 20 minutes late

  test("skip (the default): the missed ticks start nothing; the next tick on time does", async () => {
    const h = harness(t0);
    await addSchedule("job", "0 * * * *", t0);
    h.clock.t = back;
    await h.scheduler.pass();
    expect(h.started).toEqual([]);
    expect((await journal.schedules.get("job"))!.lastTickAt).toBe(Date.parse("2026-12-01T13:00:00Z"));
    await drive(h, Date.parse("2026-12-01T14:05:00Z"), 5 * MIN);
    expect(h.started).toEqual([tickRunId("job", Date.parse("2026-12-01T14:00:00Z"))]);
  });

  test("run-once: one run for the latest missed tick, however late; none for the others", async () => {
    const h = harness(t0);
    await addSchedule("job", "0 * * * *", t0, { catchUp: "run-once" });
    h.clock.t = back;
    await h.scheduler.pass();
    await h.scheduler.pass();
    expect(h.started).toEqual([tickRunId("job", Date.parse("2026-12-01T13:00:00Z"))]);
    h.states.set(h.started[0]!, "ended");
    await drive(h, Date.parse("2026-12-01T14:05:00Z"), 5 * MIN);
    expect(h.started).toEqual(["13", "14"].map((hh) => tickRunId("job", Date.parse(`2026-12-01T${hh}:00:00Z`))));
  });

  test("a tick seen within the grace period (a service restarted quickly) is on time under both policies", async () => {
    for (const catchUp of ["skip", "run-once"] as const) {
      const h = harness(t0);
      await addSchedule(`job-${catchUp}`, "0 * * * *", t0, { catchUp });
      h.clock.t = Date.parse("2026-12-01T09:00:30Z");
      await h.scheduler.pass();
      expect(h.started).toEqual([tickRunId(`job-${catchUp}`, Date.parse("2026-12-01T09:00:00Z"))]);
    }
  });
});

describe("exactly one run per tick", () => {
  test("tick run ids are derived from the schedule and the tick alone", () => {
    const t = Date.parse("2026-12-01T08:00:00Z");
    expect(tickRunId("nightly", t) as string).toBe("sched-nightly-20261201t080000z");
    expect(tickRunId("nightly", t)).toBe(tickRunId("nightly", t));
    expect(tickRunId("nightly", t + 1000)).not.toBe(tickRunId("nightly", t));
  });

  test("two schedulers on one journal passing at once: each tick is started by one of them", async () => {
    const h = harness(Date.parse("2026-12-01T08:59:50Z"));
    await addSchedule("job", "* * * * *", h.clock.t, { overlap: "allow" });
    const other = h.make();
    for (let i = 0; i < 18; i++) {
      h.clock.t += 20_000;
      await Promise.all([h.scheduler.pass(), other.pass()]);
    }
    expect(h.started.length).toBe(6);
    expect(new Set(h.started).size).toBe(6);
  });

  test("a restarted service (a new scheduler on the same journal) does not start a tick the previous one started", async () => {
    const h = harness(Date.parse("2026-12-01T08:59:50Z"));
    await addSchedule("job", "* * * * *", h.clock.t, { overlap: "allow" });
    h.clock.t = Date.parse("2026-12-01T09:00:10Z");
    await h.scheduler.pass();
    const restarted = h.make();
    await restarted.pass();
    await restarted.pass();
    expect(h.started).toEqual([tickRunId("job", Date.parse("2026-12-01T09:00:00Z"))]);
    h.clock.t = Date.parse("2026-12-01T09:01:05Z");
    await restarted.pass();
    expect(h.started).toEqual(["09:00", "09:01"].map((t) => tickRunId("job", Date.parse(`2026-12-01T${t}:00Z`))));
  });

  test("a paused schedule starts nothing; unpaused, only ticks from then on count (catch-up skip)", async () => {
    const h = harness(Date.parse("2026-12-01T08:30:00Z"));
    await addSchedule("job", "0 * * * *", h.clock.t);
    await journal.schedules.setPaused("job", true, h.clock.t);
    await drive(h, Date.parse("2026-12-01T10:30:00Z"), 10 * MIN);
    expect(h.started).toEqual([]);
    await journal.schedules.setPaused("job", false, h.clock.t);
    await drive(h, Date.parse("2026-12-01T11:05:00Z"), 5 * MIN);
    expect(h.started).toEqual([tickRunId("job", Date.parse("2026-12-01T11:00:00Z"))]);
  });

  test("a tick claimed by a scheduler that died before its run was recorded is started again under the same id", async () => {
    const h = harness(Date.parse("2026-12-01T08:59:00Z"));
    await addSchedule("job", "0 * * * *", h.clock.t);
    // The first scheduler wins the tick and dies: its start never records anything.
    const dying = new Scheduler({ store: journal.schedules, clock: h.clock, start: async () => {}, runState: async () => "absent" });
    h.clock.t = Date.parse("2026-12-01T09:00:05Z");
    await dying.pass();
    expect((await journal.schedules.get("job"))!.lastRunId).toBe(tickRunId("job", Date.parse("2026-12-01T09:00:00Z")));
    await h.scheduler.pass();
    expect(h.started).toEqual([]); // too soon: its claimer may still be starting it
    h.clock.t += REPAIR_MS;
    await h.scheduler.pass();
    expect(h.started).toEqual([tickRunId("job", Date.parse("2026-12-01T09:00:00Z"))]);
  });

  test("a start that fails is reported once, not at every pass; the tick is not started twice", async () => {
    const h = harness(Date.parse("2026-12-01T08:59:50Z"));
    await addSchedule("job", "* * * * *", h.clock.t);
    const events: SchedulerEvent[] = [];
    let attempts = 0;
    const failing = new Scheduler({
      store: journal.schedules,
      clock: h.clock,
      start: async () => {
        attempts++;
        throw new Error("the disk is full");
      },
      runState: async () => "absent",
      onEvent: (e) => events.push(e),
    });
    h.clock.t = Date.parse("2026-12-01T09:00:01Z");
    for (let i = 0; i < 5; i++) await failing.pass();
    expect(attempts).toBe(1);
    expect(events.filter((e) => e.type === "error")).toEqual([{ type: "error", schedule: "job", message: "the disk is full" }]);
  });
});
