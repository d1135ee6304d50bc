/**
 * Shipping a stage's files to the artifact store while the stage writes
 * them, from the host that runs it: `shipStageFiles(localDir, store, key)`.
 *
 * Every `intervalMs` (default 500 ms) a pass looks at the attempt's files
 * (SHIPPED_FILES: the logs, the transcript, raw events, per-call usage and
 * the output file; never a file the runner rewrites whole) and appends what
 * each grew by since the last pass, from the offset the store last
 * confirmed. The local file is the source of truth: the offset moves only
 * when an append returned, so a store that is unreachable for a while
 * (Postgres restarting, a partition) costs nothing but delay: the next pass
 * sends the same bytes again from the same offset (the store skips what it
 * has, store.ts), and no byte that is still in the local file is lost.
 * A store that lost bytes it had confirmed (Postgres commits these appends
 * asynchronously: a server crash can lose the last ones) refuses the next
 * append as a gap; the shipper then asks the store's size and sends again
 * from there.
 * Passes never overlap; a failed pass is tried again at the next interval.
 *
 * Files are opened as readers of artifact directories open them
 * (openArtifactFile: no link followed): a stage that swapped its stdout.log
 * for a link to a secret gets that file left out, not shipped. A file that
 * shrank (replaced by something else) is not shipped further.
 *
 * `flush()` ships everything written before it was called (it rejects when
 * the store fails); `flush(names)` only those files. `stop()` ends the timer, ships the rest and marks every
 * shipped file complete (readers following it stop); it keeps trying until
 * that worked or `timeoutMs` passed (default: no limit), then rejects with
 * the store's last error, the local files left as they are.
 */

import { closeSync, fstatSync, readSync } from "node:fs";
import { join } from "node:path";
import { EVENTS_LOG, OUTPUT_FILE, STDERR_LOG, STDOUT_LOG, TRANSCRIPT, TURNS_LOG, openArtifactFile } from "./stage-logs.ts";
import { ensureError } from "../shared/errors.ts";
import type { ArtifactKey, ArtifactStore } from "./store.ts";

/** The files of an attempt's directory that only grow (what the shipper sends). */
export const SHIPPED_FILES: readonly string[] = [STDOUT_LOG, STDERR_LOG, TRANSCRIPT, EVENTS_LOG, TURNS_LOG, OUTPUT_FILE];

export interface ShipOptions {
  /** How often a pass runs (ms; default 500). */
  intervalMs?: number;
  /** The file names to ship (default SHIPPED_FILES). */
  names?: readonly string[];
  /** Bytes per append (default 1 MiB). */
  appendBytes?: number;
  /** Told of a pass that failed (the shipper tries again by itself). */
  onError?: (err: Error) => void;
}

export interface ShipReport {
  /** Per file, the bytes the store holds now (its size). */
  files: Record<string, number>;
}

export interface StageShipper {
  /** `only`: these of its files (a mark's transcript, fleet/host.ts), not the others. */
  flush(only?: readonly string[]): Promise<ShipReport>;
  stop(opts?: { timeoutMs?: number }): Promise<ShipReport>;
  /** The last pass's error while the store is failing; undefined once a pass worked. */
  readonly lastError: Error | undefined;
}

export function shipStageFiles(localDir: string, store: ArtifactStore, key: ArtifactKey, opts: ShipOptions = {}): StageShipper {
  const intervalMs = Math.max(10, opts.intervalMs ?? 500);
  const names = opts.names ?? SHIPPED_FILES;
  const appendBytes = Math.max(1, opts.appendBytes ?? 1024 * 1024);
  /** Per file: the store's confirmed size; undefined until the store was asked once (a restarted host goes on from it). */
  let offsets: Map<string, number> | undefined;
  const stuck = new Set<string>();
  let lastError: Error | undefined;
  let running: Promise<void> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;

  const ship = async (only: readonly string[] = names): Promise<void> => {
    if (!offsets) offsets = new Map((await store.list(key)).map((f) => [f.name, f.size]));
    for (const name of only) {
      if (stuck.has(name)) continue;
      let fd: number | undefined;
      try {
        fd = openArtifactFile(join(localDir, name));
      } catch {
        stuck.add(name); // a link the stage planted: never shipped
        continue;
      }
      if (fd === undefined) continue;
      try {
        let offset = offsets.get(name) ?? 0;
        const size = fstatSync(fd).size;
        if (size < offset) {
          stuck.add(name); // replaced by a shorter file: its bytes no longer continue what the store has
          continue;
        }
        const buf = Buffer.alloc(Math.min(appendBytes, Math.max(1, size - offset)));
        while (offset < size) {
          const n = readSync(fd, buf, 0, Math.min(buf.length, size - offset), offset);
          if (n === 0) break;
          try {
            offset = Math.max(offset + n, await store.append(key, name, offset, buf.subarray(0, n)));
          } catch (err) {
            if ((err as { code?: unknown }).code !== "artifact_gap") throw err;
            // The store has less than it confirmed (a server crash lost its last commits): send again from its size.
            offset = (await store.list(key)).find((f) => f.name === name)?.size ?? 0;
          }
          offsets.set(name, offset);
        }
      } finally {
        closeSync(fd);
      }
    }
  };

  /** One pass at a time: a caller during a pass waits for it, then runs its own (its bytes may be newer). */
  const pass = async (only?: readonly string[]): Promise<void> => {
    while (running) await running.catch(() => {});
    const mine = ship(only?.filter((n) => names.includes(n))).then(
      () => {
        lastError = undefined;
      },
      (err) => {
        lastError = ensureError(err);
        throw lastError;
      },
    );
    running = mine;
    try {
      await mine;
    } finally {
      if (running === mine) running = undefined;
    }
  };

  const report = (): ShipReport => ({ files: Object.fromEntries(offsets ?? []) });

  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      pass()
        .catch((err) => opts.onError?.(ensureError(err)))
        .finally(schedule);
    }, intervalMs);
    timer.unref?.();
  };
  schedule();

  return {
    get lastError() {
      return lastError;
    },
    async flush(only) {
      await pass(only);
      return report();
    },
    async stop(stopOpts = {}) {
      stopped = true;
      if (timer) clearTimeout(timer);
      const deadline = Date.now() + (stopOpts.timeoutMs ?? Number.POSITIVE_INFINITY);
      for (;;) {
        try {
          await pass();
          for (const name of offsets!.keys()) await store.complete(key, name);
          return report();
        } catch (err) {
          if (Date.now() + intervalMs > deadline) throw ensureError(err);
          opts.onError?.(ensureError(err));
          await Bun.sleep(intervalMs);
        }
      }
    },
  };
}
