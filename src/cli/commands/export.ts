/**
 * `atomic export RUN > run.json`: a run's journal (its record and events) as
 * a portable JSON file (src/testing/run-export.ts), for `atomic replay` and
 * `testRun(wf, { replay })` elsewhere: CI checks a changed workflow against
 * real runs with it.
 */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { exportRun } from "../../testing/run-export.ts";
import { out } from "../output.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "export", description: "Write a run's journal as a portable JSON file (to stdout), for atomic replay" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    if (run.parentId) {
      throw new UsageError("not_root", `run ${run.id} is a child workflow run`, { hint: `export its root run, which replays it: atomic export ${run.rootId}` });
    }
    const journal = await s.journal();
    out(`${JSON.stringify(await exportRun(journal, run))}\n`);
  },
});
