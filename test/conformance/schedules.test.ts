/**
 * The schedule store of every journal backend (journal/schedules.ts): add
 * refuses a taken name, get/list return what was added (inputs as JSON,
 * by name), pause and delete say whether the schedule existed, and the tick
 * cursor moves only by compare-and-set: of concurrent advances from one
 * cursor exactly one wins, and the buffered tick is part of what is
 * compared. The scheduler's exactly-once rests on that last promise.
 */

import { afterEach, describe, expect, test } from "bun:test";
import type { Journal } from "../../src/journal/journal.ts";
import type { NewSchedule } from "../../src/journal/schedules.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

const schedule = (name: string, extra: Partial<NewSchedule> = {}): NewSchedule => ({
  name,
  cron: "0 9 * * 1-5",
  timezone: "Europe/Berlin",
  workflow: "/srv/workflows/report.ts",
  inputs: { dir: "src", depth: 2, tags: ["a", "b"], nested: { on: true } },
  cwd: "/srv",
  overlap: "skip",
  catchUp: "skip",
  createdAt: 1_000,
  ...extra,
});

for (const backend of BACKENDS) {
  describe(`${backend.name}: schedules`, () => {
    async function journal(): Promise<Journal> {
      const j = await backend.open(makeTempDir());
      open.push(j);
      return j;
    }

    test(`${backend.name}: add, get, list, pause and delete`, async () => {
      const j = await journal();
      expect(await j.schedules.add(schedule("nightly", { overlap: "buffer-one", catchUp: "run-once" }))).toBe(true);
      expect(await j.schedules.add(schedule("another", { timezone: null }))).toBe(true);
      expect(await j.schedules.add(schedule("nightly", { cron: "* * * * *" }))).toBe(false);
      const got = await j.schedules.get("nightly");
      expect(got).toEqual({
        ...schedule("nightly", { overlap: "buffer-one", catchUp: "run-once" }),
        paused: false,
        updatedAt: 1_000,
        lastTickAt: null,
        lastRunId: null,
        bufferedTickAt: null,
      });
      expect((await j.schedules.list()).map((s) => s.name)).toEqual(["another", "nightly"]);
      expect((await j.schedules.get("another"))!.timezone).toBeNull();
      expect(await j.schedules.get("missing")).toBeUndefined();

      expect(await j.schedules.setPaused("nightly", true, 2_000)).toBe(true);
      expect(await j.schedules.get("nightly")).toMatchObject({ paused: true, updatedAt: 2_000 });
      expect(await j.schedules.setPaused("missing", true, 2_000)).toBe(false);
      await j.schedules.recordRun("nightly", "sched-nightly-trigger-x", 3_000);
      expect((await j.schedules.get("nightly"))!.lastRunId).toBe("sched-nightly-trigger-x");

      expect(await j.schedules.delete("nightly")).toBe(true);
      expect(await j.schedules.delete("nightly")).toBe(false);
      expect((await j.schedules.list()).map((s) => s.name)).toEqual(["another"]);
    });

    test(`${backend.name}: the tick cursor moves by compare-and-set; of concurrent advances from one cursor exactly one wins`, async () => {
      const j = await journal();
      await j.schedules.add(schedule("job"));
      const start = { lastTickAt: null, bufferedTickAt: null };
      const racers = await Promise.all(
        Array.from({ length: 8 }, (_, i) => j.schedules.advance("job", start, { lastTickAt: 10_000, lastRunId: `run-${i}` }, 5_000)),
      );
      expect(racers.filter(Boolean).length).toBe(1);
      const after = (await j.schedules.get("job"))!;
      expect(after.lastTickAt).toBe(10_000);
      expect(after.lastRunId).toBe(`run-${racers.indexOf(true)}`);
      // A stale cursor loses; the current one wins; a lastRunId left out keeps the last run.
      expect(await j.schedules.advance("job", start, { lastTickAt: 20_000 }, 6_000)).toBe(false);
      expect(await j.schedules.advance("job", { lastTickAt: 10_000, bufferedTickAt: null }, { lastTickAt: 20_000, bufferedTickAt: 20_000 }, 6_000)).toBe(true);
      expect(await j.schedules.get("job")).toMatchObject({ lastTickAt: 20_000, bufferedTickAt: 20_000, lastRunId: after.lastRunId, updatedAt: 6_000 });
      // The buffered tick is compared too: starting it (the cursor unchanged) is won once.
      const buffered = { lastTickAt: 20_000, bufferedTickAt: 20_000 };
      const starts = await Promise.all([1, 2].map(() => j.schedules.advance("job", buffered, { lastTickAt: 20_000, bufferedTickAt: null, lastRunId: "buffered-run" }, 7_000)));
      expect(starts.filter(Boolean).length).toBe(1);
      expect(await j.schedules.get("job")).toMatchObject({ bufferedTickAt: null, lastRunId: "buffered-run" });
      expect(await j.schedules.advance("missing", start, { lastTickAt: 1 }, 1)).toBe(false);
    });
  });
}
