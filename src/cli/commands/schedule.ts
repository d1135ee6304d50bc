/**
 * `atomic schedule add|list|show|pause|unpause|trigger|delete`: the
 * schedules in the journal (journal/schedules.ts). The service (`atomic
 * serve`) starts their runs at their ticks (service/scheduler.ts); these
 * commands only change what it reads, so they work with or without one.
 *
 *   atomic schedule add NAME --cron "0 9 * * 1-5" [--tz Europe/Berlin] WORKFLOW [--input k=v ...]
 *                           [--inputs-json FILE] [--overlap skip|buffer-one|allow] [--catch-up skip|run-once]
 *
 * `add` checks everything before it writes: the name, the cron expression,
 * the time zone, the workflow (loaded, as `run` does) and its inputs. Its
 * runs run in the directory `add` ran in. `trigger` starts one run now (a
 * detached child of the binary drives it), whatever the overlap policy,
 * and leaves the tick cursor where it is.
 */

import { defineCommand } from "citty";
import { parseInputPairs } from "../../engine/inputs.ts";
import { loadWorkflowFile } from "../../engine/loader.ts";
import { resolveWorkflowArg } from "../../engine/workflow-names.ts";
import { CATCH_UP_POLICIES, OVERLAP_POLICIES, type ScheduleRecord } from "../../journal/schedules.ts";
import { UsageError } from "../../shared/errors.ts";
import { parseCron } from "../../shared/cron.ts";
import { awaitRecorded, spawnRunDriver } from "../../service/spawn-run.ts";
import { triggerRunId } from "../../service/scheduler.ts";
import { scheduleViews } from "../../status/schedules.ts";
import { repeatedFlag } from "../globals.ts";
import { session, type CliSession } from "../session.ts";
import { formatTime } from "../style.ts";
import { renderTable } from "../table.ts";
import { readInputsJson } from "./run.ts";

export const ACTIONS = ["add", "list", "show", "pause", "unpause", "trigger", "delete"] as const;
type Action = (typeof ACTIONS)[number];

/** Lower case (tick run ids are: shared/ids.ts), safe in a run id. */
const NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export default defineCommand({
  meta: { name: "schedule", description: "Add, list, show, pause, unpause, trigger or delete schedules" },
  args: {
    action: { type: "positional", description: `one of ${ACTIONS.join(", ")}`, required: true },
    name: { type: "positional", description: "the schedule's name", required: false },
    workflow: { type: "positional", description: "add: the workflow (a file, a name in .atomic/workflows/ or a builtin)", required: false },
    cron: { type: "string", description: 'add: when, as a cron expression ("0 9 * * 1-5"; a sixth field in front counts seconds)' },
    tz: { type: "string", description: "add: the time zone the expression is read in (default UTC)" },
    input: { type: "string", description: "add: an input of each run; repeat the flag for more" },
    inputsJson: { type: "string", description: "add: a JSON file with the inputs" },
    overlap: { type: "string", description: "add: a tick while the last run still runs: skip (default), buffer-one or allow" },
    catchUp: { type: "string", description: "add: ticks missed while no service ran: skip (default) or run-once" },
  },
  async run({ args }) {
    const s = session();
    const action = args.action as Action;
    if (!ACTIONS.includes(action)) {
      throw new UsageError("unknown_action", `atomic schedule has no action ${JSON.stringify(args.action)}`, { hint: `use one of ${ACTIONS.join(", ")}` });
    }
    if (action === "list") return list(s);
    const name = scheduleName(args.name, action);
    if (action === "add") return add(s, name, args);
    if (args.workflow !== undefined) throw new UsageError("extra_argument", `unexpected argument ${JSON.stringify(args.workflow)} for atomic schedule ${action}`, { hint: "see atomic schedule --help" });
    const journal = await s.journal();
    const schedule = await journal.schedules.get(name);
    if (!schedule) throw unknown(name);
    if (action === "show") return show(s, schedule);
    if (action === "pause" || action === "unpause") {
      await journal.schedules.setPaused(name, action === "pause", Date.now());
      if (s.globals.json) s.json({ name, paused: action === "pause" });
      else s.result(`schedule ${name} ${action === "pause" ? "paused: no tick starts a run until unpaused" : "unpaused"}`);
      return;
    }
    if (action === "delete") {
      await journal.schedules.delete(name);
      if (s.globals.json) s.json({ name, deleted: true });
      else s.result(`schedule ${name} deleted (its runs stay)`);
      return;
    }
    return trigger(s, schedule);
  },
});

function scheduleName(text: string | undefined, action: Action): string {
  if (text === undefined) throw new UsageError("missing_argument", `atomic schedule ${action} needs the schedule's name`, { hint: "list schedules with: atomic schedule list" });
  if (!NAME.test(text)) {
    throw new UsageError("bad_schedule_name", `schedule name ${JSON.stringify(text)} must be 1-64 lower-case letters, digits, "-" and "_", beginning with a letter or digit`, {
      hint: "for example nightly-report",
    });
  }
  return text;
}

function unknown(name: string): UsageError {
  return new UsageError("unknown_schedule", `there is no schedule named ${name}`, { hint: "list schedules with: atomic schedule list" });
}

function policy<T extends string>(flag: string, value: string | undefined, allowed: readonly T[]): T {
  if (value === undefined) return allowed[0]!;
  if ((allowed as readonly string[]).includes(value)) return value as T;
  throw new UsageError("bad_flag", `--${flag} must be one of ${allowed.join(", ")}, got ${JSON.stringify(value)}`, { hint: `see atomic schedule --help` });
}

async function add(
  s: CliSession,
  name: string,
  args: { workflow?: string | undefined; cron?: string | undefined; tz?: string | undefined; inputsJson?: string | undefined; overlap?: string | undefined; catchUp?: string | undefined },
): Promise<void> {
  if (args.cron === undefined) throw new UsageError("missing_flag", "atomic schedule add needs --cron", { hint: 'for example --cron "0 9 * * 1-5" (09:00 on weekdays)' });
  const timezone = args.tz ?? null;
  const cron = parseCron(args.cron, timezone);
  const overlap = policy("overlap", args.overlap, OVERLAP_POLICIES);
  const catchUp = policy("catch-up", args.catchUp, CATCH_UP_POLICIES);
  if (args.workflow === undefined) throw new UsageError("missing_argument", "atomic schedule add needs the workflow to run", { hint: `atomic schedule add ${name} --cron "${args.cron}" ./review.ts` });
  const loaded = await loadWorkflowFile(resolveWorkflowArg(args.workflow));
  const json = args.inputsJson ? readInputsJson(args.inputsJson) : undefined;
  const inputs = parseInputPairs(loaded.definition.inputs ?? {}, repeatedFlag(s.rawArgs, "input"), json, args.workflow);
  const journal = await s.journal();
  const now = Date.now();
  // As JSON, as a run records its inputs (a v.date() input is revived by the run that reads them).
  const stored = JSON.parse(JSON.stringify(inputs)) as Record<string, unknown>;
  const added = await journal.schedules.add({ name, cron: args.cron, timezone, workflow: loaded.path, inputs: stored, cwd: process.cwd(), overlap, catchUp, createdAt: now });
  if (!added) throw new UsageError("schedule_exists", `a schedule named ${name} exists already`, { hint: `choose another name, or replace it: atomic schedule delete ${name}, then add it again` });
  const next = cron.next(now);
  if (s.globals.json) {
    s.json({ name, added: true, nextTickAt: next ?? null });
    return;
  }
  s.result(`schedule ${name} added: ${loaded.definition.name}, next tick ${next === undefined ? "none" : formatTick(next, timezone)}`);
  s.info(s.style.dim("atomic serve starts its runs at their ticks (a service must be running)"));
}

async function list(s: CliSession): Promise<void> {
  const views = await scheduleViews(await s.journal(), Date.now());
  if (s.globals.json) {
    s.json({ schedules: views });
    return;
  }
  if (views.length === 0) {
    s.info("no schedules; add one with: atomic schedule add NAME --cron \"0 9 * * 1-5\" WORKFLOW");
    return;
  }
  const lines = renderTable(
    [
      { header: "NAME", cells: views.map((v) => v.name) },
      { header: "CRON", cells: views.map((v) => v.cron) },
      { header: "TZ", cells: views.map((v) => v.timezone ?? "UTC") },
      { header: "WORKFLOW", cells: views.map((v) => v.workflow), shrink: { min: 12 } },
      { header: "STATE", cells: views.map((v) => (v.paused ? "paused" : "active")) },
      { header: "NEXT", cells: views.map((v) => (v.nextTickAt === null ? "-" : formatTime(v.nextTickAt))), drop: 2 },
      { header: "LAST RUN", cells: views.map((v) => (v.lastRunId ? `${v.lastRunId} (${v.lastRunStatus ?? "starting"})` : "-")), drop: 1 },
    ],
    s.style,
  );
  for (const line of lines) s.result(line);
}

async function show(s: CliSession, schedule: ScheduleRecord): Promise<void> {
  const view = (await scheduleViews(await s.journal(), Date.now())).find((v) => v.name === schedule.name);
  if (!view) throw unknown(schedule.name);
  if (s.globals.json) {
    s.json(view);
    return;
  }
  const rows: [string, string][] = [
    ["name", view.name],
    ["cron", `${view.cron} (${view.timezone ?? "UTC"})`],
    ["workflow", view.workflow],
    ["inputs", JSON.stringify(view.inputs)],
    ["directory", view.cwd],
    ["overlap", view.overlap],
    ["catch-up", view.catchUp],
    ["state", view.paused ? "paused" : "active"],
    ["next tick", view.nextTickAt === null ? "-" : formatTick(view.nextTickAt, view.timezone)],
    ["last tick", view.lastTickAt === null ? "-" : formatTick(view.lastTickAt, view.timezone)],
    ["last run", view.lastRunId ? `${view.lastRunId} (${view.lastRunStatus ?? "starting"})` : "-"],
  ];
  if (view.bufferedTickAt !== null) rows.push(["buffered", formatTick(view.bufferedTickAt, view.timezone)]);
  for (const [k, v] of rows) s.result(`${k.padEnd(10)}${v}`);
}

async function trigger(s: CliSession, schedule: ScheduleRecord): Promise<void> {
  const journal = await s.journal();
  const runId = triggerRunId(schedule.name, Date.now());
  const spawned = spawnRunDriver({
    startedBy: "schedule",
    workflow: schedule.workflow,
    inputs: schedule.inputs,
    runId,
    cwd: schedule.cwd,
    home: s.globals.home,
    ...(s.globals.journal ? { journalUrl: s.globals.journal } : {}),
    // Driven by that child: whether a service here would drive it (its recovery may be off) is not known from here.
    leaveToService: false,
  });
  const recorded = await awaitRecorded(journal, runId, spawned);
  if ("failed" in recorded) throw new UsageError("start_failed", `run ${runId} did not start: ${recorded.failed}`, { hint: `its output is in ${spawned.logPath}` });
  await journal.schedules.recordRun(schedule.name, runId, Date.now());
  if (s.globals.json) s.json({ name: schedule.name, runId });
  else {
    s.result(`schedule ${schedule.name}: started run ${runId}`);
    s.info(s.style.dim(`follow it with: atomic show ${runId} · atomic logs ${runId} --follow`));
  }
}

/** A tick in the schedule's own time zone, with the zone named. */
function formatTick(ms: number, timezone: string | null): string {
  const tz = timezone ?? "UTC";
  const text = new Intl.DateTimeFormat("sv-SE", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }).format(ms);
  return `${text} ${tz}`;
}


