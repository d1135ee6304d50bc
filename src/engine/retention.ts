/**
 * Retention: which runs `atomic gc` (and the service's daily duty) may
 * delete, and deleting them with their artifacts.
 *
 * The rule: a root run goes, with its child runs, when its shown status is
 * one of the selected ones and its last change (its end, else its last
 * update) is older than the cutoff. Finished runs (completed, cancelled,
 * failed) are what gc selects by default. Runs that could still continue
 * (blocked by a budget, interrupted, crashed, awaiting an answer) are
 * deleted only with `force`. A run whose lease is live (a driver runs it
 * now: running, paused, sleeping, waiting for an answer, or just finishing)
 * is never deleted, force or not. The journal decides again inside each
 * tree's deleting transaction from the rows as they are then (RunRetention),
 * so a run that a resume took over after it was listed is kept.
 *
 * Artifacts (stage stdout/stderr/transcripts, worker logs) live under
 * `$ATOMIC_HOME/artifacts/<run id>/`; they go after their rows committed,
 * and so do a run's files in a shared artifact directory (`artifacts.dir`;
 * an artifact store in the journal's own database loses them in the
 * tree's deleting transaction instead: artifacts/store.ts deletedWithRuns).
 * A crash in between leaves a directory without a run, never a run whose
 * files are gone; the next gc removes such a directory once it is older
 * than the cutoff (a run's directory is made after its first event, so one
 * without a run is never a run being started). Files a builtin wrote in the project
 * (`<cwd>/.atomic/runs/…`) are the user's and stay.
 */

import { removeRunWorktrees } from "./stage-workspace.ts";
import { removeTree } from "../shared/remove-tree.ts";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { leaseLive, shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { ReclaimReport } from "../journal/retention.ts";
import type { RunRecord, RunStatus, ShownStatus } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { parseAge } from "../shared/age.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import type { ArtifactStore } from "../artifacts/store.ts";
import { artifactStoreFor } from "../artifacts/select.ts";

/** Ended by themselves: gc's default selection, and all the service's retention deletes. */
export const FINISHED_STATUSES = ["completed", "cancelled", "failed", "skipped"] as const;
/** Could still continue (`atomic resume`, an answer): selectable only with force. */
export const RESUMABLE_STATUSES = ["blocked", "interrupted", "crashed", "awaiting_input"] as const;
export type GcStatus = (typeof FINISHED_STATUSES)[number] | (typeof RESUMABLE_STATUSES)[number];
export const GC_STATUSES: readonly GcStatus[] = [...FINISHED_STATUSES, ...RESUMABLE_STATUSES];

export const DEFAULT_OLDER_THAN = "30d";
/** How often the service applies the retention setting. */
export const RETENTION_INTERVAL_MS = 24 * 3_600_000;

/** Root runs read per page of candidates. */
const PAGE = 200;

export interface GcOptions {
  olderThanMs: number;
  statuses: readonly GcStatus[];
  dryRun?: boolean;
  now?: number;
  /**
   * The artifact store of this journal's hosts (artifacts/select.ts): a
   * deleted run's files there go too (unless the journal deleted them with
   * its rows), after the rows committed, as the local ones do.
   */
  artifacts?: ArtifactStore | undefined;
  /** Also delete the branches (and base refs) of the deleted runs' stage worktrees (engine/stage-workspace.ts); kept by default. */
  worktreeBranches?: boolean;
}

export interface GcReport {
  dryRun: boolean;
  /** Root runs deleted (or that would be). */
  runs: number;
  /** Their child runs, deleted with them. */
  childRuns: number;
  /** Journal rows deleted, in all and by table. */
  rows: number;
  rowsByTable: Record<string, number>;
  /** Artifact files and their bytes removed. */
  artifactFiles: number;
  artifactBytes: number;
  /** Artifact directories of no run in the journal (left by a gc that was stopped), removed with their files. */
  orphanDirs: number;
  /** Pinned code files no remaining run uses, deleted from the journal (not on a dry run; engine/pinned-code.ts). */
  codeFiles: number;
  /** Runs selected but kept because a driver holds them now. */
  kept: RunId[];
  /** The journal's size before and after giving space back (not on a dry run). */
  storage?: ReclaimReport;
  deleted: RunId[];
  /** The deleted runs' stage worktrees removed (their paths), and the branches deleted (with worktreeBranches). */
  worktrees: string[];
  branches: string[];
}

/** Stored statuses whose runs may show one of `statuses` ("crashed" is a running or awaiting run without a driver). */
function storedStatuses(statuses: readonly GcStatus[]): RunStatus[] {
  const out = new Set<RunStatus>();
  for (const s of statuses) {
    if (s === "crashed") {
      out.add("running");
      out.add("awaiting_input");
    } else out.add(s);
  }
  return [...out];
}

/** Deletes what `opts` selects; see the file header for the rule. */
export async function collectGarbage(journal: Journal, home: string, opts: GcOptions): Promise<GcReport> {
  const now = opts.now ?? Date.now();
  const before = now - opts.olderThanMs;
  const wanted = new Set<ShownStatus>(opts.statuses);
  const report: GcReport = {
    dryRun: opts.dryRun === true,
    runs: 0,
    childRuns: 0,
    rows: 0,
    rowsByTable: {},
    artifactFiles: 0,
    artifactBytes: 0,
    orphanDirs: 0,
    codeFiles: 0,
    kept: [],
    deleted: [],
    worktrees: [],
    branches: [],
  };
  const stored = storedStatuses(opts.statuses);
  let afterId: RunId | undefined;
  for (;;) {
    const page = await journal.retention.candidates({ statuses: stored, before, limit: PAGE, ...(afterId ? { afterId } : {}) });
    if (page.length === 0) break;
    afterId = page.at(-1)!.id;
    for (const candidate of page) {
      let live = false;
      const deleted = await journal.retention.deleteTree(
        candidate.id,
        (root, lease) => {
          live = leaseLive(lease, Date.now());
          return !live && wanted.has(shownStatus(root, lease)) && lastChange(root) < before;
        },
        { dryRun: report.dryRun },
      );
      if (!deleted) {
        if (live) report.kept.push(candidate.id);
        continue;
      }
      report.runs++;
      report.childRuns += deleted.runIds.length - 1;
      report.deleted.push(candidate.id);
      for (const [table, n] of Object.entries(deleted.rows)) {
        report.rowsByTable[table] = (report.rowsByTable[table] ?? 0) + n;
        report.rows += n;
      }
      for (const id of deleted.runIds) {
        // Its stages' worktrees first: their list is in its artifact directory.
        const trees = await removeRunWorktrees(join(home, "artifacts"), id, { branches: opts.worktreeBranches === true, dryRun: report.dryRun });
        report.worktrees.push(...trees.worktrees);
        report.branches.push(...trees.branches);
        const files = removeTree(join(home, "artifacts", id), { dryRun: report.dryRun });
        const stored = opts.artifacts && !opts.artifacts.deletedWithRuns ? await opts.artifacts.deleteRun(candidate.id, id, { dryRun: report.dryRun }) : { files: 0, bytes: 0 };
        report.artifactFiles += files.files + stored.files;
        report.artifactBytes += files.bytes + stored.bytes;
      }
    }
  }
  await sweepOrphans(journal, home, before, report);
  if (!report.dryRun) report.codeFiles = await sweepCode(journal, home, before);
  if (!report.dryRun) report.storage = await journal.retention.reclaim({ rewrite: !(await anyLive(journal)) });
  return report;
}

function lastChange(run: RunRecord): number {
  return run.endedAt ?? run.updatedAt;
}

/** Whether any run has a driver now (a whole-file rewrite would make its writes wait). */
async function anyLive(journal: Journal): Promise<boolean> {
  const open = await journal.listRuns({ statuses: ["running", "awaiting_input"], rootsOnly: true });
  for (const run of open) if (leaseLive(await journal.getLease(run.id))) return true;
  return false;
}

/** Artifact directories older than `before` whose run is not in the journal: counted, and removed unless a dry run. */
async function sweepOrphans(journal: Journal, home: string, before: number, report: GcReport): Promise<void> {
  const root = join(home, "artifacts");
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return; // no artifacts yet
  }
  const deleted = new Set<string>(report.deleted);
  for (const name of names) {
    // Run ids and run keys only (shared/ids.ts); what a dry run selected is counted already.
    if (!/^[a-z0-9][a-z0-9._-]*$/.test(name) || (report.dryRun && deleted.has(name))) continue;
    const dir = join(root, name);
    let mtime: number;
    try {
      const st = statSync(dir);
      if (!st.isDirectory()) continue;
      mtime = st.mtimeMs;
    } catch {
      continue;
    }
    if (mtime >= before || (await journal.getRun(name as RunId))) continue;
    const files = removeTree(dir, { dryRun: report.dryRun });
    report.orphanDirs++;
    report.artifactFiles += files.files;
    report.artifactBytes += files.bytes;
  }
}

/**
 * Pinned code that no remaining run uses goes with the last run that used it: its files in the journal
 * (stored before `before`, so the code of a run starting now stays), and the copies resumes made of it
 * under the home (engine/pinned-code.ts).
 */
async function sweepCode(journal: Journal, home: string, before: number): Promise<number> {
  const deleted = await journal.code.sweep(before);
  const root = join(home, "code");
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return deleted;
  }
  const versions = names.filter((n) => /^[0-9a-f]{64}$/.test(n));
  const stored = await journal.code.get(versions);
  for (const version of versions) if (!stored.has(version)) removeTree(join(root, version));
  return deleted;
}

// ---------------------------------------------------------------- the service's daily duty

/** What the retention setting (shared/config/schema.ts) selects, or undefined when none is set (the schema checked its shape and values). */
export function retentionOptions(config: AtomicConfig): GcOptions | undefined {
  const r = config.retention;
  if (!r?.olderThan) return undefined;
  const olderThanMs = parseAge(r.olderThan);
  if (olderThanMs === undefined) return undefined;
  const statuses: GcStatus[] = [...(r.status ?? FINISHED_STATUSES)];
  return { olderThanMs, statuses };
}

/**
 * The service's daily duty: applies the retention setting once (undefined
 * when none is set). The service calls it at start and every
 * RETENTION_INTERVAL_MS; each call is safe beside live runs.
 */
export async function applyRetention(journal: Journal, home: string, config: AtomicConfig, now = Date.now()): Promise<GcReport | undefined> {
  const opts = retentionOptions(config);
  return opts ? collectGarbage(journal, home, { ...opts, now, artifacts: artifactStoreFor(journal, config) }) : undefined;
}
