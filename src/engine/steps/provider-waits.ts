/**
 * What an agent stage's attempt went through at its model provider without
 * failing: the calls that waited for rate limits (and for how long), and
 * the provider errors a retry hid, by code. The runner reports them with
 * each model call (ModelCall.rateLimitWaitMs, retriedCodes); the stage step
 * adds them up per attempt and records the sum with the attempt's end
 * record (checkpoint, step_failed, usage_recorded: `providerWaits`), so
 * `/metrics` counts them from the journal like everything else
 * (docs/design/observability.md).
 */

import type { ModelCall } from "../../runners/types.ts";

/** The `providerWaits` field of an attempt's end record; absent when nothing waited or was retried. */
export interface ProviderWaitsRecord {
  /** Model calls that waited for rate limits. */
  rateLimitWaits: number;
  /** Milliseconds they waited in all. */
  rateLimitWaitMs: number;
  /** Provider errors retried (hidden by a retry), by error code. */
  retried: Record<string, number>;
}

export class ProviderWaits {
  private sum: ProviderWaitsRecord = { rateLimitWaits: 0, rateLimitWaitMs: 0, retried: {} };
  private any = false;

  add(call: ModelCall): void {
    if (call.rateLimitWaitMs && call.rateLimitWaitMs > 0) {
      this.sum.rateLimitWaits++;
      this.sum.rateLimitWaitMs += Math.round(call.rateLimitWaitMs);
      this.any = true;
    }
    for (const code of call.retriedCodes ?? []) {
      this.sum.retried[code] = (this.sum.retried[code] ?? 0) + 1;
      this.any = true;
    }
  }

  /** The field to add to the attempt's end record (`{}` when there is nothing to say). */
  field(): { providerWaits?: ProviderWaitsRecord } {
    return this.any ? { providerWaits: this.sum } : {};
  }
}
