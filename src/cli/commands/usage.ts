/**
 * `atomic usage [--by workflow|stage|model|runner|day] [--since WHEN] [--workflow NAME]`:
 * tokens (cache reads and writes included) and money over the runs of the
 * journal, grouped (status/usage-report.ts), with the total and the
 * costliest runs. The figures are the sums `atomic show` makes, exactly.
 */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { formatCost } from "../../runners/usage.ts";
import { USAGE_GROUPINGS, usageReport, type UsageGrouping, type UsageSums } from "../../status/usage-report.ts";
import { session } from "../session.ts";
import { renderTable } from "../table.ts";
import { parseSince } from "./runs.ts";

export default defineCommand({
  meta: { name: "usage", description: "Tokens and cost over runs, by workflow, stage, model, runner or day" },
  args: {
    by: { type: "string", valueHint: "GROUP", description: `group by ${USAGE_GROUPINGS.join(", ")} (default workflow)` },
    since: { type: "string", description: "only runs started since an ISO date or time, or an age like 90m, 2h, 7d" },
    workflow: { type: "string", description: "only runs of this workflow" },
  },
  async run({ args }) {
    const s = session();
    const by = (args.by ?? "workflow").trim().toLowerCase();
    if (!(USAGE_GROUPINGS as readonly string[]).includes(by)) {
      throw new UsageError("bad_flag", `--by ${JSON.stringify(args.by)} is not a grouping`, { hint: `use one of ${USAGE_GROUPINGS.join(", ")}` });
    }
    const since = args.since === undefined ? undefined : parseSince(args.since);
    const journal = await s.journal();
    const report = await usageReport(journal, { by: by as UsageGrouping, ...(since !== undefined ? { since } : {}), ...(args.workflow !== undefined ? { workflow: args.workflow } : {}) });
    if (s.globals.json) {
      s.json({ type: "usage", ...report });
      return;
    }
    if (report.groups.length === 0) {
      s.result(`no usage in ${report.runs} run${report.runs === 1 ? "" : "s"}${since !== undefined ? " since then" : ""}`);
      return;
    }
    const rows = [...report.groups, { key: "total", runs: report.groups.reduce((n, g) => Math.max(n, g.runs), 0), ...report.total }];
    const n = (x: number) => x.toLocaleString("en-US");
    const lines = renderTable(
      [
        { header: by.toUpperCase(), cells: rows.map((r) => (r === rows.at(-1) ? "total" : r.key)), shrink: { min: 10 } },
        { header: "RUNS", cells: rows.map((r, i) => (i === rows.length - 1 ? n(report.runs) : n(r.runs))) },
        { header: "IN", cells: rows.map((r) => n(r.inputTokens)) },
        { header: "CACHED", cells: rows.map((r) => n(r.cacheReadTokens)), drop: 2 },
        { header: "CACHE WRITE", cells: rows.map((r) => n(r.cacheWriteTokens)), drop: 3 },
        { header: "OUT", cells: rows.map((r) => n(r.outputTokens)) },
        { header: "TURNS", cells: rows.map((r) => n(r.turns)), drop: 1 },
        { header: "COST", cells: rows.map((r) => cost(r)) },
      ],
      s.style,
    );
    for (const line of lines) s.result(line);
    if (report.topRuns.length > 0) {
      s.result("");
      s.result("costliest runs:");
      for (const r of report.topRuns) s.result(`  ${r.runId}  ${r.workflow}  ${formatCost({ costMicroUsd: r.costMicroUsd })}`);
    }
  },
});

function cost(u: UsageSums): string {
  return formatCost(u);
}
