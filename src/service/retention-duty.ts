/**
 * The service's retention duty: applies the `retention` setting
 * (engine/retention.ts: finished runs older than `retention.olderThan`)
 * when this service becomes the active one, then every
 * RETENTION_INTERVAL_MS while it stays active. A pass never touches a run a
 * driver holds, so it runs beside the recovery duty's drives. Absent when
 * no retention is configured.
 */

import { artifactStoreFor } from "../artifacts/select.ts";
import { collectGarbage, retentionOptions, RETENTION_INTERVAL_MS, type GcOptions, type GcReport } from "../engine/retention.ts";
import { loadConfig } from "../shared/config/load.ts";
import { formatBytes } from "../shared/format-bytes.ts";
import type { Duty, DutyFactory, DutyStopReason, ServiceOptions } from "./service.ts";

export class RetentionDuty implements Duty {
  readonly name = "retention";
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pass: Promise<void> | undefined;
  private active = false;
  private last: { at: number; report: GcReport } | undefined;

  constructor(
    private readonly service: ServiceOptions,
    private readonly options: GcOptions,
  ) {}

  start(): void {
    this.active = true;
    this.schedule(0);
  }

  async stop(_reason: DutyStopReason): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    await this.pass;
  }

  describe(): unknown {
    return {
      olderThanMs: this.options.olderThanMs,
      statuses: this.options.statuses,
      ...(this.last ? { lastAt: this.last.at, lastDeleted: this.last.report.runs } : {}),
    };
  }

  private schedule(ms: number): void {
    if (!this.active) return;
    this.timer = setTimeout(() => {
      this.pass = this.apply().finally(() => {
        this.pass = undefined;
        this.schedule(RETENTION_INTERVAL_MS);
      });
    }, ms);
  }

  private async apply(): Promise<void> {
    try {
      const report = await collectGarbage(this.service.journal, this.service.home, this.options);
      this.last = { at: Date.now(), report };
      const freed = report.storage ? Math.max(0, report.storage.bytesBefore - report.storage.bytesAfter) : 0;
      this.service.log({
        type: "retention",
        message: `retention deleted ${report.runs} run(s), ${report.rows} journal row(s), ${formatBytes(report.artifactBytes)} of artifacts; the journal file shrank by ${formatBytes(freed)}`,
        runs: report.runs,
        rows: report.rows,
        artifactBytes: report.artifactBytes,
        freedBytes: freed,
      });
    } catch (err) {
      this.service.log({ type: "service_error", message: `retention failed: ${String((err as Error)?.message ?? err)}; trying again in a day` });
    }
  }
}

/** The duty, when `retention` is configured (home config, then the project's, as every command reads it). */
export const retentionDuty: DutyFactory = (service) => {
  const { config } = loadConfig({ home: service.home });
  const options = retentionOptions(config);
  return options ? new RetentionDuty(service, { ...options, artifacts: artifactStoreFor(service.journal, config) }) : undefined;
};
