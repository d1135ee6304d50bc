/**
 * Status views against the number of runs: a journal of 1,000 finished
 * runs against one of 10,000 (3 stages each), measured alternately in this
 * process, the journals side by side.
 *
 * 1. `/metrics` (JournalMetrics.render) in its steady state: before each
 *    scrape one live run appends one event (something changed, as on a busy
 *    machine), so a scrape reads one changed run, its new event and the live
 *    run's lease. Target: cost per scrape at 10k ÷ at 1k <= 1.5. Why 1.5: the
 *    work per scrape no longer depends on the number of runs, but the index
 *    seeks it makes (changes since the cursor, the live run, its lease) go
 *    through b-trees one level deeper at 10x the rows, and the page cache
 *    holds less of a bigger file; half again as much covers that and the
 *    noise of a shared 2-core machine. A scrape that still visited every run
 *    (as before: every run listed, per scrape) would show about 10, and the
 *    note prints what listing every run alone costs at each size.
 * 2. The run list (first page of 50, built without the server's 100 ms
 *    response cache: two queries plus one grouped stage-index read).
 *    Target: 10k ÷ 1k <= 2. Its page costs the same at any size; the total
 *    count for paging (`count(*)` over the roots' index) is the one part
 *    that grows with the runs, a few hundred microseconds at 10k; 2 leaves
 *    room for that. A list that replayed each run's events would grow with
 *    their histories instead.
 */

import { join } from "node:path";
import { SqliteJournal } from "../src/journal/sqlite/sqlite-journal.ts";
import { RunSummaries } from "../src/status/summaries.ts";
import { seedRun } from "../test/helpers/seed-runs.ts";
import { alternate, fmt, median, removeTempDir, spread, tempDir, TMPFS, type Bench, type Result } from "./lib.ts";
import { closeLiveScrape, openLiveScrape, scrapeMs, type LiveScrape } from "./live-scrape.ts";

const SMALL = 1_000;
const LARGE = 10_000;
const SCRAPES = 200;
const LISTS = 100;
const REPS = 7;
const METRICS_TARGET = 1.5;
const LIST_TARGET = 2;

interface Subject extends LiveScrape {
  runs: number;
  summaries: RunSummaries;
}

async function subject(dir: string, runs: number): Promise<Subject> {
  const journal = await SqliteJournal.open(join(dir, "atomic.db"), { durability: "normal" });
  for (let i = 0; i < runs; i++) await seedRun(journal, { stages: 3, workflow: `wf-${i % 7}`, status: i % 10 === 0 ? "failed" : "completed" });
  const live = await openLiveScrape(journal);
  await live.metrics.render(); // the first scrape reads everything once
  return { ...live, runs, summaries: new RunSummaries(journal) };
}

async function listMs(s: Subject): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < LISTS; i++) await s.summaries.list({ limit: 50, offset: 0 });
  return (performance.now() - t0) / LISTS;
}

/** What every scrape did before (listing every run, children included), for the note. */
async function listEveryRunMs(s: Subject): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < 5; i++) await s.journal.listRuns({ rootsOnly: false });
  return (performance.now() - t0) / 5;
}

const bench: Bench = {
  name: "status-scale",
  title: `status views: /metrics scrape and run list at ${fmt(SMALL, 0)} vs ${fmt(LARGE, 0)} runs`,
  async run(): Promise<Result[]> {
    const dirs = [tempDir("atomic-bench-1k-", TMPFS), tempDir("atomic-bench-10k-", TMPFS)];
    const subjects: Subject[] = [];
    try {
      subjects.push(await subject(dirs[0]!, SMALL), await subject(dirs[1]!, LARGE));
      const [small, large] = subjects as [Subject, Subject];
      // warm-up
      await scrapeMs(small, SCRAPES);
      await scrapeMs(large, SCRAPES);
      const scrapes = await alternate(REPS, { small: () => scrapeMs(small, SCRAPES), large: () => scrapeMs(large, SCRAPES) });
      const lists = await alternate(REPS, { small: () => listMs(small), large: () => listMs(large) });
      const everyRun = await alternate(3, { small: () => listEveryRunMs(small), large: () => listEveryRunMs(large) });
      const check = await large.metrics.render();
      if (!check.includes(`atomic_runs{status="completed"} ${LARGE - LARGE / 10}`)) throw new Error(`the 10k scrape counts wrong:\n${check}`);

      const scrapeRatio = median(scrapes.large) / median(scrapes.small);
      const listRatio = median(lists.large) / median(lists.small);
      return [
        {
          bench: "status-scale",
          label: `/metrics scrape at ${fmt(LARGE, 0)} runs (steady state, one change per scrape)`,
          value: median(scrapes.large) * 1000,
          unit: "us",
          baseline: { label: `the same at ${fmt(SMALL, 0)} runs`, value: median(scrapes.small) * 1000, unit: "us" },
          ratio: { value: scrapeRatio, meaning: `cost per scrape at ${fmt(LARGE, 0)} ÷ at ${fmt(SMALL, 0)} runs` },
          target: { text: `ratio <= ${METRICS_TARGET}`, ok: scrapeRatio <= METRICS_TARGET },
          notes: [
            `${fmt(SMALL, 0)}: ${spread(scrapes.small.map((x) => x * 1000), "us")}; ${fmt(LARGE, 0)}: ${spread(scrapes.large.map((x) => x * 1000), "us")} (${SCRAPES} scrapes per sample)`,
            `listing every run once (what each scrape did before, before reading any event): ${fmt(median(everyRun.small))} ms at ${fmt(SMALL, 0)}, ${fmt(median(everyRun.large))} ms at ${fmt(LARGE, 0)}`,
          ],
        },
        {
          bench: "status-scale",
          label: `run list (first 50 of ${fmt(LARGE, 0)} runs, uncached)`,
          value: median(lists.large) * 1000,
          unit: "us",
          baseline: { label: `the same of ${fmt(SMALL, 0)} runs`, value: median(lists.small) * 1000, unit: "us" },
          ratio: { value: listRatio, meaning: `cost per list at ${fmt(LARGE, 0)} ÷ at ${fmt(SMALL, 0)} runs` },
          target: { text: `ratio <= ${LIST_TARGET}`, ok: listRatio <= LIST_TARGET },
          notes: [`${fmt(SMALL, 0)}: ${spread(lists.small.map((x) => x * 1000), "us")}; ${fmt(LARGE, 0)}: ${spread(lists.large.map((x) => x * 1000), "us")} (${LISTS} lists per sample)`],
        },
      ];
    } finally {
      for (const s of subjects) await closeLiveScrape(s);
      for (const d of dirs) removeTempDir(d);
    }
  },
};

export default bench;
