/**
 * `atomic tui [RUN] [--status S] [--workflow NAME]`: the full-screen
 * terminal console (cli/tui/console.ts; docs/design/terminal-console.md):
 * the run list, a run's stage tree and a stage's conversation, questions
 * answered and messages sent inline, pause, cancel, resume and rerun.
 * With RUN it opens on that run. It needs a terminal on both stdin and
 * stdout; elsewhere it says so and names the commands that work in a pipe.
 */

import { defineCommand } from "citty";
import { RUN_STATUSES, type RunStatus } from "../../journal/runs.ts";
import { UsageError } from "../../shared/errors.ts";
import { session } from "../session.ts";
import { openConsole, requireTerminal } from "../tui-run.ts";

export default defineCommand({
  meta: { name: "tui", description: "The full-screen terminal console: runs, stage trees, conversations, questions" },
  args: {
    run: { type: "positional", description: "open on this run (id or unique prefix)", required: false },
    status: { type: "string", description: `list only runs of this status (${RUN_STATUSES.join(", ")}); s changes it in the console` },
    workflow: { type: "string", description: "list only runs of this workflow; w changes it in the console" },
  },
  async run({ args }) {
    const s = session();
    requireTerminal(s, "atomic tui");
    if (args.status !== undefined && !(RUN_STATUSES as readonly string[]).includes(args.status)) {
      throw new UsageError("bad_flag", `--status must be one of ${RUN_STATUSES.join(", ")}, got ${JSON.stringify(args.status)}`, { hint: "or leave it out and press s in the console" });
    }
    const run = args.run ? await s.findRun(args.run) : undefined;
    await openConsole(s, { ...(run ? { runId: run.id } : {}), filter: { status: args.status as RunStatus | undefined, workflow: args.workflow } });
  },
});
