/** `atomic pause RUN`: no new step of a live run starts until `atomic unpause`; running ones go on. */

import { defineCommand } from "citty";
import { setRunPaused } from "../../engine/pause.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "pause", description: "Pause a live run: no new step starts" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const applied = await setRunPaused(await s.journal(), run, true);
    if (s.globals.json) s.json({ runId: run.id, control: "pause", acknowledged: applied });
    else if (applied) s.result(`run ${run.id} paused`);
    else s.result(`run ${run.id}: pause requested; the run has not acknowledged it yet`);
  },
});
