/**
 * `atomic runs [--status S] [--workflow NAME] [--since WHEN] [--origin O] [--tag K=V] [--limit N] [--watch]`:
 * list root runs, newest first; a run nobody drives any more shows as
 * crashed. --watch redraws the list live (with stages and cost) until Ctrl-C.
 *
 * --status takes what the STATUS column shows, comma-separated for several:
 * the stored statuses and the derived ones (crashed: running or awaiting
 * input with its driver gone; paused: running, asked to pause). The journal
 * selects the stored statuses a shown one can come from, page by page, and
 * the shown status decides. --since takes an ISO date or date-time, or an
 * age: a number and s, m, h, d or w (`90m`, `2h`, `7d`).
 */

import { INSTANT_EXAMPLES, parseInstant } from "../../shared/age.ts";
import { defineCommand } from "citty";
import { badOriginMessage, isRunOrigin, RUN_ORIGINS } from "../../journal/run-origin.ts";
import { originText, runOrigins } from "../../status/run-origins.ts";
import { parseTagPairs } from "../../shared/tags.ts";
import { repeatedFlag } from "../globals.ts";
import { shortVersion } from "../../engine/pinned-code.ts";
import { RECOVERY_STOPPED } from "../../service/due-runs.ts";
import { crashCause, shownEnd, shownStatus } from "../../journal/run-status.ts";
import type { Journal, ListRunsFilter } from "../../journal/journal.ts";
import { RUN_STATUSES, type Lease, type RunStatus, type ShownStatus } from "../../journal/runs.ts";
import { UsageError } from "../../shared/errors.ts";
import { session } from "../session.ts";
import { colorFor, formatDuration, formatTime } from "../style.ts";
import { renderTable } from "../table.ts";
import { RunSummaries } from "../../status/summaries.ts";
import { stageCountsText, type StageCounts, type UsageTotals } from "../../status/totals.ts";
import { formatCost } from "../../runners/usage.ts";

const SHOWN_STATUSES: readonly ShownStatus[] = [...RUN_STATUSES, "crashed", "paused", "continued"];

/** The stored statuses a shown status can come from. */
const STORED_FOR: Record<ShownStatus, readonly RunStatus[]> = {
  ...(Object.fromEntries(RUN_STATUSES.map((x) => [x, [x]])) as Record<RunStatus, RunStatus[]>),
  crashed: ["running", "awaiting_input"],
  paused: ["running"],
  continued: ["completed"],
};

const PAGE = 200;

export default defineCommand({
  meta: { name: "runs", description: "List runs, newest first" },
  args: {
    status: { type: "string", description: `only runs shown with this status, or several comma-separated (${SHOWN_STATUSES.join(", ")})` },
    workflow: { type: "string", description: "only runs of the workflow of this name" },
    since: { type: "string", description: "only runs started since an ISO date or time, or an age like 90m, 2h, 7d" },
    limit: { type: "string", description: "how many (default 20)" },
    origin: { type: "string", description: `only runs of this origin (${RUN_ORIGINS.join(", ")})` },
    tag: { type: "string", valueHint: "KEY=VALUE", description: "only runs with this tag; repeat the flag for runs with every one" },
    watch: { type: "boolean", description: "redraw the list live until Ctrl-C" },
  },
  async run({ args }) {
    const s = session();
    const limit = args.limit === undefined ? 20 : Number(args.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
      throw new UsageError("bad_flag", `--limit must be a whole number from 1 to 10000, got ${JSON.stringify(args.limit)}`, { hint: "for example --limit 50" });
    }
    const wanted = args.status === undefined ? undefined : parseStatuses(args.status);
    const since = args.since === undefined ? undefined : parseSince(args.since);
    if (args.workflow !== undefined && args.workflow.trim() === "") {
      throw new UsageError("bad_flag", "--workflow needs a workflow name", { hint: "the names are in the WORKFLOW column of atomic runs" });
    }
    const origin = args.origin?.trim();
    if (origin !== undefined && !isRunOrigin(origin)) throw new UsageError("bad_flag", `--${badOriginMessage(origin)}`, { hint: "for example --origin schedule" });
    const tags = parseTagPairs(repeatedFlag(s.rawArgs, "tag"));
    const tagged = Object.keys(tags).length > 0;
    const journal = await s.journal();
    if (args.watch) {
      if (args.workflow !== undefined || since !== undefined || tagged || origin !== undefined || (wanted && (wanted.length > 1 || !isStored(wanted[0]!)))) {
        throw new UsageError("bad_flag", "--watch takes only --limit and a single stored --status", {
          hint: `drop --watch to filter by ${args.workflow !== undefined ? "--workflow" : since !== undefined ? "--since" : tagged ? "--tag" : origin !== undefined ? "--origin" : "that status"}`,
        });
      }
      const { watchRuns } = await import("../view/runs-watch.ts");
      return watchRuns(s, journal, { status: wanted?.[0] as RunStatus | undefined, limit });
    }
    const filter: ListRunsFilter = {
      ...(wanted ? { statuses: [...new Set(wanted.flatMap((w) => STORED_FOR[w]))] } : {}),
      ...(args.workflow !== undefined ? { workflowName: args.workflow } : {}),
      ...(since !== undefined ? { createdSince: since } : {}),
      ...(tagged ? { tags } : {}),
      ...(origin !== undefined ? { origin } : {}),
    };
    const rows = await selectRuns(journal, filter, wanted, limit);
    const tagsOf = await journal.tags.of(rows.map((r) => r.run.id));
    if (s.globals.json) {
      for (const r of rows) {
        s.json({ ...r.run, status: r.status, storedStatus: r.run.status, leaseExpiresAt: r.leaseExpiresAt, crashCause: r.crashCause, stages: r.stages, usage: r.usage, tags: tagsOf.get(r.run.id) ?? {}, origins: runOrigins(r.run) });
      }
      return;
    }
    if (rows.length === 0) {
      const filtered = wanted !== undefined || args.workflow !== undefined || since !== undefined || tagged || origin !== undefined;
      if (filtered) s.info("no runs match; see every run with: atomic runs");
      else s.info("no runs yet; start one with: atomic run <workflow file>");
      return;
    }
    const st = s.style;
    const now = Date.now();
    const lines = renderTable(
      [
        { header: "RUN", cells: rows.map((r) => r.run.id) },
        { header: "STATUS", cells: rows.map((r) => r.status), color: (i, t) => colorFor(st, rows[i]!.status)(t) },
        { header: "WORKFLOW", cells: rows.map((r) => r.run.workflowName), shrink: { min: 8 } },
        // How the run was started (schedule, api, cli, rerun, fork) and "recovery" once the service recovered it.
        { header: "ORIGIN", cells: rows.map((r) => originText(runOrigins(r.run))), drop: 5.2 },
        { header: "STARTED", cells: rows.map((r) => formatTime(r.run.createdAt)), drop: 2 },
        { header: "DURATION", cells: rows.map((r) => formatDuration(shownEnd(r.run, r.status, r.lease, now) - r.run.createdAt)), drop: 3 },
        // Dropped after tokens and cost, before the duration, when the terminal is narrow.
        { header: "STAGES", cells: rows.map((r) => stageCountsText(r.stages)), drop: 3.5 },
        { header: "TOKENS", cells: rows.map((r) => tokens(r.usage)), drop: 5 },
        { header: "COST", cells: rows.map((r) => (r.usage ? formatCost(r.usage) : "-")), drop: 4 },
        // The code version the run is pinned to, short (engine/pinned-code.ts): runs of the same code share it.
        { header: "CODE", cells: rows.map((r) => (r.run.workflowDigest ? shortVersion(r.run.workflowDigest) : "-")), drop: 5.5 },
        // Only when some run has tags: a list without any keeps its width.
        ...(tagsOf.size > 0 ? [{ header: "TAGS", cells: rows.map((r) => tagsText(tagsOf.get(r.run.id))), shrink: { min: 8 }, drop: 5.7 }] : []),
        {
          header: "",
          cells: rows.map((r) => crashNote(r)),
          drop: 6,
          color: (_i, t) => st.dim(t),
        },
      ],
      st,
    );
    for (const line of lines) s.result(line);
  },
});

/** `team=search env=prod`, or empty. */
export function tagsText(tags: Readonly<Record<string, string>> | undefined): string {
  return Object.entries(tags ?? {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

interface Row {
  run: Awaited<ReturnType<Journal["listRuns"]>>[number];
  status: ShownStatus;
  /** Counted in the stage index, as the page's run list counts them (queued apart from running). */
  stages: StageCounts;
  usage: UsageTotals | null;
  leaseExpiresAt: number | undefined;
  crashCause: "driver_gone" | "lease_expired" | undefined;
  lease: Lease | undefined;
}

/** Up to `limit` runs the filter selects whose shown status is wanted, newest first. */
async function selectRuns(journal: Journal, filter: ListRunsFilter, wanted: readonly ShownStatus[] | undefined, limit: number): Promise<Row[]> {
  const rows: Row[] = [];
  const summaries = new RunSummaries(journal);
  for (let offset = 0; rows.length < limit; offset += PAGE) {
    const page = await journal.listRuns({ ...filter, limit: wanted ? PAGE : limit, offset });
    for (const run of page) {
      const lease = run.status === "running" || run.status === "awaiting_input" ? await journal.getLease(run.id) : undefined;
      const status = shownStatus(run, lease);
      if (wanted && !wanted.includes(status)) continue;
      // Stages and usage of the run and its child runs, from the stage index (exact integers; no replay of the run).
      const { stages, usage } = await summaries.summarize(run);
      rows.push({
        run,
        status,
        stages,
        usage,
        lease,
        leaseExpiresAt: status === "crashed" && lease ? lease.renewedAt + lease.timeoutMs : undefined,
        crashCause: status === "crashed" ? crashCause(lease) : undefined,
      });
      if (rows.length === limit) break;
    }
    if (!wanted || page.length < PAGE) break;
  }
  return rows;
}

/** Why a crashed run is crashed (the service's reason when it left the run for a person, else what happened to its driver); which run continued a continued one. */
function crashNote(r: Row): string {
  // A run of a chain (ctx.continueAsNew) names the run that continues it: "continued as run <id>".
  if (r.status === "continued") return r.run.error?.message ?? "";
  if (r.status !== "crashed") return "";
  if (r.run.error?.code === RECOVERY_STOPPED) return r.run.error.message;
  if (r.leaseExpiresAt === undefined) return "";
  return r.crashCause === "driver_gone" ? "driver process gone" : `lease expired ${formatTime(r.leaseExpiresAt)}`;
}

function isStored(status: ShownStatus): status is RunStatus {
  return (RUN_STATUSES as readonly string[]).includes(status);
}

function parseStatuses(text: string): ShownStatus[] {
  const parts = text.split(",").map((x) => x.trim().toLowerCase().replace(/-/g, "_"));
  for (const p of parts) {
    if (!(SHOWN_STATUSES as readonly string[]).includes(p)) {
      throw new UsageError("bad_flag", `--status ${JSON.stringify(p)} is not a status a run can have`, {
        hint: `use one or more of ${SHOWN_STATUSES.join(", ")} (comma-separated)`,
      });
    }
  }
  return parts as ShownStatus[];
}

/** --since: an age (`2h`: runs started in the last two hours) or an ISO date (midnight UTC) or date-time. */
export function parseSince(text: string, now = Date.now()): number {
  const at = parseInstant(text, now);
  if (at !== undefined) return at;
  throw new UsageError("bad_flag", `--since ${JSON.stringify(text)} is neither a date nor an age`, { hint: `use ${INSTANT_EXAMPLES}` });
}

function tokens(u: UsageTotals | null): string {
  if (!u) return "-";
  const t = u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
  return t >= 1_000_000 ? `${(t / 1_000_000).toFixed(1)}M` : t >= 10_000 ? `${Math.round(t / 1000)}k` : String(t);
}
