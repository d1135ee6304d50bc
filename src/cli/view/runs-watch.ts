/**
 * `atomic runs --watch`: the run list, redrawn live until Ctrl-C, for
 * people who will not open a browser. The same lines as the status page's
 * list (status, workflow, started, duration, stage counts, cost).
 *
 * On a terminal the block is redrawn in place every second; off a terminal
 * (a pipe, a log file) a new plain block is printed, under a time stamp,
 * whenever the list changed; with --json one `{"type":"runs",...}` line per
 * change.
 */

import { formatCost } from "../../runners/usage.ts";
import type { Journal } from "../../journal/journal.ts";
import type { RunStatus } from "../../journal/runs.ts";
import { RunSummaries, type RunSummary } from "../../status/summaries.ts";
import { stageCountsText } from "../../status/totals.ts";
import type { CliSession } from "../session.ts";
import { colorFor, formatDuration, formatTime } from "../style.ts";
import { out } from "../output.ts";
import { readEnv } from "../../shared/config/environment.ts";

const REFRESH_MS = 1000;

export async function watchRuns(s: CliSession, journal: Journal, filter: { status?: RunStatus | undefined; limit: number }): Promise<void> {
  const summaries = new RunSummaries(journal);
  const tty = process.stdout.isTTY === true && readEnv("TERM") !== "dumb" && !s.globals.json;
  let stopped = false;
  let wake: (() => void) | undefined;
  const onSignal = () => {
    stopped = true;
    wake?.();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  let last = "";
  try {
    if (tty) out("\x1b[2J\x1b[H");
    while (!stopped) {
      const page = await summaries.list({ status: filter.status, limit: filter.limit, offset: 0 });
      const lines = renderRows(s, page.runs);
      const text = lines.join("\n");
      const stamp = formatTime(Date.now()).slice(11, 19);
      if (s.globals.json) {
        if (text !== last) s.json({ type: "runs", at: Date.now(), total: page.total, runs: page.runs });
      } else if (tty) {
        const head = s.style.dim(`atomic runs · ${page.total} run(s) · ${stamp} · Ctrl-C to stop`);
        out(`\x1b[H${[head, "", ...lines].map((l) => `${l}\x1b[K`).join("\n")}\n\x1b[J`);
      } else if (text !== last) {
        out(`-- ${stamp} (${page.total} run(s))\n${text}\n\n`);
      }
      last = text;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, REFRESH_MS);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

function renderRows(s: CliSession, runs: RunSummary[]): string[] {
  const st = s.style;
  if (runs.length === 0) return ["no runs yet; start one with: atomic run <workflow file>"];
  const out = [st.dim(`${"RUN".padEnd(18)}  ${"STATUS".padEnd(11)}  ${"WORKFLOW".padEnd(20)}  ${"STARTED".padEnd(19)}  ${"DURATION".padEnd(8)}  ${"STAGES".padEnd(24)}  COST`)];
  for (const r of runs) {
    const stages = stageCountsText(r.stages);
    const cost = r.usage ? formatCost(r.usage) : "";
    out.push(
      `${r.id}  ${colorFor(st, r.status)(r.status.padEnd(11))}  ${r.workflow.slice(0, 20).padEnd(20)}  ${formatTime(r.createdAt)}  ${formatDuration(r.durationMs).padEnd(8)}  ${stages.padEnd(24)}  ${cost}`,
    );
  }
  return out;
}
