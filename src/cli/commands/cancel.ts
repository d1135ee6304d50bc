/** `atomic cancel RUN`: cancel a run, live (through its driver) or not (directly). */

import { defineCommand } from "citty";
import { cancelRun } from "../../engine/cancel.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "cancel", description: "Cancel a run" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    wait: { type: "string", description: "seconds to wait for a live run to stop (default 30)" },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const waitS = args.wait === undefined ? 30 : Number(args.wait);
    const { result, status } = await cancelRun(await s.journal(), run, Math.max(0, waitS) * 1000, s.globals.home);
    if (s.globals.json) return s.json({ runId: run.id, result, status });
    if (result === "cancelled") s.result(`run ${run.id} cancelled`);
    else if (result === "ended_otherwise") s.result(`run ${run.id} ended before the cancel took effect: ${status}`);
    else {
      s.result(`asked run ${run.id} to cancel; it has not stopped yet`);
      s.exitCode = 1;
    }
  },
});
