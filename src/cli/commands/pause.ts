/**
 * `atomic pause RUN`: no new step of a live run starts until `atomic unpause`; running ones go on.
 * `atomic pause RUN STAGE`: that stage (its path from the root run) starts no attempt, and, running on
 * a runner that can hold (openai), finishes its current turn and waits, until `atomic unpause RUN STAGE`.
 */

import { defineCommand } from "citty";
import { setRunPaused, setStagePaused } from "../../engine/pause.ts";
import { builtinSource } from "../../engine/builtins.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "pause", description: "Pause a live run (no new step starts), or one stage of it" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: 'a stage\'s path ("review/security"): pause only that stage', required: false },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    if (args.stage !== undefined) {
      const applied = await setStagePaused(journal, run, args.stage, true, builtinSource, { home: s.globals.home });
      if (s.globals.json) return s.json({ runId: run.id, stage: args.stage, control: "pause", acknowledged: applied });
      if (applied) s.result(`stage ${args.stage} of run ${run.id} paused: it starts no attempt, and an openai agent running it stops after its current turn`);
      else s.result(`stage ${args.stage} of run ${run.id}: pause requested; the run has not acknowledged it yet`);
      return;
    }
    const applied = await setRunPaused(journal, run, true, { home: s.globals.home });
    if (s.globals.json) s.json({ runId: run.id, control: "pause", acknowledged: applied });
    else if (applied) s.result(`run ${run.id} paused`);
    else s.result(`run ${run.id}: pause requested; the run has not acknowledged it yet`);
  },
});
