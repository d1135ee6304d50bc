/**
 * A run as a portable file (`atomic export RUN > run.json`): the root run's
 * record and its events, as the journal holds them, with a format marker
 * and version. `atomic replay` and `testRun(..., { replay })` read it back
 * (./replay.ts). Child runs are not included: a child workflow that ended
 * is replayed from its checkpoint in the root, like a resume replays it.
 */

import * as v from "valibot";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { VERSION } from "../shared/version.ts";

export const EXPORT_FORMAT = "atomic-run-export";
export const EXPORT_VERSION = 1;

export interface RunExport {
  format: typeof EXPORT_FORMAT;
  version: number;
  /** The atomic that wrote it. */
  exportedBy: string;
  run: RunRecord;
  events: JournalEvent[];
}

const EVENT = v.object({
  runId: v.string(),
  seq: v.number(),
  type: v.string(),
  key: v.nullable(v.string()),
  idempotencyKey: v.nullable(v.string()),
  payload: v.unknown(),
  at: v.number(),
});

const EXPORT = v.object({
  format: v.literal(EXPORT_FORMAT),
  version: v.literal(EXPORT_VERSION),
  exportedBy: v.string(),
  run: v.looseObject({ id: v.string(), workflowName: v.string(), workflowPath: v.string(), inputs: v.unknown(), status: v.string() }),
  events: v.array(EVENT),
});

/** The export of a root run (read from `journal`). */
export async function exportRun(journal: Journal, run: RunRecord): Promise<RunExport> {
  return { format: EXPORT_FORMAT, version: EXPORT_VERSION, exportedBy: `atomic ${VERSION}`, run, events: await journal.readEvents(run.id) };
}

/** `text` (the contents of `file`) as an export, or a usage error saying why it is not one. */
export function parseExport(text: string, file: string): RunExport {
  const hint = "make one with: atomic export RUN > run.json";
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new UsageError("not_an_export", `${file} is not an atomic run export (it is not JSON)`, { hint });
  }
  const parsed = v.safeParse(EXPORT, json);
  if (!parsed.success) {
    const version = (json as { version?: unknown } | null)?.version;
    if ((json as { format?: unknown } | null)?.format === EXPORT_FORMAT && version !== EXPORT_VERSION) {
      throw new UsageError("not_an_export", `${file} is a run export of version ${String(version)}, and this atomic reads version ${EXPORT_VERSION}`, { hint: "export the run again with this atomic" });
    }
    const path = parsed.issues[0].path?.map((p) => String(p.key)).join(".");
    throw new UsageError("not_an_export", `${file} is not an atomic run export${path ? ` (at "${path}")` : ""}`, { hint });
  }
  return parsed.output as unknown as RunExport;
}
