/**
 * `atomic replay RUN|FILE… [--workflow FILE]`: replays recorded runs (by id
 * from the journal, or exported files) against the current workflow code
 * and reports, for each, whether every recorded step still matches or the
 * first step that does not (src/testing/replay.ts). Nothing runs live and
 * nothing is written to the journal. Exit 1 when any run diverged.
 *
 * The workflow is `--workflow FILE`, else each run's recorded file.
 */

import { defineCommand } from "citty";
import { existsSync, readFileSync, statSync } from "node:fs";
import { loadWorkflowFile, type LoadedWorkflow } from "../../engine/loader.ts";
import { BUILTIN_PREFIX } from "../../engine/builtins.ts";
import { UsageError } from "../../shared/errors.ts";
import { exportRun, parseExport, type RunExport } from "../../testing/run-export.ts";
import { replayExport } from "../../testing/replay.ts";
import { session, type CliSession } from "../session.ts";

export default defineCommand({
  meta: { name: "replay", description: "Replay recorded runs (ids or exported files) against the current workflow code; report the first divergence of each" },
  args: {
    runs: { type: "positional", valueHint: "RUN|FILE…", description: "run ids (or unique prefixes) and files written by atomic export", required: true },
    workflow: { type: "string", valueHint: "FILE", description: "the workflow file to replay them against (default: each run's own file)" },
  },
  async run({ args }) {
    const s = session();
    const refs = args._ as string[];
    const given = args.workflow ? await loadWorkflowFile(args.workflow) : undefined;
    let diverged = 0;
    for (const ref of refs) {
      const exported = await readRun(s, ref);
      const wf = given ?? (await recordedWorkflow(exported));
      const report = await replayExport(wf.definition, exported);
      if (report.result === "diverged") diverged++;
      if (s.globals.json) {
        s.json({ source: ref, ...report });
        continue;
      }
      if (report.result === "ok") {
        const end = report.endedAt ? `; its history ends before step ${report.endedAt.position} (${report.endedAt.step})` : report.sameOutputs ? ", same outputs" : "";
        s.result(`${ref}: ok, ${report.replayed} recorded step${report.replayed === 1 ? "" : "s"} replayed${end}`);
      } else {
        s.result(`${ref}: diverged: ${report.divergence!.message}`);
        if (report.divergence!.hint) s.info(`  hint: ${report.divergence!.hint}`);
      }
    }
    if (diverged) s.exitCode = 1;
  },
});

/** A file written by `atomic export`, or a run of the journal. */
async function readRun(s: CliSession, ref: string): Promise<RunExport> {
  if (existsSync(ref) && statSync(ref).isFile()) return parseExport(readFileSync(ref, "utf8"), ref);
  // A name that is a path or a .json file's was meant as an export, not as a run id.
  if (/[/\\]|\.json$/i.test(ref)) {
    throw new UsageError("no_such_file", `${ref} is not a file`, { hint: "write one with: atomic export RUN > run.json (atomic runs lists the runs)" });
  }
  const run = await s.findRun(ref);
  if (run.parentId) throw new UsageError("not_root", `run ${run.id} is a child workflow run`, { hint: `replay its root run: atomic replay ${run.rootId}` });
  return exportRun(await s.journal(), run);
}

async function recordedWorkflow(exported: RunExport): Promise<LoadedWorkflow> {
  const path = exported.run.workflowPath;
  if (!path.startsWith(BUILTIN_PREFIX) && !existsSync(path)) {
    throw new UsageError("workflow_not_found", `the workflow file ${path} of run ${exported.run.id} is gone`, { hint: "name the file to replay it against: --workflow FILE" });
  }
  return loadWorkflowFile(path);
}
