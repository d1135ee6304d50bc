/**
 * `atomic fork RUN --at STEP [--workflow FILE] [--cwd DIR]`: a new run of RUN's workflow with RUN's
 * inputs that reuses RUN's recorded results of every step before STEP and
 * runs STEP and what follows live (engine/fork.ts says what STEP names and
 * what "before" means). The new run records where it came from; RUN is only
 * read.
 */

import { defineCommand } from "citty";
import { forkSeed } from "../../engine/fork.ts";
import { reviveInputs } from "../../engine/inputs.ts";
import { UsageError } from "../../shared/errors.ts";
import { NEW_RUN_ARGS, assertRootRun, loadRecorded, startAndDrive } from "../new-run.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "fork", description: "Start a new run that reuses a run's results before a step and runs the rest live" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    at: { type: "string", valueHint: "STEP", description: "the step to go live at: its position as show prints it (#3, #4.1.0; #4 a whole group) or its name" },
    ...NEW_RUN_ARGS,
  },
  async run({ args }) {
    const s = session();
    if (args.at === undefined || args.at.trim() === "") {
      throw new UsageError("bad_flag", "atomic fork needs --at STEP", { hint: "name the step to go live at, e.g. --at review or --at '#3' (atomic show RUN lists the steps)" });
    }
    const run = await s.findRun(args.run);
    assertRootRun(run, "fork");
    const journal = await s.journal();
    const events = await journal.readEvents(run.id);
    // Decided before anything loads or is written: a STEP that is not there is refused at once.
    const seed = forkSeed(run.id, events, await journal.messages.stages(run.id), args.at);
    const loaded = await loadRecorded(s, run, events, { workflow: args.workflow, cwd: args.cwd });
    const inputs = reviveInputs(loaded.definition.inputs ?? {}, (run.inputs ?? {}) as Record<string, unknown>);
    s.info(`fork of ${run.id} at #${seed.origin.at!.position} (${seed.origin.at!.name}): ${seed.events.filter((e) => e.type === "checkpoint").length} recorded step result(s) reused`);
    await startAndDrive(s, args, loaded, { inputs, seed });
  },
});
