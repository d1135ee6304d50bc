/**
 * Admission: when a stage may start, beyond the run's own concurrency.
 *
 * - Agent sessions per run: at most `maxSessionsPerRun` agent stages of one
 *   run tree run at once (a counting semaphore in the root). A stage that
 *   has to wait queues; a session that ends passes to the longest waiter,
 *   which is woken alone: no poll, and a fan-out of thousands of agent
 *   stages does not wake every waiting stage at every end. The session's
 *   user slot (below) passes with it: the slot store is written when a
 *   session starts or ends for good, not twice per stage of a fan-out.
 * - Agent sessions per user: at most `maxSessionsPerUser` across every run
 *   of this user on the host. The slots live in a store shared by all
 *   atomic processes of the user (journal/admission-slots.ts: taking one is
 *   atomic; a slot whose process is gone, kill -9, is free again). The
 *   driver hands in a factory that opens it, on the first agent stage:
 *   the engine opens no database of its own.
 * - Host pressure: while the 1-minute load per CPU is above
 *   `maxLoadPerCpu` or free memory is below `minFreeMemoryMb`, stage starts
 *   (shell and agent alike) are paced: at most one every `paceMs`.
 *
 * A stage that has to wait says why (`onWait(reason)`): the stage step
 * records it (a `stage_waiting` event) so `show` and the live view can
 * show it. Waits end early when the run is stopped (the signal aborts).
 */

import { availableParallelism, freemem, loadavg } from "node:os";
import type { AdmissionSlots } from "../journal/admission-slots.ts";
import { CONFIG_DEFAULTS, type AdmissionConfig } from "../shared/config/schema.ts";

const POLL_MS = 200;

/** The config schema's defaults of the `admission` keys. */
export const ADMISSION_DEFAULTS = CONFIG_DEFAULTS.admission;

export interface AdmissionTicket {
  release(): void;
}

export interface Pressure {
  loadPerCpu: number;
  freeMemoryMb: number;
  /** Why starts are paced now, or undefined. */
  reason: string | undefined;
}

/** How long a reading of the host's load and free memory is reused (the kernel's load average itself moves every 5 s). */
const HOST_READING_MS = 250;
let lastReading: { at: number; loadPerCpu: number; freeMemoryMb: number } | undefined;

/** The load average and free memory, read at most every HOST_READING_MS (free memory is a /proc/meminfo read: a fan-out of 500 stages asked 500 times). */
function hostReading(): { loadPerCpu: number; freeMemoryMb: number } {
  const now = Date.now();
  if (!lastReading || now - lastReading.at >= HOST_READING_MS) {
    lastReading = { at: now, loadPerCpu: loadavg()[0]! / Math.max(1, availableParallelism()), freeMemoryMb: freemem() / (1024 * 1024) };
  }
  return lastReading;
}

export function hostPressure(cfg: AdmissionConfig = {}): Pressure {
  const { loadPerCpu, freeMemoryMb } = hostReading();
  const maxLoad = cfg.maxLoadPerCpu ?? ADMISSION_DEFAULTS.maxLoadPerCpu;
  const minMem = cfg.minFreeMemoryMb ?? ADMISSION_DEFAULTS.minFreeMemoryMb;
  let reason: string | undefined;
  if (loadPerCpu > maxLoad) reason = `host load per CPU is ${loadPerCpu.toFixed(2)} (above ${maxLoad})`;
  else if (freeMemoryMb < minMem) reason = `free memory is ${Math.round(freeMemoryMb)} MB (below ${minMem} MB)`;
  return { loadPerCpu, freeMemoryMb, reason };
}

export class Admission {
  private runSessions = 0;
  private lastPacedStart = 0;
  private slots: AdmissionSlots | undefined;
  private readonly waiters = new Set<() => void>();
  /** Stages waiting for a session of this run, first come first served (grant: the session is theirs). */
  private readonly runQueue: { grant(slot: number | undefined): void }[] = [];

  /** `openSlots` opens the host-wide slot store (called once, when the first agent stage asks). */
  constructor(
    private readonly cfg: AdmissionConfig,
    private readonly openSlots: () => AdmissionSlots,
  ) {}

  get maxPerRun(): number {
    return Math.max(1, this.cfg.maxSessionsPerRun ?? ADMISSION_DEFAULTS.maxSessionsPerRun);
  }

  get maxPerUser(): number {
    return Math.max(1, this.cfg.maxSessionsPerUser ?? ADMISSION_DEFAULTS.maxSessionsPerUser);
  }

  /**
   * Waits until a stage may start; resolves to a ticket to release when it
   * ends. Agent stages take a run slot and a user slot; every stage is paced
   * under host pressure. Rejects with `signal.reason` when stopped.
   */
  async admit(agent: boolean, signal: AbortSignal, onWait: (reason: string) => void): Promise<AdmissionTicket> {
    let lastReason: string | undefined;
    const wait = async (reason: string) => {
      if (reason !== lastReason) onWait(reason);
      lastReason = reason;
      await this.sleep(POLL_MS, signal);
    };
    // Host pressure: pace starts.
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const p = hostPressure(this.cfg);
      const pace = this.cfg.paceMs ?? ADMISSION_DEFAULTS.paceMs;
      if (!p.reason || Date.now() - this.lastPacedStart >= pace) {
        if (p.reason) this.lastPacedStart = Date.now();
        break;
      }
      await wait(`paced: ${p.reason}`);
    }
    if (!agent) return { release() {} };
    // Sessions of this run; one handed over by a stage that ended comes with its user slot.
    if (signal.aborted) throw signal.reason;
    let slot: number | undefined;
    if (this.runSessions < this.maxPerRun && this.runQueue.length === 0) this.runSessions++;
    else {
      const reason = `waiting for an agent session: ${this.runSessions} of ${this.maxPerRun} allowed for this run are busy`;
      if (reason !== lastReason) onWait(reason);
      lastReason = reason;
      slot = await this.queueForRunSession(signal);
    }
    // Sessions of this user on the host.
    try {
      this.slots ??= this.openSlots();
      while (slot === undefined && (slot = await this.slots.take(this.maxPerUser)) === undefined) {
        if (signal.aborted) throw signal.reason;
        await wait(`waiting for an agent session: all ${this.maxPerUser} allowed for this user on this host are busy`);
      }
    } catch (err) {
      this.releaseRun(slot);
      throw err;
    }
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.releaseRun(slot);
      },
    };
  }

  /**
   * Resolves once a session of this run is handed to this stage (runSessions already counts it), with the user
   * slot of the stage that ended (undefined: it held none); rejects when stopped.
   */
  private queueForRunSession(signal: AbortSignal): Promise<number | undefined> {
    return new Promise<number | undefined>((resolve, reject) => {
      const entry = {
        grant: (slot: number | undefined) => {
          signal.removeEventListener("abort", onAbort);
          resolve(slot);
        },
      };
      const onAbort = () => {
        const i = this.runQueue.indexOf(entry);
        if (i >= 0) this.runQueue.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.runQueue.push(entry);
    });
  }

  /**
   * A session of this run ends: it passes to the longest waiter, if any, with its user slot (the count of the
   * user's sessions does not change, so the slot store is not written twice, released then taken; the waiter
   * would have taken the slot first anyway, before a stage of the run polling for one); else the slot is given
   * back. Waits on other limits look again.
   */
  private releaseRun(slot: number | undefined): void {
    const next = this.runQueue.shift();
    if (next) next.grant(slot);
    else {
      this.runSessions--;
      if (slot !== undefined) void this.slots?.release(slot);
    }
    for (const w of [...this.waiters]) w();
  }

  private sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.waiters.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  close(): void {
    this.slots?.close();
    this.slots = undefined;
  }
}
