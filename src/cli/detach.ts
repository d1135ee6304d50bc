/**
 * `run --detach` and `resume --detach`: the run is recorded here and left
 * to the local service, which drives it (src/service/recovery.ts: a run
 * nobody holds the lease of is due). Without an active service nobody
 * would, so these refuse before anything is written.
 */

import type { Journal } from "../journal/types.ts";
import { UsageError } from "../shared/errors.ts";
import { activeService } from "../service/service-lease.ts";
import type { CliSession } from "./session.ts";

export async function requireService(journal: Journal): Promise<void> {
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
