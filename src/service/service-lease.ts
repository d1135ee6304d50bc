/**
 * The service lease: which of the services of one host is the active one.
 *
 * Each host has its own (serviceLeaseKey: the host's identity, so on a
 * shared Postgres every host can have an active service; host-scope.ts
 * says which runs each one recovers). It is an ordinary journal lease
 * (Journal.acquireLease), on a key no run can have (run ids are lower-case
 * base32, never with a colon), so every backend that keeps run leases keeps
 * this one with the same guarantees: one holder at a time, taken over when
 * it expired or its holder (a process of this host) is gone, fenced by its
 * epoch. Leases have no foreign key to runs (a root's lease is taken before
 * its first event).
 *
 * The active service renews every RENEW_MS and counts as gone after
 * LEASE_MS without a renewal; a service on standby tries to take the lease
 * every POLL_MS, so a killed service on this host is replaced within about
 * a second. A service that cannot renew in time (a stalled process, a
 * journal it cannot reach) steps down to standby before another can take
 * over: its duties stop acting, and the runs' own leases fence every drive
 * it started.
 */

import type { Journal } from "../journal/journal.ts";
import type { Lease } from "../journal/runs.ts";
import { LeaseHeldError, LeaseLostError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { hostId, hostLabel, thisProcessHolder } from "../shared/process-info.ts";
import { leaseLive } from "../journal/run-status.ts";

/** The lease of the services of a host (this one by default). */
export function serviceLeaseKey(host = hostId()): RunId {
  return `service:${host}` as RunId;
}

export const LEASE_MS = 10_000;
export const RENEW_MS = 2_000;
const POLL_MS = 1_000;

export interface ServiceHolder {
  pid: number;
  host: string;
  hostLabel: string;
  /** This process. */
  self: boolean;
}

export class ServiceLease {
  private lease: Lease | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  /** The active service as last seen (this one when it holds the lease). */
  holder: ServiceHolder | undefined;
  /** When the last renewal succeeded (monotonic): past LEASE_MS - RENEW_MS without one, step down. */
  private renewedAt = 0;

  constructor(
    private readonly journal: Journal,
    private readonly on: { onActive: () => void; onStandby: (holder: ServiceHolder | undefined) => void },
  ) {}

  start(): void {
    void this.tick();
  }

  stopRenewing(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async release(): Promise<void> {
    const lease = this.lease;
    this.lease = undefined;
    if (lease) await this.journal.releaseLease(lease).catch(() => {});
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref?.();
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    if (this.lease) await this.renew();
    else await this.tryAcquire();
    this.schedule(this.lease ? RENEW_MS : POLL_MS);
  }

  private async renew(): Promise<void> {
    try {
      this.lease = await this.journal.renewLease(this.lease!);
      this.renewedAt = performance.now();
    } catch (err) {
      // A journal busy for a moment is retried; a lease another service took, or one about to expire, is given up.
      if (err instanceof LeaseLostError || performance.now() - this.renewedAt > LEASE_MS - RENEW_MS) {
        this.lease = undefined;
        this.holder = undefined;
        this.on.onStandby(undefined);
      }
    }
  }

  private async tryAcquire(): Promise<void> {
    const me = thisProcessHolder();
    try {
      this.lease = await this.journal.acquireLease(serviceLeaseKey(), me, { timeoutMs: LEASE_MS });
      this.renewedAt = performance.now();
      this.holder = { pid: me.pid, host: me.host, hostLabel: hostLabel(me.host), self: true };
      this.on.onActive();
    } catch (err) {
      if (!(err instanceof LeaseHeldError)) return; // the journal is busy or away: try again at the next poll
      const now = await this.journal.getLease(serviceLeaseKey()).catch(() => undefined);
      const seen = now ? { pid: now.pid, host: now.host, hostLabel: hostLabel(now.host), self: false } : undefined;
      const changed = !this.holder || !seen || this.holder.pid !== seen.pid || this.holder.host !== seen.host;
      this.holder = seen;
      if (changed && seen) this.on.onStandby(seen);
    }
  }
}

/** Whether an active service of this host holds its lease now (for `run --detach`), and which. */
export async function activeService(journal: Journal): Promise<Lease | undefined> {
  const lease = await journal.getLease(serviceLeaseKey());
  return leaseLive(lease) ? lease : undefined;
}
