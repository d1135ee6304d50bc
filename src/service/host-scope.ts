/**
 * Which runs a service recovers when several hosts share one journal
 * (docs/design/fleet-recovery.md).
 *
 * A run belongs to the host of its last drive (the host its run_started or
 * latest run_resumed recorded: engine/run-place.ts). The active service of
 * a host (service-lease.ts: one per host) recovers that host's runs, and a
 * run recorded before hosts were is everybody's own. A run of another host
 * is that host's while its service lease is live: its own service, which
 * has its directory and files, recovers it. When that host has no live
 * service (it crashed whole, was switched off, or never ran one), one
 * service of the others adopts it: it holds the host's adoption lease
 * (adoptionLeaseKey), which only one process can hold, and recovers the
 * host's runs that it can run here (pinned code needs nothing of the host;
 * a directory that exists only there keeps the run crashed, with that
 * reason, for the host's own service). Each drive then takes the run's own
 * lease, so no run is driven twice whatever the services think; the
 * adoption keeps a second service from even trying. A run an adopter drove
 * records the adopter's host: it is the adopter's from then on.
 *
 * An adoption ends when the host's own service is live again (its runs go
 * back to it), when this service steps down, or when a renewal fails. Its
 * lease is judged like every lease on the journal: on Postgres by the
 * database's clock.
 *
 * States of one foreign host, as this service sees it, per scan:
 *   theirs (their service, or another adopter, is live)
 *     ──(no live service, adoption lease acquired)──▶ adopted
 *   adopted ──(their service live again, renewal lost, stop)──▶ theirs
 */

import type { Journal } from "../journal/journal.ts";
import { leaseLive } from "../journal/run-status.ts";
import type { Lease } from "../journal/runs.ts";
import { LeaseHeldError, LeaseLostError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { hostId, thisProcessHolder } from "../shared/process-info.ts";
import { LEASE_MS, RENEW_MS, serviceLeaseKey } from "./service-lease.ts";

/** The lease of the service that recovers the runs of a host whose own service is gone. */
export function adoptionLeaseKey(host: string): RunId {
  return `service-adopt:${host}` as RunId;
}

/** Whose a run is: this service's host's, an adopted host's (this service recovers it), or another service's. */
export type Scope = "own" | "adopted" | "theirs";

export class HostScope {
  /** Adopted hosts: the adoption lease and when it was last taken or renewed (monotonic). */
  private readonly adopted = new Map<string, { lease: Lease; at: number }>();
  /** Decisions of the scan under way, so each host's leases are read once per scan. */
  private decided = new Map<string, Scope>();

  constructor(
    private readonly journal: Journal,
    private readonly me = hostId(),
  ) {}

  /** A new scan: hosts are judged again. */
  beginScan(): void {
    this.decided = new Map();
  }

  /** The hosts this service recovers the runs of besides its own (GET /api/service). */
  adoptedHosts(): string[] {
    return [...this.adopted.keys()];
  }

  async scopeOf(host: string | undefined): Promise<Scope> {
    if (host === undefined || host === this.me) return "own";
    let scope = this.decided.get(host);
    if (!scope) {
      scope = await this.judge(host);
      this.decided.set(host, scope);
    }
    return scope;
  }

  /** Gives every adoption up (this service stops or steps down): another service may adopt those hosts at once. */
  async releaseAll(): Promise<void> {
    const leases = [...this.adopted.values()].map((a) => a.lease);
    this.adopted.clear();
    this.decided = new Map();
    await Promise.all(leases.map((l) => this.journal.releaseLease(l).catch(() => {})));
  }

  private async judge(host: string): Promise<Scope> {
    const held = this.adopted.get(host);
    const theirService = await this.journal.getLease(serviceLeaseKey(host));
    if (leaseLive(theirService)) {
      if (held) {
        this.adopted.delete(host);
        await this.journal.releaseLease(held.lease).catch(() => {});
      }
      return "theirs";
    }
    if (held) return (await this.renew(host, held)) ? "adopted" : "theirs";
    try {
      const lease = await this.journal.acquireLease(adoptionLeaseKey(host), thisProcessHolder("service"), { timeoutMs: LEASE_MS });
      this.adopted.set(host, { lease, at: performance.now() });
      return "adopted";
    } catch (err) {
      if (err instanceof LeaseHeldError) return "theirs";
      throw err;
    }
  }

  private async renew(host: string, held: { lease: Lease; at: number }): Promise<boolean> {
    if (performance.now() - held.at < RENEW_MS) return true;
    try {
      this.adopted.set(host, { lease: await this.journal.renewLease(held.lease), at: performance.now() });
      return true;
    } catch (err) {
      if (!(err instanceof LeaseLostError)) throw err;
      this.adopted.delete(host);
      return false;
    }
  }
}
