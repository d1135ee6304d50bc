/**
 * Pausing a live run, or one stage of it, from any process: the request
 * goes to the run's control row (run-control.ts), and the driver is asked
 * over intercom to apply it now (a `control` request, mail/requests.ts),
 * whose answer comes once it is applied everywhere. A driver that cannot
 * be reached (no broker, on another machine) finds the request at its next
 * poll of the row; the journal is read then, on a back-off (below).
 * A paused run starts no new step (running ones go on) until "unpause".
 * A paused stage (its path from the root run) starts no attempt, and a
 * running agent stage whose runner can hold (the openai runner) finishes
 * its current turn and makes no next one, until the stage is unpaused;
 * other runners' running attempts go on (docs/guides/messages-and-humans.md).
 */

import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { pausedStages, runPausedBy, stageControl } from "../journal/run-control.ts";
import { UsageError } from "../shared/errors.ts";
import { isPattern, parseStagePath } from "../intercom/addresses.ts";
import { checkProvable, notifyDriver } from "./messaging.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { EVENT } from "./journal-events.ts";

/**
 * Resolves true once the driver (and every worker) applied the request, false
 * if that did not happen within `waitMs` (the request stays and is applied
 * when the driver gets to it).
 */
export async function setRunPaused(journal: Journal, run: RunRecord, paused: boolean, wait: AckWait = {}): Promise<boolean> {
  await assertLiveRoot(journal, run, paused);
  const rev = await journal.requestControl(run.id, paused ? "pause" : "unpause");
  return acknowledged(journal, run, rev, wait);
}

/** How to wait for the driver: `home`, whose intercom broker reaches it (none: the journal only); `waitMs`, 15 s unless said. */
export interface AckWait {
  home?: string | undefined;
  waitMs?: number;
}

/**
 * How often the journal is read for the acknowledgement when the driver could not be asked: it is another
 * process (perhaps on another machine) and the journal notifies nobody of the change (SQLite cannot across
 * processes; docs/design/processes.md "Waiting for another process"). The driver polls its row every 500 ms.
 */
const ACK_BACKOFF: Backoff = { firstMs: 25, maxMs: 500, jitter: 0.2 };

/**
 * Pause or unpause the stage at `stage` (a path from the root run, not a
 * pattern) of a live root run; resolves as setRunPaused does. Refused: a
 * stage that has finished, a child workflow's path, a name no path of the
 * workflow can reach (with close matches), unpause of a stage not paused.
 */
export async function setStagePaused(
  journal: Journal,
  run: RunRecord,
  stage: string,
  paused: boolean,
  builtinSource?: (name: string) => string | undefined,
  wait: AckWait = {},
): Promise<boolean> {
  await assertLiveRoot(journal, run, paused, ` ${stage}`);
  const path = parseStagePath(stage);
  if (isPattern(path)) {
    throw new UsageError("bad_stage", `${paused ? "pause" : "unpause"} takes one stage's path, not a pattern (${path})`, { hint: `name the stage, e.g. atomic ${paused ? "pause" : "unpause"} ${run.id} review/security` });
  }
  const rows = (await journal.messages.stages(run.rootId)).filter((r) => r.path === path);
  if (rows.some((r) => r.kind === "child")) {
    throw new UsageError("bad_stage", `${path} in run ${run.id} is a child workflow, not a stage`, { hint: `pause one of its stages (atomic ${paused ? "pause" : "unpause"} ${run.id} ${path}/NAME) or the whole run (atomic pause ${run.id})` });
  }
  const row = rows[0];
  if (paused && row?.state === "finished") {
    throw new UsageError("stage_ended", `stage ${path} of run ${run.id} has finished (${row.outcome ?? "completed"})`, { hint: "there is nothing to pause; atomic show lists the stages still to run" });
  }
  if (!row) await checkProvable(journal, run, run.rootId, path, builtinSource);
  if (!paused) {
    const events = await journal.readEvents(run.id);
    const applied = events.filter((e) => e.type === EVENT.controlApplied).map((e) => String((e.payload as { action?: unknown }).action ?? ""));
    if (!pausedStages(applied).has(path)) {
      throw new UsageError("not_paused", `stage ${path} of run ${run.id} is not paused`, { hint: `pause it with: atomic pause ${run.id} ${path}` });
    }
  }
  const rev = await journal.requestControl(run.id, stageControl(runPausedBy(run.control), path, paused));
  return acknowledged(journal, run, rev, wait);
}

/** Only a live root run takes pause requests (its driver applies them). */
async function assertLiveRoot(journal: Journal, run: RunRecord, paused: boolean, stage = ""): Promise<void> {
  if (run.parentId) {
    throw new UsageError("not_root", `run ${run.id} is a child workflow run`, {
      hint: `${paused ? "pause" : "unpause"} its root run: atomic ${paused ? "pause" : "unpause"} ${run.rootId}${stage ? " PATH (the stage's path from the root)" : ""}`,
    });
  }
  const status = shownStatus(run, await journal.getLease(run.id));
  if (status !== "running" && status !== "paused" && status !== "awaiting_input") {
    throw new UsageError("not_running", `run ${run.id} is not running (it is ${status})`, {
      hint: status === "completed" || status === "cancelled" ? "there is nothing to pause" : `continue it with: atomic resume ${run.id}`,
    });
  }
}

async function acknowledged(journal: Journal, run: RunRecord, rev: number, wait: AckWait): Promise<boolean> {
  const waitMs = wait.waitMs ?? 15_000;
  const deadline = Date.now() + waitMs;
  if (wait.home) {
    // No broker running: the driver joined none, so none is started just to be told so.
    const reply = await notifyDriver(wait.home, run.id, { type: "control" }, waitMs, false);
    if (typeof reply?.applied === "number" && reply.applied >= rev) return true;
  }
  for (let look = 0; ; look++) {
    const now = await journal.getRun(run.id);
    if (!now || now.controlAck >= rev) return true;
    if (Date.now() > deadline) return false;
    const live = shownStatus(now, await journal.getLease(run.id));
    if (live !== "running" && live !== "paused") return false;
    await Bun.sleep(Math.min(backoffDelay(ACK_BACKOFF, look), Math.max(0, deadline - Date.now())));
  }
}
