/**
 * The one back-off schedule of atomic: how long to wait before trying
 * again, for every retry loop (intercom reconnects, Postgres reconnects
 * and conflict retries, provider retries, SQLite busy waits, pool
 * restarts, ctx.tool retries).
 *
 * Attempt n (0-based) waits `firstMs * factor^n`, never more than `maxMs`,
 * then spread by `jitter` (a fraction: 0.2 means anywhere from 80 % to
 * 120 % of that, drawn uniformly), so clients that failed together do not
 * come back together; the spread is capped at `maxMs` too. Each caller
 * keeps its own policy next to its use, with its reason.
 */

export interface Backoff {
  /** The first wait (attempt 0), in ms. */
  firstMs: number;
  /** The longest wait, in ms (jitter included). */
  maxMs: number;
  /** Each wait is the previous one times this (default 2). */
  factor?: number;
  /** Spread around the nominal wait, as a fraction of it (default 0: none). */
  jitter?: number;
}

/** The wait before retry `attempt` (0-based) under `policy`, in whole ms. */
export function backoffDelay(policy: Backoff, attempt: number, random: () => number = Math.random): number {
  const nominal = Math.min(policy.maxMs, policy.firstMs * (policy.factor ?? 2) ** Math.max(0, attempt));
  const jitter = policy.jitter ?? 0;
  return Math.min(policy.maxMs, Math.round(nominal * (1 - jitter + random() * 2 * jitter)));
}
