/**
 * `atomic tui` with 1,000 runs in the journal and a 500-stage run open.
 *
 * 1. A redraw of the open run: its whole 200x60 frame drawn (ink's
 *    renderToString of the console's own view) from what was read, as
 *    after a key or a refresh. Target: the slowest of 50 <= 50 ms; printed
 *    as the ratio median ÷ 50 ms, with a 5-stage run's redraw as the
 *    baseline measured in the same run.
 * 2. A whole refresh (every 500 ms, off the keyboard's path: the read is
 *    asynchronous): read the run (report, totals) and the selected stage's
 *    conversation, then draw. Target: median <= 50 ms.
 * 3. A redraw of the run list (the first 500 of the 1,000 runs, as the
 *    console reads it). Target: slowest <= 50 ms.
 * 4. The RSS of the real binary (`atomic tui RUN` in a 200x60 tmux
 *    terminal) once it shows the 500-stage run and has redrawn it 10
 *    times. Target: <= 150 MB.
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createElement as h } from "react";
import { renderToString } from "ink";
import { SqliteJournal } from "../src/journal/sqlite/sqlite-journal.ts";
import { ConsoleData, rowKey } from "../src/cli/tui/console-data.ts";
import { ConsoleView, rowsOf, type ConsoleFrame } from "../src/cli/tui/console.ts";
import { makeStyle } from "../src/cli/style.ts";
import { seedRun } from "../test/helpers/seed-runs.ts";
import { Tmux, killTmux } from "../test/helpers/tmux.ts";
import { removeTempDirs as removeTestTempDirs } from "../test/helpers/temp.ts";
import { atomicBin, binaryEnv, fmt, median, removeTempDir, spread, tempDir, type Bench, type Result } from "./lib.ts";

const RUNS = 1_000;
const STAGES = 500;
const REDRAWS = 50;
const TARGET_MS = 50;
const RSS_TARGET_MB = 150;
const COLS = 200;
const ROWS = 60;
const USAGE = { inputTokens: 1200, outputTokens: 300, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 4500, turns: 2 };

/** `n` refreshes: read (what `read` returns), then draw the frame to a string; ms each, read and draw apart. */
async function redraws(n: number, read: () => Promise<Partial<ConsoleFrame>>, base: ConsoleFrame): Promise<{ read: number[]; draw: number[] }> {
  const st = makeStyle(false);
  const out = { read: [] as number[], draw: [] as number[] };
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const f = { ...base, ...(await read()) };
    const t1 = performance.now();
    const text = renderToString(h(ConsoleView, { f, cols: COLS, rows: ROWS, st, color: false, onAnswer() {}, onText() {} }), { columns: COLS });
    out.read.push(t1 - t0);
    out.draw.push(performance.now() - t1);
    if (!text.includes("atomic tui")) throw new Error(`the frame is not the console's:\n${text}`);
  }
  return out;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) / 1024;
}

/** The pid of this bench's `atomic tui RUN` (under the tmux server's shell). */
function consolePid(runId: string): number {
  const r = Bun.spawnSync(["pgrep", "-f", "-n", `${atomicBin()} tui ${runId}`], { stdout: "pipe" });
  const pid = Number(r.stdout.toString().trim());
  if (!pid) throw new Error("atomic tui is not running");
  return pid;
}

const bench: Bench = {
  name: "tui",
  title: `atomic tui: redraws with ${fmt(RUNS, 0)} runs and a ${STAGES}-stage run open; the console's RSS`,
  async run(): Promise<Result[]> {
    const home = tempDir("atomic-bench-tui-");
    const journal = await SqliteJournal.open(join(home, "atomic.db"), { durability: "normal" });
    const data = new ConsoleData(journal, home);
    try {
      for (let i = 0; i < RUNS - 2; i++) await seedRun(journal, { stages: 3, workflow: `wf-${i % 7}`, status: i % 10 === 0 ? "failed" : "completed" });
      const small = await seedRun(journal, { stages: 5, workflow: "small", artifactsDir: join(home, "artifacts"), agent: { runner: "openai", usage: USAGE } });
      const large = await seedRun(journal, { stages: STAGES, workflow: "large", artifactsDir: join(home, "artifacts"), agent: { runner: "openai", usage: USAGE } });
      const base: ConsoleFrame = { screen: "run", filter: {}, runIndex: 0, stageIndex: 250, scroll: 0, focus: "tree", mode: { kind: "none" } };
      const runRead = (id: string, stageIndex: number) => async () => {
        const detail = await data.detail(id);
        // The pane's text as its attach feed first reads it: the stage's transcript, of the selected row.
        const t = await data.source.transcript(await data.run(id), id === large ? "0.250.0" : "0.2.0", { stdout: 0, stderr: 0 }, detail.report);
        const of = rowKey(rowsOf(detail)[stageIndex]!);
        const conversation = "miss" in t ? { of, text: "", live: false, none: t.message } : { of, text: t.stdout.text, live: t.live };
        return { detail, conversation };
      };
      await redraws(3, runRead(large, base.stageIndex), base); // warm-up
      const largeTimes = await redraws(REDRAWS, runRead(large, base.stageIndex), base);
      const smallTimes = await redraws(REDRAWS, runRead(small, 2), { ...base, stageIndex: 2 });
      const listTimes = await redraws(REDRAWS, async () => ({ runs: await data.runs({}, 500) }), { ...base, screen: "runs", runIndex: 0 });

      // The real console's memory.
      const t = Tmux.start([atomicBin(), "tui", large], { env: binaryEnv(home), cwd: home, cols: COLS, rows: ROWS });
      let rss: number;
      try {
        await t.waitFor("✓ stage-10 ", 60_000);
        const pid = consolePid(large);
        // Ten of its refresh periods (500 ms): ten reads and redraws of the run.
        await Bun.sleep(10 * 500);
        rss = rssMb(pid);
      } finally {
        t.kill();
      }

      const worst = Math.max(...largeTimes.draw);
      const listWorst = Math.max(...listTimes.draw);
      const refresh = largeTimes.read.map((r, i) => r + largeTimes.draw[i]!);
      return [
        {
          bench: "tui",
          label: `redraw of the ${STAGES}-stage run (its ${COLS}x${ROWS} frame drawn), slowest of ${REDRAWS}`,
          value: worst,
          unit: "ms",
          baseline: { label: "the same redraw of a 5-stage run (median)", value: median(smallTimes.draw), unit: "ms" },
          ratio: { value: median(largeTimes.draw) / TARGET_MS, meaning: `median redraw ÷ the ${TARGET_MS} ms target` },
          target: { text: `slowest <= ${TARGET_MS} ms`, ok: worst <= TARGET_MS },
          notes: [
            `draw: ${STAGES} stages ${spread(largeTimes.draw)}; 5 stages ${spread(smallTimes.draw)}`,
            `the refresh's read before it (report, totals, conversation; off the keyboard's path): ${STAGES} stages ${spread(largeTimes.read)}; 5 stages ${spread(smallTimes.read)}`,
          ],
        },
        {
          bench: "tui",
          label: `a whole refresh of the ${STAGES}-stage run (read + draw), median of ${REDRAWS}`,
          value: median(refresh),
          unit: "ms",
          ratio: { value: median(refresh) / TARGET_MS, meaning: `median refresh ÷ ${TARGET_MS} ms` },
          target: { text: `median <= ${TARGET_MS} ms`, ok: median(refresh) <= TARGET_MS },
          notes: [spread(refresh)],
        },
        {
          bench: "tui",
          label: `redraw of the run list (500 of ${fmt(RUNS, 0)} runs), slowest of ${REDRAWS}`,
          value: listWorst,
          unit: "ms",
          ratio: { value: median(listTimes.draw) / TARGET_MS, meaning: `median redraw ÷ the ${TARGET_MS} ms target` },
          target: { text: `slowest <= ${TARGET_MS} ms`, ok: listWorst <= TARGET_MS },
          notes: [`draw ${spread(listTimes.draw)}; its read ${spread(listTimes.read)}`],
        },
        {
          bench: "tui",
          label: `RSS of atomic tui showing the ${STAGES}-stage run (${fmt(RUNS, 0)} runs in the journal)`,
          value: rss,
          unit: "MB",
          ratio: { value: rss / RSS_TARGET_MB, meaning: `RSS ÷ the ${RSS_TARGET_MB} MB target` },
          target: { text: `<= ${RSS_TARGET_MB} MB`, ok: rss <= RSS_TARGET_MB },
        },
      ];
    } finally {
      killTmux();
      await data.close();
      await journal.close();
      removeTestTempDirs();
      removeTempDir(home);
    }
  },
};

export default bench;
