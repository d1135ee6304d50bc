/** `atomic unpause RUN [STAGE]`: let a paused run start new steps again, or a paused stage go on. */

import { defineCommand } from "citty";
import { setRunPaused, setStagePaused } from "../../engine/pause.ts";
import { builtinSource } from "../../engine/builtins.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "unpause", description: "Let a paused run start new steps again, or a paused stage go on" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: 'a paused stage\'s path ("review/security"): unpause only that stage', required: false },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    if (args.stage !== undefined) {
      const applied = await setStagePaused(journal, run, args.stage, false, builtinSource, { home: s.globals.home });
      if (s.globals.json) return s.json({ runId: run.id, stage: args.stage, control: "unpause", acknowledged: applied });
      if (applied) s.result(`stage ${args.stage} of run ${run.id} unpaused`);
      else s.result(`stage ${args.stage} of run ${run.id}: unpause requested; the run has not acknowledged it yet`);
      return;
    }
    const applied = await setRunPaused(journal, run, false, { home: s.globals.home });
    if (s.globals.json) s.json({ runId: run.id, control: "unpause", acknowledged: applied });
    else if (applied) s.result(`run ${run.id} unpaused`);
    else s.result(`run ${run.id}: unpause requested; the run has not acknowledged it yet`);
  },
});
