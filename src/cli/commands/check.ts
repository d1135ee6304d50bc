/**
 * `atomic check FILE…`: type-check each workflow with the compiler the
 * binary carries, then load it and check it is a workflow
 * (project/check.ts). Prints `file:line:col: message` per error (exit 1),
 * else `ok: workflow NAME (inputs …)` per file (exit 0).
 */

import { defineCommand } from "citty";
import { checkWorkflows, reportChecks } from "../project/check.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "check", description: "Type-check workflow files and check that each is a workflow (no node_modules needed)" },
  args: {
    files: { type: "positional", description: "workflow files (.ts)", valueHint: "FILE…", required: true },
  },
  async run() {
    const s = session();
    const files = s.rawArgs.slice(1).filter((a) => !a.startsWith("-"));
    reportChecks(s, await checkWorkflows(files));
  },
});
