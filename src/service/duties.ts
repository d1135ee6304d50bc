/**
 * The duties the local service runs while it is the active service on its
 * journal (service.ts), in start order. A duty is added here with one line:
 * a factory that reads the service's options and returns undefined when
 * they turn it off (`--no-recover`, `--no-schedules`).
 */

import { RecoveryDuty } from "./recovery.ts";
import { retentionDuty } from "./retention-duty.ts";
import { ScheduleDuty } from "./schedule-duty.ts";
import type { DutyFactory } from "./service.ts";

export const SERVICE_DUTIES: readonly DutyFactory[] = [
  (service) => (service.recover ? new RecoveryDuty(service) : undefined),
  retentionDuty,
  (service) => (service.schedules ? new ScheduleDuty(service) : undefined),
];
