/**
 * The live views' eye on worker hosts (`atomic run` / `atomic resume`):
 * while the run has a queued stage that only worker hosts can run, the host
 * registry is read every REFRESH_MS (and at once when such a stage is
 * queued), and the view says why that stage still waits
 * (journal/fleet-view.ts). Nothing is read while no stage waits so, and
 * nothing is written: the reason is the reader's, not the journal's.
 */

import type { HostRecord } from "../../journal/fleet.ts";
import type { CliSession } from "../session.ts";

const REFRESH_MS = 2_000;

export interface HostWatch {
  /** A stage that waits for a worker host was queued: look now. */
  poke(): void;
  stop(): void;
}

export function watchHosts(s: CliSession, pending: () => boolean, apply: (hosts: HostRecord[], now: number) => void): HostWatch {
  let reading = false;
  let stopped = false;
  const look = async () => {
    if (reading || stopped || !pending()) return;
    reading = true;
    try {
      const fleet = (await s.journal()).fleet;
      if (!fleet) return void stop();
      const hosts = await fleet.hosts();
      if (!stopped) apply(hosts, Date.now());
    } catch {
      // the database is away: the next look tries again
    } finally {
      reading = false;
    }
  };
  const timer = setInterval(() => void look(), REFRESH_MS);
  timer.unref();
  const stop = () => {
    stopped = true;
    clearInterval(timer);
  };
  return { poke: () => void look(), stop };
}
