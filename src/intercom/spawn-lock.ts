/**
 * The spawn lock: whoever needs the broker and finds none takes this lock
 * before starting one, so processes racing to start it end up with one.
 *
 * The lock is a file created exclusively (O_EXCL) holding its owner's pid,
 * host, time and a random token. It is stale when its owner is a process of
 * this host that no longer exists, or when it is older than STALE_MS (a
 * spawner waits for its broker at most timeouts.brokerStartMs, at most 10
 * minutes). Breaking a stale
 * lock renames it aside first and deletes it only if it still holds what
 * was judged stale, so two breakers cannot delete a fresh lock taken in
 * between; a lock taken by mistake that way is put back.
 *
 * Release deletes the file only while it still holds the owner's token.
 */

import { linkSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { hostId, isPidAlive } from "../shared/process-info.ts";

export const STALE_MS = 11 * 60_000;

export interface SpawnLock {
  file: string;
  token: string;
}

interface LockInfo {
  pid: number;
  host: string;
  at: number;
  token: string;
}

/** Takes the lock, or returns undefined when another process holds a fresh one. */
export function tryLock(file: string): SpawnLock | undefined {
  const token = crypto.randomUUID();
  const info: LockInfo = { pid: process.pid, host: hostId(), at: Date.now(), token };
  try {
    writeFileSync(file, JSON.stringify(info), { flag: "wx", mode: 0o600 });
    return { file, token };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  if (breakIfStale(file)) return tryLock(file);
  return undefined;
}

export function unlock(lock: SpawnLock): void {
  try {
    if ((parse(readFileSync(lock.file, "utf8"))?.token ?? "") === lock.token) unlinkSync(lock.file);
  } catch {
    // already gone
  }
}

/** True when the lock file was stale and is gone now. */
export function breakIfStale(file: string, now = Date.now()): boolean {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return true; // released meanwhile
  }
  if (!isStale(parse(text), now, file)) return false;
  const aside = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  try {
    renameSync(file, aside);
  } catch {
    return true; // someone else moved it first
  }
  let moved = "";
  try {
    moved = readFileSync(aside, "utf8");
  } catch {
    // vanished: nothing to put back
  }
  if (moved !== "" && moved !== text) {
    // Between our read and the rename a fresh lock replaced the stale one: give it back.
    try {
      linkSync(aside, file);
    } catch {
      // a third process already holds a newer lock; the one we took is void either way
    }
  }
  try {
    unlinkSync(aside);
  } catch {
    // gone
  }
  return moved === text || moved === "";
}

/** A lock that cannot be read is being written right now, unless it is old: then its writer died mid-way. */
const UNREADABLE_GRACE_MS = 2_000;

function isStale(info: LockInfo | undefined, now: number, file: string): boolean {
  if (!info) {
    try {
      return now - statSync(file).mtimeMs > UNREADABLE_GRACE_MS;
    } catch {
      return true;
    }
  }
  if (now - info.at > STALE_MS) return true;
  return info.host === hostId() && !isPidAlive(info.pid);
}

function parse(text: string): LockInfo | undefined {
  try {
    const v = JSON.parse(text) as Partial<LockInfo>;
    if (typeof v.pid === "number" && typeof v.at === "number" && typeof v.token === "string" && typeof v.host === "string") return v as LockInfo;
  } catch {
    // not a lock we wrote
  }
  return undefined;
}
