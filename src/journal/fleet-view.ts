/**
 * How worker hosts look to people (`atomic workers`, `atomic show`, the live
 * tree of `atomic run`, the status page), read from the host registry
 * (fleet.ts `hosts()`), never written anywhere: each reader asks when it
 * shows something, so the journal's hot path carries none of it.
 *
 * - A host's shown state is its row's (running, draining, stopped), or
 *   `lost` when a host that is not stopped has been silent (no heartbeat,
 *   by the database clock) for longer than ATOMIC_HOST_LOST_MS (10 s): it crashed,
 *   was cut off, or its machine is gone.
 * - A queued stage that only worker hosts can run (its queue is not one
 *   the root's own pool serves) waits for a host "for a reason" when no
 *   live running host serves its queue: none ever did ("no worker host has
 *   served it"), the ones that did are draining, or they went silent (the
 *   time since the last heartbeat of any of them: "none seen for 30 s").
 *   With a live running host serving the queue the stage just waits for a
 *   free slot, which is no reason worth a line.
 */

import type { HostRecord, HostState } from "./fleet.ts";
import { readEnv } from "../shared/config/environment.ts";


export type ShownHostState = HostState | "lost";

/** A host silent for longer than this (and not stopped) is shown lost: ATOMIC_HOST_LOST_MS, or its default (HOST_LOST_AFTER_MS). */
export function hostLostAfterMs(): number {
  return readEnv("ATOMIC_HOST_LOST_MS");
}

export function shownHostState(host: Pick<HostRecord, "state" | "silentMs">, lostAfterMs = hostLostAfterMs()): ShownHostState {
  return host.state !== "stopped" && host.silentMs > lostAfterMs ? "lost" : host.state;
}

/** The host of a worker host's worker (`<worker>@<host id>`); undefined for a root's own worker. */
export function hostOfWorker(workerId: string | null | undefined): string | undefined {
  const at = workerId?.indexOf("@") ?? -1;
  return at < 0 ? undefined : workerId!.slice(at + 1);
}

/** Why a stage waits for a worker host on `queue`; undefined when a live running host serves it. */
export type QueueWait =
  | { queue: string; kind: "never" }
  | { queue: string; kind: "draining"; hosts: string[] }
  /** lastSeenAt: this process's clock (now minus the database's silence), so a shown age can tick on. */
  | { queue: string; kind: "silent"; lastSeenAt: number };

export function queueWait(hosts: readonly HostRecord[], queue: string, now = Date.now(), lostAfterMs = hostLostAfterMs()): QueueWait | undefined {
  const serving = hosts.filter((h) => h.queues.includes(queue));
  const states = serving.map((h) => shownHostState(h, lostAfterMs));
  if (states.includes("running")) return undefined;
  const draining = serving.filter((_, i) => states[i] === "draining").map((h) => h.hostId);
  if (draining.length > 0) return { queue, kind: "draining", hosts: draining };
  if (serving.length === 0) return { queue, kind: "never" };
  return { queue, kind: "silent", lastSeenAt: now - Math.min(...serving.map((h) => h.silentMs)) };
}

/** "waiting for a worker on queue gpu; none seen for 30 s". */
export function queueWaitText(w: QueueWait, now = Date.now()): string {
  const head = `waiting for a worker on queue ${w.queue}`;
  switch (w.kind) {
    case "never":
      return `${head}; no worker host has served it`;
    case "draining":
      return `${head}; ${w.hosts.length === 1 ? `its host ${w.hosts[0]} is` : `its hosts ${w.hosts.join(", ")} are`} draining`;
    case "silent":
      return `${head}; none seen for ${ageText(now - w.lastSeenAt)}`;
  }
}

/** A whole age for people: "30 s", "12 min", "5 h", "3 d". */
export function ageText(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m} min`;
  const h = Math.floor(m / 60);
  return h < 48 ? `${h} h` : `${Math.floor(h / 24)} d`;
}
