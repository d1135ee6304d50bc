/**
 * The steady state of `/metrics` that status-scale.ts and status-100k.ts
 * measure, in one place: a journal with one live run (leased, as a running
 * workflow's is), whose next event is appended before each scrape, so every
 * scrape reads one changed run, its new event and the live run's lease.
 * `scrapeMs` times the scrapes alone (the appends are not timed);
 * `closeLiveScrape` releases the lease and closes the journal.
 */

import { EVENT } from "../src/engine/journal-events.ts";
import type { Journal } from "../src/journal/journal.ts";
import type { Lease } from "../src/journal/runs.ts";
import { newRunId, type RunId } from "../src/shared/ids.ts";
import { thisProcessHolder } from "../src/shared/process-info.ts";
import { JournalMetrics } from "../src/status/metrics.ts";

export interface LiveScrape {
  journal: Journal;
  metrics: JournalMetrics;
  live: { runId: RunId; lease: Lease };
  ticks: number;
}

/** Starts the live run in `journal` (already seeded) and the metrics over it, not yet scraped. */
export async function openLiveScrape(journal: Journal): Promise<LiveScrape> {
  const runId = newRunId();
  const lease = await journal.acquireLease(runId, thisProcessHolder("bench"), { timeoutMs: 600_000 });
  await journal.append(lease, [
    {
      runId,
      type: EVENT.runStarted,
      payload: {},
      newRun: { rootId: runId, parentId: null, parentKey: null, depth: 0, workflowName: "live", workflowPath: "/bench/live.ts", workflowDigest: "bench", inputs: {} },
    },
  ]);
  return { journal, metrics: new JournalMetrics(journal), live: { runId, lease }, ticks: 0 };
}

/** Mean ms per steady-state scrape over `scrapes` scrapes (one appended event before each; the append is not timed). */
export async function scrapeMs(s: LiveScrape, scrapes: number): Promise<number> {
  let total = 0;
  for (let i = 0; i < scrapes; i++) {
    await s.journal.append(s.live.lease, [{ runId: s.live.runId, type: "bench_tick", payload: { i: s.ticks++ } }]);
    const t0 = performance.now();
    await s.metrics.render();
    total += performance.now() - t0;
  }
  return total / scrapes;
}

/** Releases the live run's lease (if it is still held) and closes the journal. */
export async function closeLiveScrape(s: LiveScrape): Promise<void> {
  await s.journal.releaseLease(s.live.lease).catch(() => {});
  await s.journal.close();
}
