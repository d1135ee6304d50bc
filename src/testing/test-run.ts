/**
 * `testRun(workflow, options)`: runs a workflow to its end in this process
 * with the engine `atomic run` uses (engine/driver.ts), on a journal in
 * memory (journal/memory.ts), with agents and shell stages scripted
 * (./scripted-executor.ts), questions answered from the options, and a
 * virtual clock (./virtual-clock.ts). With `crashAt`, the first drive stops
 * as a killed process would leave the run, and a second drive resumes it:
 * at a stage, when it starts (the stage never reports back); at another
 * step (a `ctx.tool`), after its function returned and before its
 * checkpoint is written, the window a tool's idempotency key is for, so
 * the resumed run calls the function again. The steps say which were
 * replayed, so a test can check the workflow's own idempotency.
 *
 * Stages no script matches run their real runner with the configuration
 * `atomic run` would give them in this directory (.atomic/config.json, the
 * file ATOMIC_CONFIG names, ATOMIC_RUNNER, ATOMIC_MODEL and
 * ATOMIC_OPENAI_BASE_URL), not the atomic home's: a test's home is its own.
 * One setting differs: host pressure (a loaded CPU, little free memory)
 * never paces stage starts, so a test takes as long on a busy machine.
 *
 * Everything it makes (the journal, a private home for the stages'
 * files) is gone when it resolves. docs/design/testing.md explains the
 * parts; docs/guides/testing-workflows.md is the user's guide.
 */

import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RootRun } from "../engine/driver.ts";
import { EVENT } from "../engine/journal-events.ts";
import type { EngineEvent } from "../engine/observer.ts";
import type { RunOutcome } from "../engine/step-run.ts";
import { validateInputs } from "../engine/inputs.ts";
import { openMemoryJournal } from "../journal/memory.ts";
import type { RunRecord } from "../journal/runs.ts";
import { isWorkflow } from "../sdk/workflow.ts";
import type { WorkflowDefinition } from "../sdk/types.ts";
import { loadConfig } from "../shared/config/load.ts";
import { UsageError } from "../shared/errors.ts";
import { removeTree } from "../shared/remove-tree.ts";
import { matchKey } from "./matching.ts";
import { ScriptedExecutor } from "./scripted-executor.ts";
import { VirtualClock } from "./virtual-clock.ts";
import { parseExport, type RunExport } from "./run-export.ts";
import { replayExport } from "./replay.ts";
import type { TestRunOptions, TestRunResult, TestStep } from "./types.ts";

export async function testRun(workflow: WorkflowDefinition, options: TestRunOptions = {}): Promise<TestRunResult> {
  if (!isWorkflow(workflow)) {
    throw new UsageError("no_workflow", "testRun needs a workflow (the default export of a workflow file)", {
      hint: 'import wf from "./my-workflow.ts"; then: await testRun(wf, { ... })',
    });
  }
  if (options.replay !== undefined) return replayed(workflow, options.replay);
  const inputs = validateInputs(workflow.inputs ?? {}, options.inputs ?? {}, workflow.name);
  const home = mkdtempSync(join(tmpdir(), "atomic-test-"));
  const journal = await openMemoryJournal();
  // Host pressure never paces a test's stage starts: a workflow's test takes as long on a busy machine as on a
  // quiet one (its stages are scripted, or few), and what it checks does not depend on the machine's load.
  const loaded = loadConfig({ home }).config;
  const config = { ...loaded, admission: { ...loaded.admission, maxLoadPerCpu: Number.POSITIVE_INFINITY, minFreeMemoryMb: 0 } };
  const clock = new VirtualClock(options.startAt ?? Date.now());
  const steps: TestStep[] = [];
  let drive = 1;
  let crashed = false;
  let root: RootRun | undefined;
  let root0: RunRecord | undefined;
  const asks = new Map<string, string>();

  const crash = (): boolean => {
    if (drive !== 1 || !root) return false;
    if (!crashed) {
      crashed = true;
      root.stop("interrupted");
    }
    return true;
  };
  const crashHere = (name: string): boolean => {
    if (drive !== 1) return false;
    if (crashed) return true;
    return options.crashAt !== undefined && matchKey({ [options.crashAt]: true }, name) !== undefined && crash();
  };
  // The step (run and position) whose checkpoint the crash loses: the first drive "dies" before writing it.
  let lost: string | undefined;
  const append = journal.append.bind(journal);
  journal.append = async (lease, entries) => {
    if (lost === undefined) return append(lease, entries);
    const kept = entries.filter((e) => !(e.type === EVENT.checkpoint && `${e.runId}\u0000${e.key}` === lost));
    if (kept.length === entries.length) return append(lease, entries);
    const outcomes = kept.length > 0 ? await append(lease, kept) : [];
    // The lost entry looks written to the drive that wrote it, as it would to a process killed right after.
    return entries.map((e) => (kept.includes(e) ? outcomes[kept.indexOf(e)]! : { status: "appended" as const, seq: -1 }));
  };
  // Each child run's path (its boundary steps' names from the root), so stages are named as `atomic send` names them.
  const prefixes = new Map<string, string>();
  const pathOf = (runId: string, name: string) => (prefixes.has(runId) ? `${prefixes.get(runId)}/${name}` : name);
  const executor = new ScriptedExecutor(options, crashHere, pathOf);

  const observer = (e: EngineEvent): void => {
    if (e.type === "step_started") {
      if (e.kind === "ask") asks.set(`${e.runId}\u0000${e.position}`, e.name);
      if (e.kind === "child" && e.childRunId) prefixes.set(e.childRunId, pathOf(e.runId, e.name));
      if (e.kind !== "stage" && !crashed && crashHere(e.name)) lost = `${e.runId}\u0000${e.position}`;
    } else if (e.type === "step_ended") {
      steps.push({ kind: e.kind, name: e.name, status: e.status, replayed: e.replayed, runId: e.runId, drive });
      if (e.kind !== "stage" && e.status === "completed" && !e.replayed) crashHere(e.name);
    } else if (e.type === "prompt" && e.state === "open") {
      const name = asks.get(`${e.runId}\u0000${e.position}`);
      const answer = matchKey(options.answers, name, e.question)?.[1];
      // No answer scripted: a question with a deadline times out (the clock moves on to it, the step's next look
      // finds it past); one without parks the run awaiting input, as it would with nobody to answer.
      if (answer === undefined) {
        void journal.messages.getPrompt(e.rootId as RunRecord["id"], e.promptId).then(
          (p) => (p?.deadline ? clock.advanceTo(p.deadline) : root?.stop("interrupted")),
          () => root?.stop("interrupted"),
        );
      }
      // Written before the step reads its prompt back, so it never waits for a poll.
      else void journal.messages.answerPrompt(e.rootId as RunRecord["id"], e.promptId, answer, "test").catch(() => root?.stop("interrupted"));
    }
  };

  const driverOpts = { journal, home, observer, config, executor, clock };
  try {
    root = await RootRun.start(driverOpts, { definition: workflow, workflowPath: `test:${workflow.name}`, digest: "test", inputs });
    let outcome: RunOutcome = await root.run();
    if (crashed && outcome.status === "interrupted") {
      drive = 2;
      root0 = await journal.getRun(root.runId);
      root = await RootRun.resume(driverOpts, root0!, workflow, "test");
      outcome = await root.run();
    }
    // ctx.continueAsNew: the chain is followed to its end, as `atomic run` follows it.
    for (let next = outcome.continuedAs; next; next = outcome.continuedAs) {
      const following: RootRun | undefined = await root!.continuation(next);
      if (!following) break;
      root = following;
      outcome = await following.run();
    }
    return {
      runId: outcome.runId,
      status: outcome.status,
      outputs: outcome.outputs ?? null,
      ...(outcome.error ? { error: { code: outcome.error.code, message: outcome.error.message, ...(outcome.error.hint ? { hint: outcome.error.hint } : {}) } } : {}),
      steps,
      stages: executor.stages,
      crashed,
      virtualMs: clock.skipped,
    };
  } finally {
    await journal.close();
    removeTree(home);
  }
}

/** `testRun(wf, { replay })`: the recorded run replayed against `workflow` (./replay.ts). */
async function replayed(workflow: WorkflowDefinition, source: string | RunExport): Promise<TestRunResult> {
  let exported: RunExport;
  if (typeof source === "string") {
    let text: string;
    try {
      text = readFileSync(source, "utf8");
    } catch (err) {
      throw new UsageError("not_an_export", `cannot read the run export ${source} (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { hint: "make one with: atomic export RUN > run.json" });
    }
    exported = parseExport(text, source);
  } else {
    exported = source;
  }
  const steps: TestStep[] = [];
  const report = await replayExport(workflow, exported, (e) => {
    if (e.type === "step_ended" && e.replayed) steps.push({ kind: e.kind, name: e.name, status: e.status, replayed: true, runId: exported.run.id, drive: 1 });
  });
  return {
    runId: exported.run.id,
    status: report.result === "ok" ? "replayed" : "diverged",
    outputs: null,
    ...(report.divergence ? { error: { code: "nondeterminism", message: report.divergence.message, ...(report.divergence.hint ? { hint: report.divergence.hint } : {}) } } : {}),
    steps,
    stages: {},
    crashed: false,
    virtualMs: 0,
  };
}
