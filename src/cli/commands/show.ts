/**
 * `atomic show RUN`: a run's status, inputs, outputs, errors and steps with
 * timings. `--code`: the code the run is pinned to instead (its workflow
 * file and local modules as they were when it started or was last moved
 * with `resume --upgrade`: engine/pinned-code.ts).
 */

import { defineCommand } from "citty";
import { buildRunReport, type RunReport, type StepReport } from "../../engine/run-report.ts";
import { explainQueueWaits } from "../../engine/queue-waits.ts";
import { session, type CliSession } from "../session.ts";
import { failureDetail, failureSentence } from "../failure.ts";
import { shownEnd } from "../../journal/run-status.ts";
import { colorFor, formatDuration, formatTime } from "../style.ts";
import { reportTotals } from "../../status/totals.ts";
import { formatCost } from "../../runners/usage.ts";
import type { Usage } from "../../sdk/types.ts";
import { hostLabel } from "../../shared/process-info.ts";
import type { RunOrigin } from "../../engine/fork.ts";
import { BUILTIN_PREFIX } from "../../engine/builtins.ts";
import { pinnedFiles, pinnedManifest, shortVersion } from "../../engine/pinned-code.ts";
import type { Journal } from "../../journal/journal.ts";
import type { RunRecord } from "../../journal/runs.ts";
import { UsageError } from "../../shared/errors.ts";

export default defineCommand({
  meta: { name: "show", description: "Show a run: stages, outputs, errors, timings" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    all: { type: "boolean", description: "list every tool step too (default: counted)" },
    code: { type: "boolean", description: "print the code the run is pinned to (its workflow file and local modules)" },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    if (args.code) {
      await printCode(s, journal, run);
      return;
    }
    const report = (await buildRunReport(journal, run.id))!;
    await explainQueueWaits(journal, report);
    if (s.globals.json) {
      s.json({ ...report, totals: reportTotals(report) });
      return;
    }
    printReport(s, report, 0, args.all === true);
  },
});

async function printCode(s: CliSession, journal: Journal, run: RunRecord): Promise<void> {
  if (run.parentId !== null) {
    throw new UsageError("not_pinned", `run ${run.id} is a child run; its code is its root run's`, { hint: `atomic show ${run.rootId} --code` });
  }
  const manifest = await pinnedManifest(journal, run.workflowDigest);
  if (!manifest) {
    throw new UsageError("not_pinned", `run ${run.id} holds no pinned code (${run.workflowPath.startsWith(BUILTIN_PREFIX) ? "a builtin is part of the binary" : "it was recorded by an atomic that did not pin code"})`, {
      hint: run.workflowPath.startsWith(BUILTIN_PREFIX) ? `see it with: atomic workflows ${run.workflowPath.slice(BUILTIN_PREFIX.length)}` : `its file: ${run.workflowPath}`,
    });
  }
  const files = await pinnedFiles(journal, manifest);
  const decoder = new TextDecoder();
  if (s.globals.json) {
    s.json({ type: "code", runId: run.id, version: run.workflowDigest, path: run.workflowPath, entry: manifest.entry, files: [...files].map(([path, content]) => ({ path, digest: manifest.files[path], text: decoder.decode(content) })) });
    return;
  }
  s.result(`code ${shortVersion(run.workflowDigest)} of ${run.workflowPath} (${files.size} file${files.size === 1 ? "" : "s"}, paths relative to its directory)`);
  for (const [path, content] of files) {
    s.result(s.style.dim(`--- ${path}`));
    const text = decoder.decode(content);
    s.result(text.endsWith("\n") ? text.slice(0, -1) : text);
  }
}

function printReport(s: CliSession, report: RunReport, depth: number, all: boolean): void {
  const st = s.style;
  const pad = "  ".repeat(depth);
  const { run } = report;
  const end = shownEnd(run, report.status, report.leaseRenewedAt !== undefined ? { renewedAt: report.leaseRenewedAt } : undefined);
  const line = (label: string, value: string) => s.result(`${pad}${st.dim(label.padEnd(9))} ${value}`);
  s.result(`${pad}${st.bold(run.workflowName)} ${run.id}`);
  line("status", colorFor(st, report.status)(report.status));
  if (report.status === "crashed" && report.leaseExpiresAt) {
    // One reason for as long as it is crashed (run-status.ts crashCause), not one that flips when the lease runs out.
    const why = report.crashCause === "driver_gone" ? "its driver process is gone" : `its lease expired ${formatTime(report.leaseExpiresAt)}`;
    line("crashed", `${why}; resume with: atomic resume ${run.rootId}`);
  }
  if (report.holder) line("driver", `pid ${report.holder.pid} on ${hostLabel(report.holder.host)}`);
  for (const q of report.questions ?? []) {
    line("question", `${q.id}: ${q.question}${q.choices ? ` [${q.choices.join("/")}]` : ""}; answer with: atomic answer ${run.rootId} ${q.id} <answer>`);
  }
  line("started", `${formatTime(run.createdAt)} (${formatDuration(end - run.createdAt)})`);
  if (depth === 0 && run.workflowPath) line("file", run.workflowPath);
  if (report.origin) line("from", originText(report.origin));
  // A chain of runs (ctx.continueAsNew): each names its neighbours.
  if (report.continuedFrom) line("continues", `run ${report.continuedFrom}`);
  if (report.continuedAs) line("next", `continued as run ${report.continuedAs}`);
  if (report.tags) line("tags", Object.entries(report.tags).map(([k, v]) => `${k}=${v}`).join(" "));
  line("inputs", JSON.stringify(run.inputs));
  if (run.outputs !== null && run.outputs !== undefined) line("outputs", JSON.stringify(run.outputs));
  // The reason a run that did not fail gave to ctx.exit (skipped, blocked, cancelled) is no error.
  if (run.error?.code === "exit" && run.status !== "failed") line("reason", run.error.message);
  // A continued run's "error" only names the next run of its chain (shown above): no error.
  else if (run.error && report.status !== "continued") {
    line("error", st.red(`${failureSentence(run.error)}${run.error.hint ? ` (hint: ${run.error.hint})` : ""}`));
    for (const detail of failureDetail(run.error, st, s.globals.verbose, `${pad}          `)) s.result(detail);
  }
  const totals = reportTotals(report);
  if (totals.usage) line(depth === 0 ? "total" : "usage", formatUsage({ ...totals.usage, ...(anyFlag(report, "unpriced") ? { unpriced: true } : {}), ...(anyFlag(report, "estimated") ? { estimated: true } : {}) }));
  for (const w of report.waiting ?? []) line("waiting", `${w.name} (#${w.position}) since ${formatTime(w.since)}: ${w.reason}`);
  const tools = report.steps.filter((x) => x.kind === "tool");
  // Completed tools are only counted, unless an attempt of theirs failed first.
  const shown = all ? report.steps : report.steps.filter((x) => x.kind !== "tool" || x.status !== "completed" || x.attempts > 1);
  if (shown.length) s.result(`${pad}${st.dim("steps")}`);
  for (const step of shown) printStep(s, step, depth, all);
  if (!all && tools.length) {
    const done = tools.filter((t) => t.status === "completed").length;
    s.result(`${pad}  ${st.dim(`${done} tool step(s) completed (--all lists them)`)}`);
  }
}

function printStep(s: CliSession, step: StepReport, depth: number, all: boolean): void {
  const st = s.style;
  const pad = "  ".repeat(depth + 1);
  const took = step.startedAt && step.endedAt ? formatDuration(step.endedAt - step.startedAt) : "";
  // Time waiting for a free worker is not running time: said apart (the last attempt's).
  const last = step.attemptLog.at(-1);
  const waited = last?.queuedAt === undefined ? undefined : (last.status === "queued" ? Date.now() : last.startedAt) - last.queuedAt;
  const queued = waited === undefined || (waited < 1000 && last?.status !== "queued") ? "" : ` queued ${formatDuration(waited)}`;
  const attempts =
    (step.attempts > 1 ? ` attempts ${step.attempts}` : "") + (step.generation && step.generation > 1 ? ` generation ${step.generation}` : "");
  const exit = step.exitCode !== undefined && step.exitCode !== null ? ` exit ${step.exitCode}` : "";
  const label = (step.kind === "stage" ? step.name : `${step.kind} ${step.name}`) + (step.reusedFrom ? st.dim(` (reused from ${step.reusedFrom})`) : "");
  const until = step.status === "waiting" && step.wakeAt !== undefined ? ` until ${formatTime(step.wakeAt)}` : "";
  // Where it ran, for a stage a worker host ran (a local one ran beside the root: nothing to say).
  const on = step.ranOn?.remote ? ` on ${hostLabel(step.ranOn.host)}` : "";
  s.result(`${pad}${colorFor(st, step.status)(step.status.padEnd(9))} ${label} ${st.dim(`#${step.position}${attempts}${exit} ${took}${queued}${until}${on}`)}`);
  if (step.queueWait) s.result(`${pad}          ${st.yellow(step.queueWait)}${st.dim(` (start one: atomic worker --journal … --queues ${step.hostQueue})`)}`);
  // Every failed attempt with its error; the step's own error (its last) closes the list.
  for (const a of step.attemptLog) {
    if (a.status !== "failed" || !a.error || (a === last && step.error)) continue;
    s.result(`${pad}          ${st.dim(`attempt ${a.attempt} failed:`)} ${st.red(a.error.message)}`);
  }
  if (step.error) {
    s.result(`${pad}          ${st.red(failureSentence(step.error))}`);
    for (const detail of failureDetail(step.error, st, s.globals.verbose, `${pad}          `)) s.result(detail);
  }
  if (step.usage) s.result(`${pad}          ${st.dim(`usage    ${formatUsage(step.usage)}`)}`);
  for (const w of step.warnings ?? []) s.result(`${pad}          ${st.yellow("warning:")} ${w}`);
  if (step.kind === "stage" && step.outputPath) s.result(`${pad}          ${st.dim(`output: ${step.outputPath}`)}`);
  if (step.child) printReport(s, step.child, depth + 2, all);
}

/** "fork of 01m8rf at #3 (review)", "rerun of 01m8rf". */
export function originText(o: RunOrigin): string {
  return o.kind === "fork" ? `fork of ${o.runId} at #${o.at?.position ?? "?"} (${o.at?.name ?? "?"})` : `rerun of ${o.runId}`;
}

/** "260 in + 40 cached, 30 out, 2 turns, $0.000579" (cache writes, estimates and unpriced models said so). */
export function formatUsage(u: Omit<Usage, "model" | "turns"> & { turns?: number; estimated?: boolean | undefined; unpriced?: boolean | undefined; model?: string | undefined }): string {
  const n = (x: number) => x.toLocaleString("en-US");
  const cache = (u.cacheReadTokens ? ` + ${n(u.cacheReadTokens)} cached` : "") + (u.cacheWriteTokens ? ` + ${n(u.cacheWriteTokens)} cache writes` : "");
  const turns = u.turns !== undefined ? `, ${n(u.turns)} turn${u.turns === 1 ? "" : "s"}` : "";
  const est = u.estimated ? " (tokens estimated)" : "";
  const model = u.model ? ` [${u.model}]` : "";
  return `${n(u.inputTokens)} in${cache}, ${n(u.outputTokens)} out${turns}, ${formatCost(u)}${est}${model}`;
}

function anyFlag(report: RunReport, flag: "unpriced" | "estimated"): boolean {
  return report.steps.some((x) => x.usage?.[flag] === true || (x.child !== undefined && anyFlag(x.child, flag)));
}
