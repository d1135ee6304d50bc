/**
 * `atomic sessions [--run RUN]`: the sessions registered with the intercom
 * broker (starting it if none runs): each live root run (`<run id>`, role
 * root) and each of its running stages (`<run id>:<stage path>`, role
 * stage), and any other client. `--run` keeps one run's group.
 *
 * Right on the first call: a run's driver never starts the broker; it joins
 * one within a poll tick of its socket appearing. So a listing taken just
 * after this command started the broker would miss them. The journal says
 * which runs are driven now (a live lease); the command's `list` asks the
 * broker to answer once each of those has registered, or at JOIN_WAIT_MS.
 */

import { defineCommand } from "citty";
import { IntercomClient, runGroup } from "../../intercom/client.ts";
import type { Journal } from "../../journal/journal.ts";
import type { RunRecord } from "../../journal/runs.ts";
import { isLocalHolderDead } from "../../shared/process-info.ts";
import { session } from "../session.ts";
import { formatTime } from "../style.ts";

/** A driver joins within a poll tick (250 ms) of the broker's socket appearing, plus its connection: well within this. */
const JOIN_WAIT_MS = 3_000;

export default defineCommand({
  meta: { name: "sessions", description: "List intercom sessions (live runs and their running stages)" },
  args: {
    run: { type: "string", description: "only this run's sessions (run id or unique prefix)" },
  },
  async run({ args }) {
    const s = session();
    const run = args.run === undefined ? undefined : await s.findRun(args.run);
    const group = run ? runGroup(run.rootId) : undefined;
    const driven = await drivenRoots(await s.journal(), run);
    const client = await IntercomClient.connect({ home: s.globals.home, role: "cli" });
    try {
      // The broker answers once each of them has registered (or at JOIN_WAIT_MS): no asking again meanwhile.
      const sessions = await client.list(group, { names: driven, ms: JOIN_WAIT_MS });
      const broker = await client.status();
      if (s.globals.json) {
        for (const x of sessions) s.json(x);
        return;
      }
      if (sessions.length === 0) {
        s.info(`no sessions${group ? ` of run ${group}` : ""} (broker pid ${broker.pid})`);
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

/** Root runs a live process drives now (its lease renewed in time, its holder not a dead process of this host). */
async function drivenRoots(journal: Journal, only: RunRecord | undefined): Promise<string[]> {
  const now = Date.now();
  const candidates = only
    ? [only.rootId]
    : (await journal.listRuns({ statuses: ["running", "awaiting_input"], limit: 200 })).map((r) => r.id as string);
  const out: string[] = [];
  for (const id of new Set(candidates)) {
    const lease = await journal.getLease(id as RunRecord["id"]);
    if (lease && lease.renewedAt + lease.timeoutMs >= now && !isLocalHolderDead(lease)) out.push(id);
  }
  return out;
}
