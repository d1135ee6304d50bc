/**
 * `atomic runs [--status S] [--limit N] [--watch]`: list root runs, newest
 * first; a run nobody drives any more shows as crashed. --watch redraws
 * the list live (with stages and cost) until Ctrl-C.
 */

import { defineCommand } from "citty";
import { shownStatus } from "../../journal/run-status.ts";
import { RUN_STATUSES, type RunStatus } from "../../journal/types.ts";
import { UsageError } from "../../shared/errors.ts";
import { session } from "../session.ts";
import { colorFor, formatDuration, formatTime } from "../style.ts";
import { RunSummaries } from "../../status/summaries.ts";
import type { UsageTotals } from "../../status/totals.ts";
import { formatCost } from "../../runners/usage.ts";

export default defineCommand({
  meta: { name: "runs", description: "List runs, newest first" },
  args: {
    status: { type: "string", description: `only runs with this stored status (${RUN_STATUSES.join(", ")})` },
    limit: { type: "string", description: "how many (default 20)" },
    watch: { type: "boolean", description: "redraw the list live until Ctrl-C" },
  },
  async run({ args }) {
    const s = session();
    const limit = args.limit === undefined ? 20 : Number(args.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
      throw new UsageError("bad_flag", `--limit must be a whole number from 1 to 10000, got ${JSON.stringify(args.limit)}`);
    }
    if (args.status !== undefined && !(RUN_STATUSES as readonly string[]).includes(args.status)) {
      throw new UsageError("bad_flag", `--status must be one of ${RUN_STATUSES.join(", ")}, got ${JSON.stringify(args.status)}`);
    }
    const journal = await s.journal();
    if (args.watch) {
      const { watchRuns } = await import("../view/runs-watch.ts");
      return watchRuns(s, journal, { status: args.status as RunStatus | undefined, limit });
    }
    const runs = await journal.listRuns({ limit, ...(args.status ? { status: args.status as RunStatus } : {}) });
    const rows = [];
    const summaries = new RunSummaries(journal);
    for (const run of runs) {
      const lease = run.status === "running" || run.status === "awaiting_input" ? await journal.getLease(run.id) : undefined;
      const status = shownStatus(run, lease);
      // Usage of the run and its child runs, summed in the stage index (exact integers; no replay of the run).
      const usage: UsageTotals | null = (await summaries.summarize(run)).usage;
      rows.push({ run, status, usage, leaseExpiresAt: status === "crashed" && lease ? lease.renewedAt + lease.timeoutMs : undefined });
    }
    if (s.globals.json) {
      for (const r of rows) s.json({ ...r.run, status: r.status, storedStatus: r.run.status, leaseExpiresAt: r.leaseExpiresAt, usage: r.usage });
      return;
    }
    if (rows.length === 0) {
      s.info("no runs yet; start one with: atomic run <workflow file>");
      return;
    }
    const st = s.style;
    s.result(st.dim(`${"RUN".padEnd(18)}  ${"STATUS".padEnd(14)}  ${"WORKFLOW".padEnd(20)}  ${"STARTED".padEnd(19)}  ${"DURATION".padEnd(8)}  ${"TOKENS".padEnd(9)}  COST`));
    for (const { run, status, leaseExpiresAt, usage } of rows) {
      const end = run.endedAt ?? (status === "running" ? Date.now() : run.updatedAt);
      const note = leaseExpiresAt === undefined ? "" : st.dim(leaseExpiresAt > Date.now() ? " driver process gone" : ` lease expired ${formatTime(leaseExpiresAt)}`);
      s.result(
        `${run.id}  ${colorFor(st, status)(status.padEnd(14))}  ${run.workflowName.slice(0, 20).padEnd(20)}  ${formatTime(run.createdAt)}  ${formatDuration(end - run.createdAt).padEnd(8)}  ${tokens(usage).padEnd(9)}  ${usage ? formatCost(usage) : "-"}${note}`,
      );
    }
  },
});

function tokens(u: UsageTotals | null): string {
  if (!u) return "-";
  const t = u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
  return t >= 1_000_000 ? `${(t / 1_000_000).toFixed(1)}M` : t >= 10_000 ? `${Math.round(t / 1000)}k` : String(t);
}
