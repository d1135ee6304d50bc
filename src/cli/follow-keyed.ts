/**
 * Following a run this process does not drive: `atomic run --id KEY` when a
 * run of that id exists already (engine/keyed-start.ts). A live run is
 * followed to its end, as its own driver would have shown it ending (the
 * outputs, the exit code); a run nobody drives (crashed) is reported with
 * the command that continues it, instead of waiting for nobody.
 */

import { shownStatus } from "../journal/run-status.ts";
import type { RunRecord, ShownStatus } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { EXIT_CODE, printOutcome } from "./drive.ts";
import { err } from "./output.ts";
import type { CliSession } from "./session.ts";

const POLL_MS = 250;
const LIVE: readonly ShownStatus[] = ["running", "paused", "awaiting_input"];

export async function followKeyedRun(s: CliSession, first: RunRecord): Promise<void> {
  const journal = await s.journal();
  let run = first;
  let status = shownStatus(run, await journal.getLease(run.rootId));
  if (s.globals.json) s.json({ type: "attached", runId: run.id, status });
  else s.info(s.style.dim(`run ${run.id} exists (${status}): ${LIVE.includes(status) ? "following it" : "not started again"}`));
  while (LIVE.includes(status)) {
    await Bun.sleep(POLL_MS);
    run = (await journal.getRun(run.id as RunId)) ?? run;
    status = shownStatus(run, await journal.getLease(run.rootId));
  }
  if (status === "crashed") {
    if (s.globals.json) s.json({ type: "result", runId: run.id, status, exitCode: 1 });
    else err(`run ${run.id} crashed: nobody drives it\nresume with: atomic resume ${run.id}\n`);
    s.exitCode = 1;
    return;
  }
  const stored = run.status;
  printOutcome(s, { runId: run.id, status: stored, ...(run.outputs !== null ? { outputs: run.outputs } : {}), ...(run.error ? { error: run.error } : {}) });
  s.exitCode = EXIT_CODE[stored];
}
