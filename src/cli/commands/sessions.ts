/**
 * `atomic sessions [--run RUN]`: the sessions registered with the intercom
 * broker (starting it if none runs): each live root run (`<run id>`) and
 * each of its running stages (`<run id>:<stage path>`), and any other
 * client. `--run` keeps one run's group.
 */

import { defineCommand } from "citty";
import { IntercomClient, runGroup } from "../../intercom/client.ts";
import { session } from "../session.ts";
import { formatTime } from "../style.ts";

export default defineCommand({
  meta: { name: "sessions", description: "List intercom sessions (live runs and their running stages)" },
  args: {
    run: { type: "string", description: "only this run's sessions (run id or unique prefix)" },
  },
  async run({ args }) {
    const s = session();
    const group = args.run === undefined ? undefined : runGroup((await s.findRun(args.run)).rootId);
    const client = await IntercomClient.connect({ home: s.globals.home, role: "cli" });
    try {
      const sessions = await client.list(group);
      const broker = await client.status();
      if (s.globals.json) {
        for (const x of sessions) s.json(x);
        return;
      }
      if (sessions.length === 0) {
        s.info(`no sessions${group ? ` of run ${group}` : ""} (broker pid ${broker.pid}); a live run joins within a second of the broker starting`);
        return;
      }
      const width = Math.max(7, ...sessions.map((x) => x.name.length));
      s.result(s.style.dim(`${"SESSION".padEnd(width)}  ${"ROLE".padEnd(6)}  ${"PID".padEnd(7)}  SINCE`));
      for (const x of sessions) s.result(`${x.name.padEnd(width)}  ${x.role.padEnd(6)}  ${String(x.pid).padEnd(7)}  ${formatTime(x.since)}`);
    } finally {
      client.close();
    }
  },
});
