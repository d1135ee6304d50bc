/**
 * `atomic mcp`: an MCP server over stdio for coding agents that operate
 * atomic (list and show runs, start workflows, read transcripts, send,
 * answer, pause, unpause, cancel, resume, rerun, fork). The tools are in src/cli/mcp/;
 * each is an action of src/service/operator.ts. A client runs it as a
 * stdio server, e.g. `claude mcp add atomic -- atomic mcp`.
 */

import { defineCommand } from "citty";
import { Operator } from "../../service/operator.ts";
import { importEntry } from "../../shared/entry-points.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "mcp", description: "An MCP server over stdio for agents that operate atomic: runs, workflows, transcripts, messages, answers, control" },
  args: {},
  async run() {
    const s = session();
    const journal = await s.journal();
    const cwd = process.cwd();
    const op = new Operator({ journal, home: s.globals.home, cwd, journalUrl: s.globals.journal });
    // The MCP SDK (with its ajv) is a bundle of its own: no other command loads it (shared/entry-points.ts).
    const { serveMcp } = (await importEntry("cli/mcp/server.ts")) as typeof import("../mcp/server.ts");
    try {
      await serveMcp(op);
    } finally {
      await op.close();
    }
  },
});
