/**
 * What the mail parts (../tree-mail.ts, ./delivery-pump.ts,
 * ./prompt-waits.ts) use of the run tree that holds them (../run-tree.ts),
 * named by shape. The tree makes its mail, so the mail parts must not
 * import the tree's file: that would tie the four files in a circle.
 * RunTree implements this.
 */

import type { Clock } from "../clock.ts";
import type { Journal } from "../../journal/journal.ts";
import type { Lease } from "../../journal/runs.ts";
import type { StageExecutor } from "../../runners/stage-executor.ts";
import type { EngineObserver } from "../observer.ts";
import type { AtomicConfig } from "../../shared/config/schema.ts";

export interface MailTree {
  readonly journal: Journal;
  readonly lease: Lease;
  readonly observer: EngineObserver;
  /** Where stages run: live deliveries go to it. */
  readonly executor: StageExecutor;
  /** Root of per-run artifact directories (`$ATOMIC_HOME/artifacts`). */
  readonly artifactsDir: string;
  /** The run's configuration (the attachment cap of the message tool). */
  readonly config: AtomicConfig;
  /** What question deadlines are measured on (../clock.ts). */
  readonly clock: Clock;
  /** Applies the run's control row now (a pause another process requested), once the driver has started; the revision applied by then. */
  readonly applyControl: (() => Promise<number>) | undefined;
  /** The tree's lease is lost: everything stops. */
  stop(reason: "lease_lost"): void;
}
