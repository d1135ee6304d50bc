/**
 * `atomic workers [--all]`: the worker hosts of a shared Postgres journal
 * (`atomic worker` on other machines) and what their workers run now.
 *
 * A host is listed with its shown state (journal/fleet-view.ts: running,
 * draining, stopped, or lost when it has been silent for longer than
 * HOST_LOST_AFTER_MS without stopping), its queues, busy and total slots,
 * the age of its last heartbeat (by the database clock), its version and,
 * when it refuses stages of another atomic version, its sentence saying so.
 * The busy workers are the work queue's leased items whose worker id is a
 * host's (`<worker>@<host id>`): run, stage, attempt. BUSY counts them, not
 * the host's own count in its row: that one is a heartbeat old, and a lost
 * host's items stay leased until their leases run out.
 *
 * Hosts stopped or lost over a day ago are left out unless `--all`: a fleet
 * that is scaled up and down would otherwise list every machine it ever had.
 * `--json`: one object per host per line, its busy workers inside.
 */

import { defineCommand } from "citty";
import type { HostRecord, HostWork } from "../../journal/fleet.ts";
import { ageText, shownHostState, type ShownHostState } from "../../journal/fleet-view.ts";
import { UsageError } from "../../shared/errors.ts";
import { hostLabel } from "../../shared/process-info.ts";
import { session } from "../session.ts";
import type { Style } from "../style.ts";
import { renderTable } from "../table.ts";

/** Stopped or lost hosts silent for longer than this are listed only with --all. */
const HIDE_AFTER_MS = 86_400_000;

export default defineCommand({
  meta: { name: "workers", description: "List worker hosts (atomic worker) and what their workers run" },
  args: {
    all: { type: "boolean", description: "also hosts stopped or lost over a day ago" },
  },
  async run({ args }) {
    const s = session();
    const needsShared = () =>
      new UsageError("needs_shared_journal", "worker hosts need a shared Postgres journal, and this is the embedded SQLite one", {
        hint: "name the journal the hosts use: atomic workers --journal postgres://user@host:5432/db (or set ATOMIC_JOURNAL)",
      });
    // Refused before opening anything: the embedded journal would be created just to say it has no hosts.
    if (!s.globals.journal) throw needsShared();
    const fleet = (await s.journal()).fleet;
    if (!fleet) throw needsShared();
    const [records, work] = await Promise.all([fleet.hosts(), fleet.hostWork()]);
    const all = records.map((h) => ({ host: h, state: shownHostState(h), workers: work.filter((w) => w.hostId === h.hostId) }));
    const shown = args.all ? all : all.filter((x) => !((x.state === "stopped" || x.state === "lost") && x.host.silentMs > HIDE_AFTER_MS && x.workers.length === 0));
    const hidden = all.length - shown.length;
    if (s.globals.json) {
      for (const x of shown) s.json(hostJson(x.host, x.state, x.workers));
      return;
    }
    if (shown.length === 0) {
      if (hidden > 0) s.info(`no worker host was seen in the last day; ${hidden} older one(s): atomic workers --all`);
      else s.info("no worker hosts yet; start one on a machine with: atomic worker --journal <this journal> [--queues default,gpu]");
      return;
    }
    printHosts(s, shown, hidden);
  },
});

function hostJson(h: HostRecord, state: ShownHostState, workers: HostWork[]) {
  const { state: storedState, silentMs, ...rest } = h;
  return {
    ...rest,
    state,
    storedState,
    busy: workers.length,
    heartbeatAgeMs: silentMs,
    workers: workers.map((w) => ({ workerId: w.workerId, runId: w.runId, rootId: w.rootId, stageKey: w.stageKey, stageName: w.stageName, attempt: w.attempt, generation: w.generation, queue: w.queue, workId: w.workId, leaseExpiresAt: w.leaseExpiresAt })),
  };
}

type Shown = { host: HostRecord; state: ShownHostState; workers: HostWork[] };

function printHosts(s: ReturnType<typeof session>, shown: Shown[], hidden: number): void {
  const st = s.style;
  // A default host id is "name/machine/boot/pidns": its name reads better, unless two hosts share one.
  const labels = shown.map((x) => hostLabel(x.host.hostId));
  const name = (id: string) => {
    const label = hostLabel(id);
    return labels.filter((l) => l === label).length > 1 ? id : label;
  };
  const hosts = renderTable(
    [
      { header: "HOST", cells: shown.map((x) => name(x.host.hostId)), shrink: { min: 12 } },
      { header: "STATE", cells: shown.map((x) => x.state), color: (i, t) => stateColor(st, shown[i]!.state)(t) },
      { header: "QUEUES", cells: shown.map((x) => x.host.queues.join(",")), shrink: { min: 10 } },
      { header: "BUSY", cells: shown.map((x) => `${x.workers.length}/${x.host.slots}`) },
      { header: "HEARTBEAT", cells: shown.map((x) => `${ageText(x.host.silentMs)} ago`) },
      { header: "VERSION", cells: shown.map((x) => x.host.version), drop: 2 },
      { header: "PID", cells: shown.map((x) => String(x.host.pid)), drop: 3 },
      { header: "WORKDIR", cells: shown.map((x) => x.host.workdir), drop: 4, shrink: { min: 12 } },
    ],
    st,
  );
  for (const line of hosts) s.result(line);
  for (const x of shown) if (x.host.refused) s.result(`${st.yellow("refusing:")} ${name(x.host.hostId)}: ${x.host.refused}`);
  const busy = shown.flatMap((x) => x.workers.map((w) => ({ w, host: name(x.host.hostId) })));
  if (busy.length > 0) {
    s.result("");
    const lines = renderTable(
      [
        { header: "WORKER", cells: busy.map(({ w }) => w.workerId.slice(0, w.workerId.indexOf("@"))) },
        { header: "HOST", cells: busy.map(({ host }) => host), shrink: { min: 12 } },
        { header: "RUN", cells: busy.map(({ w }) => w.runId) },
        { header: "STAGE", cells: busy.map(({ w }) => `${w.stageName} (#${w.stageKey})${w.attempt > 1 ? ` attempt ${w.attempt}` : ""}${w.generation > 1 ? ` generation ${w.generation}` : ""}`), shrink: { min: 12 } },
        { header: "QUEUE", cells: busy.map(({ w }) => w.queue), drop: 2 },
      ],
      st,
    );
    for (const line of lines) s.result(line);
  }
  if (hidden > 0) s.info(st.dim(`${hidden} host(s) stopped or lost over a day ago not shown (--all lists them)`));
}

function stateColor(st: Style, state: ShownHostState): (t: string) => string {
  return state === "running" ? st.green : state === "lost" ? st.red : state === "draining" ? st.yellow : st.dim;
}
