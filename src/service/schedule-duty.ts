/**
 * The schedules duty of the service (duties.ts; off with `atomic serve
 * --no-schedules`): the scheduler (scheduler.ts) on the wall clock, over
 * the journal's schedules, starting each tick's run as a detached child
 * (spawn-run.ts: left to the recovery duty when it runs, else driving the
 * run itself). It acts only while this service is the active one on the
 * journal (service.ts); the tick cursor's compare-and-set keeps two
 * services, or a service and its successor, from starting a tick twice
 * even across a takeover.
 */

import { shownStatus } from "../journal/run-status.ts";
import type { RunId } from "../shared/ids.ts";
import { Scheduler, type SchedulerEvent } from "./scheduler.ts";
import type { Duty, ServiceLogEvent, ServiceOptions } from "./service.ts";
import { awaitRecorded, leaveToService, spawnRunDriver } from "./spawn-run.ts";

export class ScheduleDuty implements Duty {
  readonly name = "schedules";
  private readonly scheduler: Scheduler;
  private started = 0;

  constructor(service: ServiceOptions) {
    const { journal } = service;
    const log = (e: SchedulerEvent) => service.log(logEvent(e));
    this.scheduler = new Scheduler({
      store: journal.schedules,
      clock: { now: () => Date.now() },
      onEvent: (e) => {
        if (e.type === "started") this.started++;
        log(e);
      },
      async start(s, runId) {
        const spawned = spawnRunDriver({
          startedBy: "schedule",
          workflow: s.workflow,
          inputs: s.inputs,
          runId,
          cwd: s.cwd,
          home: service.home,
          ...(service.journalUrl ? { journalUrl: service.journalUrl } : {}),
          leaveToService: await leaveToService(journal, service.recover, s.workflow).catch(() => false),
        });
        // Not awaited: a pass does not wait for a run to start; a start that failed is said in the service's log.
        void awaitRecorded(journal, runId, spawned).then((r) => {
          if ("failed" in r) log({ type: "error", schedule: s.name, message: `run ${runId} did not start: ${r.failed}` });
        });
      },
      async runState(runId) {
        const run = await journal.getRun(runId as RunId);
        if (!run) return "absent";
        const shown = shownStatus(run, await journal.getLease(run.rootId));
        return shown === "running" || shown === "paused" || shown === "awaiting_input" ? "live" : "ended";
      },
    });
  }

  start(): void {
    this.scheduler.start();
  }

  async stop(): Promise<void> {
    // The runs it started are not its own to stop: they are driven (and stopped) like any other.
    await this.scheduler.stop();
  }

  describe(): unknown {
    return { started: this.started, passes: this.scheduler.passes };
  }
}

/** One line per schedule decision in the service's log. */
function logEvent(e: SchedulerEvent): ServiceLogEvent {
  const at = "tickAt" in e ? ` tick ${new Date(e.tickAt).toISOString()}` : "";
  if (e.type === "started") {
    const how = e.buffered ? " (buffered)" : e.repaired ? " (again: its start was not recorded)" : "";
    return { ...e, type: "schedule_started", message: `schedule ${e.schedule}:${at} started run ${e.runId}${how}` };
  }
  if (e.type === "skipped") {
    return { ...e, type: "schedule_skipped", message: `schedule ${e.schedule}:${at} skipped (${e.reason === "overlap" ? "its last run still runs" : "missed while no service ran"})` };
  }
  if (e.type === "buffered") return { ...e, type: "schedule_buffered", message: `schedule ${e.schedule}:${at} kept until its last run ends` };
  // service_error: the service's log prints it as a warning.
  return { ...e, type: "service_error", message: `${e.schedule === "*" ? "schedules" : `schedule ${e.schedule}`}: ${e.message}` };
}
