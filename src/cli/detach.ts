/**
 * `run --detach` and `resume --detach`: the run is recorded here and left
 * to the local service, which drives it (src/service/recovery.ts: a run
 * nobody holds the lease of is due). Without an active service nobody
 * would, nor for a workflow that opted out (`recover: false`), so these
 * refuse before anything is written.
 */

import type { Journal } from "../journal/journal.ts";
import { UsageError } from "../shared/errors.ts";
import { activeService } from "../service/service-lease.ts";
import type { CliSession } from "./session.ts";

export async function requireService(journal: Journal, workflow: { name: string; recover: boolean }): Promise<void> {
  if (!workflow.recover) {
    throw new UsageError("recovery_opted_out", `workflow ${workflow.name} opted out of recovery (recover: false), so the service would never drive a detached run of it`, {
      hint: "drop --detach to drive the run here",
    });
  }
  if (await activeService(journal)) return;
  throw new UsageError("no_service", `no atomic service is running on ${journal.location}, so nothing would drive a detached run`, {
    hint: "start one with atomic serve (with the same --home), or drop --detach to drive the run here",
  });
}

export function announceDetached(s: CliSession, runId: string): void {
  if (s.globals.json) s.json({ type: "detached", runId });
  else {
    s.result(runId);
    s.info(s.style.dim(`left to the service; follow it with: atomic show ${runId}`));
  }
}
