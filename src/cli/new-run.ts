/**
 * Starting a new run from a recorded one (`atomic rerun`, `atomic fork`):
 * the old run's workflow file (or builtin) and working directory, as
 * resume finds them (run-place.ts), then a run started and driven like
 * `atomic run`'s. The old run is only read.
 */

import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { RootRun, type NewRunRequest } from "../engine/driver.ts";
import { loadPinnedWorkflow, loadWorkflowFile, type LoadedWorkflow } from "../engine/loader.ts";
import { shortVersion } from "../engine/pinned-code.ts";
import { recordedPlace } from "../engine/run-place.ts";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { newRunId } from "../shared/ids.ts";
import { driveRun } from "./drive.ts";
import { POOL_ARGS, executorOption } from "./pool-options.ts";
import { BUDGET_ARGS, budgetOption } from "./budget-options.ts";
import { checkedConfig, leaseOption, runKeyOption, startedByOfThisProcess } from "./commands/run.ts";
import { tellStarter } from "../shared/ready-pipe.ts";
import { announceDetached, requireService } from "./detach.ts";
import type { CliSession } from "./session.ts";
import { createRunView } from "./view/run-view.ts";

export const NEW_RUN_ARGS = {
  workflow: { type: "string", valueHint: "FILE", description: "the run's workflow file, when it moved since the run ran" },
  cwd: { type: "string", valueHint: "DIR", description: "run in this directory instead of the one the run ran in" },
  leaseMs: { type: "string", description: "lease timeout in ms (default 30000)" },
  id: { type: "string", description: "the new run's id, chosen by you (it must not exist yet)" },
  detach: { type: "boolean", description: "record the new run and leave it to the service (atomic serve), printing its id at once" },
  ...POOL_ARGS,
  ...BUDGET_ARGS,
} as const;

/** A root run of this journal (a child run is rerun or forked through its root). */
export function assertRootRun(run: RunRecord, command: string): void {
  if (run.parentId) {
    throw new UsageError("not_root", `run ${run.id} is a child workflow run`, { hint: `${command} its root run instead: atomic ${command} ${run.rootId}` });
  }
}

/**
 * The recorded workflow, loaded in the run's recorded directory (this
 * process moves there), or the file and directory `--workflow`/`--cwd` name.
 */
export async function loadRecorded(
  s: CliSession,
  run: RunRecord,
  events: readonly JournalEvent[],
  where: { workflow?: string | undefined; cwd?: string | undefined },
): Promise<LoadedWorkflow> {
  const place = recordedPlace(run, events);
  const cwd = where.cwd !== undefined ? resolve(where.cwd) : place.cwd;
  // Resolved before moving: a --workflow path is relative to where the command was typed.
  const file = where.workflow !== undefined ? resolve(where.workflow) : place.path;
  if (cwd !== undefined) {
    if (!(existsSync(cwd) && statSync(cwd).isDirectory())) {
      if (where.cwd !== undefined) throw new UsageError("bad_flag", `--cwd ${where.cwd} is not a directory`, { hint: "name an existing directory" });
      throw new UsageError("run_dir_missing", `run ${run.id} ran in ${cwd}, which no longer exists`, {
        hint: "recreate that directory, or name another with --cwd DIR",
      });
    }
    if (cwd !== process.cwd()) {
      process.chdir(cwd);
      s.info(where.cwd !== undefined ? `running in ${cwd} (--cwd)` : `running in ${cwd}, where run ${run.id} ran`);
    }
  }
  return loadWorkflowFile(file).catch(async (err: unknown) => {
    if (where.workflow === undefined && err instanceof UsageError && err.code === "workflow_not_found") {
      // The file is gone: the new run gets the code the recorded one was pinned to (engine/pinned-code.ts).
      const pinned = await loadPinnedWorkflow(await s.journal(), s.globals.home, run.workflowDigest, file);
      if (pinned) {
        s.info(`${file} no longer exists: running the code run ${run.id} was pinned to (${shortVersion(run.workflowDigest)})`);
        return pinned;
      }
      throw new UsageError(err.code, `workflow file ${file} does not exist any more (run ${run.id} ran from it)`, {
        hint: "if it moved, name it with --workflow FILE",
      });
    }
    throw err;
  });
}

/** Starts the new run and drives it to its end, as `atomic run` does. */
export async function startAndDrive(
  s: CliSession,
  args: Record<string, unknown> & { leaseMs?: string; id?: string; detach?: boolean },
  loaded: LoadedWorkflow,
  req: Pick<NewRunRequest, "inputs" | "origin" | "seed">,
): Promise<void> {
  const budget = budgetOption(args as Parameters<typeof budgetOption>[0]);
  const choice = executorOption(s, args as Parameters<typeof executorOption>[1]).executor;
  const config = checkedConfig(s, loaded.definition, budget);
  const journal = await s.journal();
  const runId = args.id !== undefined ? runKeyOption(args.id) : newRunId();
  if (args.id !== undefined && (await journal.getRun(runId))) {
    throw new UsageError("run_id_conflict", `a run with id ${runId} exists already`, { hint: "choose another --id, or leave it out for a new one" });
  }
  if (args.detach) await requireService(journal, { name: loaded.definition.name, recover: loaded.definition.recover !== false });
  const view = createRunView(s);
  const root = await RootRun.start(
    { journal, home: s.globals.home, observer: view.observer, config, ...leaseOption(args.leaseMs), executor: choice },
    { definition: loaded.definition, workflowPath: loaded.path, digest: loaded.digest, ...(loaded.code ? { code: loaded.code } : {}), runId, ...(budget ? { budget } : {}), startedBy: startedByOfThisProcess(), ...req },
  );
  tellStarter(); // the new run is recorded: a service that spawned this process waits for that (src/service/spawn-run.ts)
  if (args.detach) {
    view.close();
    await root.detach();
    announceDetached(s, root.runId);
    return;
  }
  await driveRun(s, root, view);
}
