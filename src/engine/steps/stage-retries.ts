/**
 * How many more times a failed stage attempt runs: the stage's own
 * `retries` for failures of the stage itself, and INFRA_ATTEMPTS in all for
 * infrastructure faults (worker_lost, storage_unavailable, ...) on top;
 * `worker_retry_limit` is already the pool's retries running out.
 *
 * The counts are durable. A drive begins with the failures earlier drives
 * recorded (`step_failed`, oldest first) replayed through the same rule, so
 * a run resumed after a crash between two attempts does not hand a failing
 * stage its retries again: a stage with `retries: 2` runs at most 3 failed
 * attempts, whoever drove them. The count starts over only after the stage
 * failed for good (its retries ran out and the run failed): `atomic resume`
 * of such a run is a person asking for another round.
 */

import { isInfraCode } from "../../shared/errors.ts";

const INFRA_ATTEMPTS = 3;

export class StageRetries {
  private failures = 0;
  private infraFailures = 0;

  /** `recorded`: the error codes of the attempts earlier drives recorded as failed. */
  constructor(
    private readonly retries: number,
    recorded: readonly string[] = [],
  ) {
    for (const code of recorded) if (!this.again(code)) this.failures = this.infraFailures = 0;
  }

  /** An attempt failed with `code`: true when the stage runs again. */
  again(code: string): boolean {
    if (isInfraCode(code)) return code !== "worker_retry_limit" && ++this.infraFailures < INFRA_ATTEMPTS;
    return ++this.failures <= this.retries;
  }
}
