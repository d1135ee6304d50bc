/** `atomic unpause RUN`: let a paused run start new steps again. */

import { defineCommand } from "citty";
import { setRunPaused } from "../../engine/pause.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "unpause", description: "Let a paused run start new steps again" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const applied = await setRunPaused(await s.journal(), run, false);
    if (s.globals.json) s.json({ runId: run.id, control: "unpause", acknowledged: applied });
    else if (applied) s.result(`run ${run.id} unpaused`);
    else s.result(`run ${run.id}: unpause requested; the run has not acknowledged it yet`);
  },
});
