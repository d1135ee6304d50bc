/**
 * The git worktree a run's stage was given (engine/stage-workspace.ts), as
 * its start record says: what `atomic diff` and `atomic review` look up.
 * A stage that does not exist, or has no worktree, is a usage error.
 */

import type { Journal } from "../journal/journal.ts";
import { buildRunReport, flattenStages, type StepReport } from "../engine/run-report.ts";
import { UsageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";

export type StageWorkspaceEntry = NonNullable<StepReport["workspace"]>;

export async function stageWorkspace(journal: Journal, runId: string, stage: string): Promise<StageWorkspaceEntry & { position: string; name: string }> {
  const report = await buildRunReport(journal, runId as RunId);
  const stages = report ? flattenStages(report).filter((x) => x.name === stage || x.path === stage || x.position === stage) : [];
  const found = stages.at(-1);
  if (!found) throw new UsageError("unknown_stage", `run ${runId} has no stage named ${JSON.stringify(stage)}`, { hint: `list its stages with: atomic show ${runId}` });
  if (!found.workspace) {
    throw new UsageError("no_workspace", `stage ${stage} of run ${runId} has no git worktree, so it has no diff to show or review`, {
      hint: 'give the stage workspace: "worktree" (docs/guides/worktrees.md)',
    });
  }
  return { ...found.workspace, position: found.position, name: found.name };
}
