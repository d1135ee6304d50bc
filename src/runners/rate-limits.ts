/**
 * Rate limits shared by every stage of this host: a 429 (or a Retry-After)
 * one stage sees makes every stage calling the same provider and model wait
 * for it, instead of each one discovering it alone. The stages run in
 * different worker processes, so the state is a small file per provider
 * and model under the user's atomic home (`$ATOMIC_HOME/rate-limits/`,
 * private like the home; a key is a digest of base URL and model).
 *
 * A key's file says `{ until, calmUntil }` (epoch ms):
 * - before `until` (the provider's Retry-After, else 0.5 s) nobody calls;
 * - until `calmUntil` (a few windows later, pushed on by every new 429)
 *   calls go one at a time: a caller holds the key's lock file (created
 *   with O_EXCL; a lock older than LOCK_STALE_MS is a dead holder's) from
 *   its request until the provider's answer starts (its status), so after a
 *   back-off the waiting stages do not all fire at once and meet the limit
 *   again; the first 429 of a window stops the others (they read the new
 *   `until` before they call);
 * - after `calmUntil`, calls go freely again.
 * Writes are whole files renamed into place; an `until` is never moved
 * earlier. An unreadable or missing file means no back-off: the store only
 * ever makes callers wait, it never fails a call.
 *
 * The openai runner waits before every call (chat-client.ts). The CLI
 * agents make their own calls: a stage waits before it starts or resumes
 * the agent, and a rate-limited CLI stage records its back-off (keyed by
 * the CLI's name, as atomic does not see the CLI's base URL).
 */

import { closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { readEnv, type EnvSource } from "../shared/config/environment.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";

/** How long the calm (one call at a time) lasts after a back-off ends, in multiples of the back-off. */
const CALM_FACTOR = 3;
/** A 429 without Retry-After: wait this long (the openai runner's own first backoff). */
const NO_RETRY_AFTER_MS = 500;
/** The shortest rate window assumed for the calm. */
const MIN_WINDOW_MS = 1_000;
/** Longer than any request waits for its status: a lock this old was left by a killed process. */
const LOCK_STALE_MS = 60_000;
/**
 * Waiting for another stage's call during the calm: 25 ms, doubling up to
 * 500 ms, ±50 % (shared/backoff.ts), so the stages waiting for one key
 * neither poll its lock every few ms nor try it all at once.
 */
const LOCK_BACKOFF: Backoff = { firstMs: 25, maxMs: 500, jitter: 0.5 };

interface KeyState {
  until: number;
  calmUntil: number;
}

/**
 * The store of the atomic home a stage belongs to: its artifact directory is
 * `<home>/artifacts/<run>/…` (the worker may have been given the home by
 * --home, not ATOMIC_HOME). Undefined when neither tells a home (a runner
 * driven outside atomic: nothing shared, nothing written).
 */
export function rateLimitsFor(artifactDir: string, env?: EnvSource): SharedRateLimits | undefined {
  const m = /^(.*)\/artifacts\/[^/]+/.exec(resolve(artifactDir));
  const home = m?.[1] ?? readEnv("ATOMIC_HOME", env);
  if (!home) return undefined;
  const dir = join(resolve(home), "rate-limits");
  let store = stores.get(dir);
  if (!store) stores.set(dir, (store = new SharedRateLimits(dir)));
  return store;
}

const stores = new Map<string, SharedRateLimits>();

export class SharedRateLimits {
  constructor(private readonly dir: string) {}

  key(provider: string, model: string | undefined): string {
    return new Bun.CryptoHasher("sha256").update(`${provider}\n${model ?? ""}`).digest("hex").slice(0, 24);
  }

  /** The provider said "not before retryAfterMs from now" (a 429 or a Retry-After). */
  backOff(key: string, retryAfterMs: number | undefined, now = Date.now()): void {
    const wait = Math.max(0, retryAfterMs ?? NO_RETRY_AFTER_MS);
    const old = this.read(key);
    const next = { until: Math.max(old.until, now + wait), calmUntil: Math.max(old.calmUntil, now + wait + CALM_FACTOR * Math.max(wait, MIN_WINDOW_MS)) };
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      const tmp = join(this.dir, `${key}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
      writeFileSync(tmp, JSON.stringify(next), { mode: 0o600 });
      renameSync(tmp, join(this.dir, `${key}.json`));
    } catch {
      // cannot share it (read-only home): this stage still honours its own Retry-After
    }
  }

  /** Milliseconds until calls to `key` may go (0: now). */
  waitMs(key: string, now = Date.now()): number {
    return Math.max(0, this.read(key).until - now);
  }

  /**
   * Waits until a call to `key` may go; returns the release to call once the
   * provider's answer has started (a no-op outside the calm). Rejects with
   * the signal's reason when it is aborted. `waited` is told each wait's
   * milliseconds (for the call's rate-limit wait: ModelCall.rateLimitWaitMs).
   */
  async acquire(key: string, signal?: AbortSignal, waited?: (ms: number) => void): Promise<() => void> {
    for (let lockWaits = 0; ; ) {
      signal?.throwIfAborted();
      const now = Date.now();
      const s = this.read(key);
      if (s.until > now) {
        await timedSleep(Math.min(s.until - now, 5_000), signal, waited);
        continue;
      }
      if (s.calmUntil <= now) return () => {};
      const lock = join(this.dir, `${key}.lock`);
      if (this.tryLock(lock)) {
        // A 429 may have landed while we waited for the lock: read again before calling.
        if (this.read(key).until > Date.now()) {
          rmSync(lock, { force: true });
          continue;
        }
        return () => rmSync(lock, { force: true });
      }
      await timedSleep(backoffDelay(LOCK_BACKOFF, lockWaits++), signal, waited);
    }
  }

  private tryLock(lock: string): boolean {
    try {
      closeSync(openSync(lock, "wx", 0o600));
      return true;
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > LOCK_STALE_MS) rmSync(lock, { force: true });
      } catch {
        // gone meanwhile
      }
      return false;
    }
  }

  private read(key: string): KeyState {
    try {
      const v = JSON.parse(readFileSync(join(this.dir, `${key}.json`), "utf8")) as Partial<KeyState>;
      return { until: Number(v.until) || 0, calmUntil: Number(v.calmUntil) || 0 };
    } catch {
      return { until: 0, calmUntil: 0 };
    }
  }
}

async function timedSleep(ms: number, signal: AbortSignal | undefined, waited: ((ms: number) => void) | undefined): Promise<void> {
  const t0 = Date.now();
  try {
    await sleep(ms, signal);
  } finally {
    waited?.(Date.now() - t0);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((res, rej) => {
    if (signal?.aborted) return rej(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      res();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      rej(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

