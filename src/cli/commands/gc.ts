/**
 * `atomic gc [--older-than 30d] [--status completed,cancelled,failed,skipped] [--dry-run] [--force]`:
 * delete old runs (journal rows and artifacts) and give the journal's space
 * back. What may go is engine/retention.ts's rule: finished runs by default;
 * runs that could still continue only with --force (and only when named by
 * --status, or all of them with --force alone); never a run a driver holds.
 */

import { defineCommand } from "citty";
import {
  DEFAULT_OLDER_THAN,
  FINISHED_STATUSES,
  GC_STATUSES,
  RESUMABLE_STATUSES,
  collectGarbage,
  type GcReport,
  type GcStatus,
} from "../../engine/retention.ts";
import { AGE_EXAMPLES, parseAge } from "../../shared/age.ts";
import { UsageError } from "../../shared/errors.ts";
import { formatBytes } from "../../shared/format-bytes.ts";
import { session } from "../session.ts";
import { artifactStoreFor } from "../../artifacts/select.ts";
import { loadConfig } from "../../shared/config/load.ts";

export default defineCommand({
  meta: { name: "gc", description: "Delete old finished runs and their artifacts; shrink the journal" },
  args: {
    olderThan: { type: "string", valueHint: "AGE", description: `only runs that ended (or last changed) longer ago than this: ${AGE_EXAMPLES} (default ${DEFAULT_OLDER_THAN})` },
    status: { type: "string", description: `statuses to delete, comma-separated (default ${FINISHED_STATUSES.join(",")}); ${RESUMABLE_STATUSES.join(", ")} need --force` },
    dryRun: { type: "boolean", description: "say what would be deleted, delete nothing" },
    force: { type: "boolean", description: "also delete runs that could still continue (never one a driver holds now)" },
    deleteBranches: { type: "boolean", description: "also delete the branches of the deleted runs' stage worktrees (kept by default)" },
  },
  async run({ args }) {
    const s = session();
    const olderThan = args.olderThan ?? DEFAULT_OLDER_THAN;
    const olderThanMs = parseAge(olderThan);
    if (olderThanMs === undefined) {
      throw new UsageError("bad_flag", `--older-than ${JSON.stringify(olderThan)} is not an age`, { hint: `use an age like ${AGE_EXAMPLES}` });
    }
    const statuses = args.status === undefined ? (args.force ? GC_STATUSES : FINISHED_STATUSES) : parseStatuses(args.status, args.force === true);
    const journal = await s.journal();
    const artifacts = artifactStoreFor(journal, loadConfig({ home: s.globals.home }).config);
    const report = await collectGarbage(journal, s.globals.home, { olderThanMs, statuses, dryRun: args.dryRun === true, artifacts, worktreeBranches: args.deleteBranches === true });
    if (s.globals.json) s.json({ type: "gc", ...report });
    else for (const line of describe(report)) s.result(line);
  },
});

function parseStatuses(text: string, force: boolean): GcStatus[] {
  const parts = text.split(",").map((x) => x.trim().toLowerCase().replace(/-/g, "_")).filter((x) => x !== "");
  if (parts.length === 0) throw new UsageError("bad_flag", "--status needs at least one status", { hint: `for example --status ${FINISHED_STATUSES.join(",")}` });
  for (const p of parts) {
    if (p === "running" || p === "paused") {
      throw new UsageError("bad_flag", `gc never deletes ${p} runs: a driver holds them`, { hint: `cancel the run first (atomic cancel RUN), then gc --status cancelled` });
    }
    if (!(GC_STATUSES as readonly string[]).includes(p)) {
      throw new UsageError("bad_flag", `--status ${JSON.stringify(p)} is not a status gc can select`, { hint: `use one or more of ${GC_STATUSES.join(", ")} (comma-separated)` });
    }
    if (!force && (RESUMABLE_STATUSES as readonly string[]).includes(p)) {
      throw new UsageError("needs_force", `${p} runs can still continue, so gc deletes them only with --force`, { hint: `add --force to delete them anyway` });
    }
  }
  return [...new Set(parts)] as GcStatus[];
}

function describe(r: GcReport): string[] {
  const n = (x: number) => x.toLocaleString("en-US");
  const what =
    `${n(r.runs)} run${r.runs === 1 ? "" : "s"}${r.childRuns ? ` (and ${n(r.childRuns)} child run${r.childRuns === 1 ? "" : "s"})` : ""}, ` +
    `${n(r.rows)} journal row${r.rows === 1 ? "" : "s"}, ${n(r.artifactFiles)} artifact file${r.artifactFiles === 1 ? "" : "s"} (${formatBytes(r.artifactBytes)})`;
  const lines = [r.dryRun ? `would delete ${what}; nothing was deleted (--dry-run)` : `deleted ${what}`];
  if (r.storage) {
    const freed = Math.max(0, r.storage.bytesBefore - r.storage.bytesAfter);
    lines.push(`${r.storage.measured ?? "journal file"}: ${formatBytes(r.storage.bytesBefore)} before, ${formatBytes(r.storage.bytesAfter)} after (${formatBytes(freed)} freed)`);
    if (r.storage.note) lines.push(`note: ${r.storage.note}`);
  }
  if (r.worktrees.length) lines.push(`${r.dryRun ? "would remove" : "removed"} ${n(r.worktrees.length)} stage worktree${r.worktrees.length === 1 ? "" : "s"}${r.branches.length ? ` and ${n(r.branches.length)} branch${r.branches.length === 1 ? "" : "es"}` : " (their branches stay)"}`);
  if (r.codeFiles) lines.push(`deleted ${n(r.codeFiles)} pinned code file${r.codeFiles === 1 ? "" : "s"} no remaining run uses`);
  if (r.orphanDirs) lines.push(`(${n(r.orphanDirs)} of the artifact directories belonged to no run in the journal)`);
  if (r.kept.length) lines.push(`kept ${n(r.kept.length)} run${r.kept.length === 1 ? "" : "s"} a driver holds now: ${r.kept.join(", ")}`);
  return lines;
}
