/**
 * The local service: what `atomic serve` runs besides the status page.
 *
 * The service is a list of duties (duties.ts): recovery and waking of runs
 * (recovery.ts), and whatever else registers there (schedules). A duty acts
 * on the journal only while this process is the active service of its
 * host, which a lease decides (service-lease.ts): of two services on one
 * host, one is active and the other waits on standby, saying which one is
 * active, and takes over when that one's lease ends (at once when it was a
 * process of this host that is gone, else when the lease expires). On a
 * journal several hosts share, each host has an active service; which runs
 * each recovers is host-scope.ts's.
 *
 * States:
 *   standby ──(service lease acquired)──▶ active ──(lease lost)──▶ standby
 *      │                                    │
 *      └──────────────(stop)──────▶ stopped ◀┘
 * Entering active starts every duty; leaving it stops them. A duty stopped
 * for standby stops acting (no new drive starts) but leaves what it started
 * alone: the runs' own leases fence those drives. A duty stopped for
 * shutdown (SIGTERM) ends its drives so that every run stays resumable.
 */

import type { Durability, Journal } from "../journal/journal.ts";
import type { ServiceView } from "../status/source.ts";
import { ServiceLease, type ServiceHolder } from "./service-lease.ts";

export interface ServiceOptions {
  journal: Journal;
  home: string;
  /** The journal's URL when it is not the home's file: handed to the drives the service starts (never in argv). */
  journalUrl: string | undefined;
  /** `--durability` of the service, and of the drives it starts (default: theirs, full). */
  durability?: Durability | undefined;
  /** `--no-recover`: no run is recovered or woken. */
  recover: boolean;
  /** `--no-schedules`: schedules are not run (read by the schedules duty). */
  schedules: boolean;
  /** How many runs the service drives at once (`--max-runs`). */
  maxRuns: number;
  /** `atomic resume` flags for every drive it starts (`--workers`, `--lease-ms` of `atomic serve`). */
  driveArgs?: readonly string[];
  /** One line for the service's log (stderr, or NDJSON with --json). */
  log: (event: ServiceLogEvent) => void;
}

/** What the service reports: a `type` and a sentence for people, with the fields a machine reads. */
export interface ServiceLogEvent {
  type: string;
  message: string;
  runId?: string;
  [key: string]: unknown;
}

/** Why a duty stops: the service shuts down (end every drive, resumably), or another service became active. */
export type DutyStopReason = "shutdown" | "standby";

export interface Duty {
  readonly name: string;
  /** This service became the active one: start acting. */
  start(): void;
  stop(reason: DutyStopReason): Promise<void>;
  /** How many drives this duty started for a run, if it drives runs. */
  drivesOf?(runId: string): number | undefined;
  /** What GET /api/service shows of this duty. */
  describe?(): unknown;
}

/** Makes a duty for a service; undefined when the options turn it off (`--no-recover`). */
export type DutyFactory = (service: ServiceOptions) => Duty | undefined;

export type ServiceState = "standby" | "active" | "stopped";

export class Service implements ServiceView {
  private state: ServiceState = "standby";
  private readonly duties: Duty[];
  private readonly lease: ServiceLease;
  private transition: Promise<void> = Promise.resolve();

  constructor(
    readonly options: ServiceOptions,
    factories: readonly DutyFactory[],
  ) {
    this.duties = factories.map((make) => make(options)).filter((d): d is Duty => d !== undefined);
    this.lease = new ServiceLease(options.journal, {
      onActive: () => this.setState("active"),
      onStandby: (holder) => this.setState("standby", holder),
    });
  }

  get current(): ServiceState {
    return this.state;
  }

  /** Who is the active service now (this one, another, or none known), for the page and `serve --json`. */
  activeHolder(): ServiceHolder | undefined {
    return this.lease.holder;
  }

  /** How many drives this service started for a run (the page's "recovered" tag). */
  drivesOf(runId: string): number | undefined {
    for (const d of this.duties) {
      const n = d.drivesOf?.(runId);
      if (n) return n;
    }
    return undefined;
  }

  /** GET /api/service. */
  describe(): unknown {
    const holder = this.lease.holder;
    return {
      state: this.state,
      pid: process.pid,
      active: holder ? { pid: holder.pid, host: holder.hostLabel, self: holder.self } : null,
      duties: this.dutyNames(),
      ...Object.fromEntries(this.duties.map((d) => [d.name, d.describe?.() ?? {}])),
    };
  }

  /** Names of the duties this service runs when active. */
  dutyNames(): string[] {
    return this.duties.map((d) => d.name);
  }

  start(): void {
    this.lease.start();
  }

  /** Stops every duty (shutdown: their drives end resumably), then gives the service lease up. */
  async stop(): Promise<void> {
    this.state = "stopped";
    await this.transition;
    this.lease.stopRenewing();
    // Also on standby: drives started while this service was active may still run, and end resumably here.
    await Promise.all(this.duties.map((d) => d.stop("shutdown")));
    await this.lease.release();
  }

  private setState(to: "active" | "standby", holder?: ServiceHolder): void {
    if (this.state === "stopped" || this.state === to) {
      if (to === "standby" && holder) this.options.log(standbyLine(holder));
      return;
    }
    const from = this.state;
    this.state = to;
    this.transition = this.transition.then(async () => {
      if (to === "active") {
        this.options.log({ type: "service_active", message: `this service is active: ${this.dutyNames().join(", ") || "no duties"}`, from });
        for (const d of this.duties) d.start();
      } else {
        await Promise.all(this.duties.map((d) => d.stop("standby")));
        this.options.log(holder ? standbyLine(holder) : { type: "service_standby", message: "this service lost its lease and waits on standby" });
      }
    });
  }
}

function standbyLine(holder: ServiceHolder): ServiceLogEvent {
  return {
    type: "service_standby",
    message: `on standby: the service of process ${holder.pid} on ${holder.hostLabel} is active on this journal; this one takes over when it stops`,
    activePid: holder.pid,
    activeHost: holder.host,
  };
}
