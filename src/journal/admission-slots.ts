/**
 * Host-wide agent session slots: the store behind admission's "at most
 * `maxSessionsPerUser` agent sessions of this user on this host"
 * (engine/admission.ts), shared by every atomic process of the user.
 *
 * Contract (test/conformance/admission-slots.test.ts runs it against each
 * implementation):
 * - `take(max)` is atomic across processes: it frees the slots of holders
 *   that are gone (a process that no longer exists, or whose pid was
 *   reused: the start time differs), then takes one for this process if
 *   fewer than `max` are held, returning its id; undefined when all are
 *   busy. A slot of a kill -9'd process is therefore free at the next take.
 * - `release(id)` gives one back (a second release, or one of a slot
 *   already freed, does nothing). It never throws: a slot left behind is
 *   freed when its process is gone.
 * - `list()` is the slots held by live processes, read-only (for doctor).
 *
 * The engine holds none of this itself: the driver (or the CLI) opens the
 * store (openAdmissionSlots, ./open.ts: the one implementation is
 * ./sqlite/admission-slots.ts) and hands admission a factory, so the engine
 * opens no database.
 */

export interface HeldSlot {
  id: number;
  pid: number;
  /** The holder's process start time (0: unknown), which tells a reused pid apart. */
  start: number;
  /** When it was taken (ms since the epoch). */
  at: number;
}

export interface AdmissionSlots {
  take(max: number): Promise<number | undefined>;
  release(id: number): Promise<void>;
  list(): Promise<HeldSlot[]>;
  close(): void;
}
