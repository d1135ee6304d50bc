/**
 * `atomic resume RUN [--upgrade] [--workflow FILE] [--cwd DIR]`: continue a
 * run; recorded steps replay from the journal. It runs the code the run is
 * pinned to (engine/pinned-code.ts), whatever became of the file since;
 * `--upgrade` moves the run to the workflow file as it is now (recorded
 * steps replay against it), `--workflow` to another file. It runs in the
 * directory the run started in (run-place.ts), and says so when that is not
 * where resume was typed; `--cwd` names another directory.
 */

import { defineCommand } from "citty";
import { resolve } from "node:path";
import { RootRun, assertResumable } from "../../engine/driver.ts";
import { loadPinnedWorkflow, loadWorkflowFile } from "../../engine/loader.ts";
import { checkRunDir, recordedPlace } from "../../engine/run-place.ts";
import { applyRecordedEnvironment, recordedEnvironment } from "../../engine/run-environment.ts";
import { driveRun } from "../drive.ts";
import { chainEnd, isContinued } from "../../engine/chain.ts";
import { POOL_ARGS, executorOption } from "../pool-options.ts";
import { BUDGET_ARGS, budgetOption, warnIfUnpriced } from "../budget-options.ts";
import { loadConfig } from "../../shared/config/load.ts";
import { session } from "../session.ts";
import { createRunView } from "../view/run-view.ts";
import { leaseOption } from "./run.ts";
import { UsageError } from "../../shared/errors.ts";
import { announceDetached, requireService } from "../detach.ts";
import { CONSOLE_VIEW, TUI_ARGS, driveInConsole, requireTerminal } from "../tui-run.ts";
import { setAnyEnv, takeEnv } from "../../shared/config/environment.ts";
import { tellStarter } from "../../shared/ready-pipe.ts";
import { repeatedFlag } from "../globals.ts";

export default defineCommand({
  meta: { name: "resume", description: "Continue an interrupted, crashed, failed or blocked run (--max-cost N raises a used-up budget)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    workflow: { type: "string", description: "run this workflow file instead of the code the run is pinned to (it moved)" },
    upgrade: { type: "boolean", description: "move the run to its workflow file as it is now (recorded steps replay against it)" },
    env: { type: "string", valueHint: "NAME=VALUE", description: "for this drive, a variable other than the one the run started with; repeat the flag for more" },
    cwd: { type: "string", description: "run the rest in this directory instead of the one the run started in" },
    leaseMs: { type: "string", description: "lease timeout in ms (default 30000)" },
    detach: { type: "boolean", description: "record the resume (a raised budget too) and leave the run to the service (atomic serve)" },
    ...TUI_ARGS,
    ...POOL_ARGS,
    ...BUDGET_ARGS,
  },
  async run({ args }) {
    const s = session();
    const asked = await s.findRun(args.run);
    // A run that continued as new (ctx.continueAsNew): what is left to resume is the last run of its chain.
    const run = isContinued(asked) ? await chainEnd(await s.journal(), asked) : asked;
    if (run !== asked) s.info(s.style.dim(`run ${asked.id} continued as new; the last run of its chain is ${run.id}`));
    if (args.upgrade && run.status === "completed") {
      throw new UsageError("already_completed", `run ${run.id} already completed; there is nothing to move to the current file`, {
        hint: `start it again on the current file: atomic rerun ${run.id}`,
      });
    }
    assertResumable(run);
    if (args.tui) {
      if (args.detach) throw new UsageError("bad_flag", "--tui does not go with --detach", { hint: "atomic tui shows any run, detached ones too" });
      requireTerminal(s, "atomic resume --tui");
    }
    const journal = await s.journal();
    // A home this user may only read: that is why nothing can be resumed here, whatever else is wrong.
    journal.assertWritable?.();
    const events = await journal.readEvents(run.id);
    // The service reads the choice the run recorded when it started (src/service/due-runs.ts), not the file.
    if (args.detach) await requireService(journal, { name: run.workflowName, recover: (events[0]?.payload as { recover?: unknown } | undefined)?.recover !== false });
    // The workflow sees the environment the run started with, secrets from this process (run-environment.ts).
    const overrides = envOverrides(repeatedFlag(s.rawArgs, "env"));
    const environment = recordedEnvironment(events[0]?.payload);
    if (environment) applyRecordedEnvironment(run.id, { ...environment, env: { ...environment.env, ...overrides } }, loadConfig({ home: s.globals.home }).config);
    else for (const [name, value] of Object.entries(overrides)) setAnyEnv(name, value);
    const place = recordedPlace(run, events);
    const cwd = args.cwd !== undefined ? resolve(args.cwd) : place.cwd;
    if (cwd !== undefined) checkRunDir(run.id, cwd);
    const file = args.workflow !== undefined ? resolve(args.workflow) : place.path;
    // The code the run is pinned to, unless told to move it to a file as it is now.
    const pinned = args.workflow === undefined && !args.upgrade ? await loadPinnedWorkflow(journal, s.globals.home, run.workflowDigest, place.path) : undefined;
    const loaded =
      pinned ??
      (await loadWorkflowFile(file).catch((err: unknown) => {
        if (args.workflow === undefined && err instanceof UsageError && err.code === "workflow_not_found") {
          throw new UsageError(err.code, `workflow file ${file} does not exist any more (run ${run.id} started from it)`, {
            hint: `if it moved, name it: atomic resume ${run.id} --workflow FILE`,
          });
        }
        throw err;
      }));
    const pool = executorOption(s, args);
    const budget = budgetOption(args);
    const view = args.tui ? CONSOLE_VIEW : createRunView(s);
    const here = process.cwd();
    // Shell stages, relative paths and the project's config mean what they meant when the run started.
    if (cwd !== undefined && cwd !== here) {
      process.chdir(cwd);
      view.note(`resuming in ${cwd}, where the run started${args.cwd !== undefined ? " (--cwd)" : ""}`);
    }
    warnIfUnpriced(s, loadConfig({ home: s.globals.home }).config, loaded.definition, budget);
    const root = await RootRun.resume(
      { journal, home: s.globals.home, observer: view.observer, ...leaseOption(args.leaseMs), ...pool, ...drivenBy(), ...(args.upgrade ? { upgraded: true } : {}) },
      run,
      loaded.definition,
      loaded.digest,
      budget,
      { path: loaded.path, cwd: process.cwd(), code: pinned ? undefined : loaded.code },
      events,
    );
    tellStarter(); // run_resumed is recorded: a service that spawned this process waits for that (src/service/spawn-run.ts)
    if (args.detach) {
      view.close();
      await root.detach();
      announceDetached(s, root.runId);
      return;
    }
    if (args.tui) await driveInConsole(s, root);
    else await driveRun(s, root, view);
  },
});

/** `--env NAME=VALUE` flags, checked: a name a shell would take, then `=`. */
function envOverrides(pairs: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    const name = eq > 0 ? pair.slice(0, eq) : "";
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      throw new UsageError("bad_flag", `--env ${JSON.stringify(pair)} is not NAME=VALUE`, { hint: "for example --env LOG_LEVEL=debug" });
    }
    out[name] = pair.slice(eq + 1);
  }
  return out;
}

/** A drive the local service started (src/service/drives.ts) says so in its run_resumed event. */
function drivenBy(): { drivenBy?: "service" } {
  // Taken away: not inherited by what this drive starts (a resume typed in a stage's shell is a person's, not the service's).
  const by = takeEnv("ATOMIC_DRIVEN_BY");
  return by === "service" ? { drivenBy: "service" } : {};
}
