/**
 * Drives a root run in the foreground for `run` and `resume`: shows
 * progress, handles Ctrl-C, prints the result and sets the exit code.
 *
 * First Ctrl-C (or SIGTERM): stop dispatching, end running stages, record
 * the run as interrupted (resumable) and print the resume command. Second
 * Ctrl-C: kill every stage process group and exit at once (130); the run
 * stays resumable because its lease holder is gone.
 */

import type { RootRun } from "../engine/driver.ts";
import type { RunOutcome } from "../engine/step-run.ts";
import type { RunStatus } from "../journal/runs.ts";
import { killAllGroups } from "../runners/shell/process-groups.ts";
import type { CliSession } from "./session.ts";
import { colorFor } from "./style.ts";
import type { RunView } from "./view/run-view.ts";
import { err, onStdoutClosed } from "./output.ts";
import { failureDetail, failureSentence } from "./failure.ts";
import { setEnv } from "../shared/config/environment.ts";
import { chainEnd } from "../engine/chain.ts";
import { LeaseHeldError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";

/**
 * A run that failed because its workflow code called the SDK wrongly (a patch id used twice, continueAsNew with
 * inputs the workflow refuses or from a child run) ends the command with exit 2, a usage error: the author's input
 * was bad, as `atomic check` would say, rather than a step failing. The run is recorded failed all the same.
 */
const SDK_MISUSE = new Set(["bad_patch_id", "patch_id_reused", "bad_continue_inputs", "bad_continue_as_new"]);

export const EXIT_CODE: Record<RunStatus, number> = {
  completed: 0,
  failed: 1,
  blocked: 3,
  cancelled: 4,
  // ctx.exit({ status: "skipped" }): ended well with nothing done, told apart from completed.
  skipped: 5,
  interrupted: 130,
  // Parked on a ctx.ask: blocked on a person; answer, then resume.
  awaiting_input: 3,
  running: 1,
};

/** `beforeResult`: awaited before the result is printed (the console of `--tui` closes first). */
export async function driveRun(s: CliSession, first: RootRun, view: RunView, opts: { beforeResult?: () => Promise<void> } = {}): Promise<void> {
  let root = first;
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals === 1) {
      view.note(`${sig === "SIGINT" ? "Ctrl-C" : sig}: stopping run ${root.runId} (again to exit at once)`);
      root.stop("interrupted");
      return;
    }
    killAllGroups("SIGKILL");
    view.close();
    err(`\nexiting now; resume with: atomic resume ${root.runId}\n`);
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  // Inherited by everything this drive starts (pool, stages): a later resume or the drive's end finds them by it.
  setEnv("ATOMIC_ROOT_RUN_ID", root.runId);
  // Nobody reads our output any more (`atomic run --json | head -1`): stop the run as the first Ctrl-C
  // does (it stays resumable) rather than drive it on unseen or die with its lease held.
  const undoClosed = onStdoutClosed(() => {
    if (signals++ === 0) root.stop("interrupted");
  });
  let outcome: RunOutcome;
  try {
    outcome = await root.run();
    // ctx.continueAsNew: the chain is followed to its end; the last run's outcome is the drive's.
    while (outcome.continuedAs && signals === 0) {
      const next = await chained(s, view, root, outcome.continuedAs);
      if ("outcome" in next) {
        outcome = next.outcome;
        break;
      }
      root = next.root;
      setEnv("ATOMIC_ROOT_RUN_ID", root.runId);
      outcome = await root.run();
    }
  } finally {
    undoClosed();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    view.close();
  }
  await opts.beforeResult?.();
  printOutcome(s, outcome);
  s.exitCode = outcome.status === "failed" && SDK_MISUSE.has(outcome.error?.code ?? "") ? 2 : EXIT_CODE[outcome.status];
  // Ctrl-C while a question waits parks the run awaiting input; the process still ends as interrupted.
  if (root.stopReason === "interrupted" && outcome.status === "awaiting_input") s.exitCode = 130;
}

/**
 * The next run of a chain, to drive: the one the hand-over started, or a resume of it. One that ended
 * already (it continued in turn, or completed) is followed through its record; one another process drives
 * ends this drive with the command that watches it.
 */
async function chained(s: CliSession, view: RunView, root: RootRun, next: RunId): Promise<{ root: RootRun } | { outcome: RunOutcome }> {
  if (s.globals.json) s.json({ type: "continued", runId: root.runId, continuedAs: next });
  else view.note(`run ${root.runId} continued as run ${next}`);
  let driven: RootRun | undefined;
  try {
    driven = await root.continuation(next);
  } catch (e) {
    if (!(e instanceof LeaseHeldError)) throw e;
    return { outcome: { runId: next, status: "interrupted", error: { name: "LeaseHeld", code: "lease_held", message: `run ${next}, which continues run ${root.runId}, is driven by another process`, hint: `follow it with: atomic show ${next}` } } };
  }
  if (driven) return { root: driven };
  const journal = await s.journal();
  const record = await journal.getRun(next);
  const end = record ? await chainEnd(journal, record) : undefined;
  if (!end) throw new Error(`run ${next}, which continues run ${root.runId}, is not in the journal`);
  return { outcome: { runId: end.id, status: end.status, ...(end.outputs !== null ? { outputs: end.outputs } : {}), ...(end.error ? { error: end.error } : {}) } };
}

export function printOutcome(s: CliSession, outcome: RunOutcome): void {
  if (s.globals.json) {
    s.json({ type: "result", ...outcome, exitCode: EXIT_CODE[outcome.status] });
    return;
  }
  const st = s.style;
  const line = `run ${outcome.runId} ${colorFor(st, outcome.status)(outcome.status)}`;
  // Skipped (ctx.exit) ended as well as completed did: its reason is no error.
  if (outcome.status === "completed" || outcome.status === "skipped") {
    s.info(outcome.status === "skipped" && outcome.error ? `${line}: ${outcome.error.message}` : line);
    if (outcome.outputs !== undefined && outcome.outputs !== null) s.result(JSON.stringify(outcome.outputs, null, 2));
    s.info(st.dim(`inspect it with: atomic show ${outcome.runId}`));
    return;
  }
  err(`${line}${outcome.error ? `: ${failureSentence(outcome.error)}` : ""}\n`);
  for (const detail of outcome.error ? failureDetail(outcome.error, st, s.globals.verbose) : []) err(`${detail}\n`);
  if (outcome.error?.hint) err(`hint: ${outcome.error.hint}\n`);
  if (outcome.status === "awaiting_input") {
    err(`see its open questions with: atomic inbox ${outcome.runId}\n`);
    err(`answer with: atomic answer ${outcome.runId} <question id> <answer>, then resume with: atomic resume ${outcome.runId}\n`);
  } else if ((outcome.status === "interrupted" && outcome.error?.code !== "lease_lost") || outcome.status === "blocked") {
    err(`resume with: atomic resume ${outcome.runId}\n`);
  } else if (outcome.status === "failed") {
    err(`after fixing the cause, resume with: atomic resume ${outcome.runId}\n`);
  }
}
