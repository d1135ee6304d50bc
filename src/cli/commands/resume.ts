/** `atomic resume RUN`: continue a run; recorded steps replay from the journal. */

import { defineCommand } from "citty";
import { RootRun, assertResumable } from "../../engine/driver.ts";
import { loadWorkflowFile } from "../../engine/loader.ts";
import { driveRun } from "../drive.ts";
import { POOL_ARGS, executorOption } from "../pool-options.ts";
import { BUDGET_ARGS, budgetOption } from "../budget-options.ts";
import { session } from "../session.ts";
import { createRunView } from "../view/run-view.ts";
import { leaseOption } from "./run.ts";

export default defineCommand({
  meta: { name: "resume", description: "Continue an interrupted, crashed, failed or blocked run (--max-cost N raises a used-up budget)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    leaseMs: { type: "string", description: "lease timeout in ms (default 30000)" },
    ...POOL_ARGS,
    ...BUDGET_ARGS,
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    assertResumable(run);
    const loaded = await loadWorkflowFile(run.workflowPath);
    const pool = executorOption(s, args);
    const budget = budgetOption(args);
    const journal = await s.journal();
    const view = createRunView(s);
    const root = await RootRun.resume(
      { journal, home: s.globals.home, observer: view.observer, ...leaseOption(args.leaseMs), ...pool },
      run,
      loaded.definition,
      loaded.digest,
      budget,
    );
    await driveRun(s, root, view);
  },
});
