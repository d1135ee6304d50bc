/**
 * A codex thread's token totals when its running turn started, read from
 * codex's own session file: for a stage that continues a thread without the
 * totals the earlier stage left (its attempt's directory is on another
 * worker host; session-totals.ts). `turn.completed.usage` is the thread's
 * running total (codex.ts), so without the earlier total the continued
 * stage would be charged the earlier turns again.
 *
 * codex 0.171.0 keeps a thread in
 * `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`: each
 * turn begins with an `event_msg` of type `task_started`, and each model
 * call adds a `token_count` whose `info.total_token_usage` is the thread's
 * total so far. `codex exec` runs one turn a process, so once that turn has
 * completed the last `task_started` is its start, and the last
 * `token_count` before it is the total it started from (none: 0). A fork's
 * file begins with its parent's events; its count goes on from them.
 */

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { num, obj } from "./records.ts";

/** The totals (the `fields` of `total_token_usage`, in order) when the thread's last turn started; undefined without its file. */
export function totalsBeforeLastTurn(codexHome: string, threadId: string, fields: readonly string[]): number[] | undefined {
  const dir = join(codexHome, "sessions");
  let file: string | undefined;
  try {
    file = readdirSync(dir, { recursive: true, encoding: "utf8" }).find((f) => f.endsWith(`-${threadId}.jsonl`));
  } catch {
    return undefined;
  }
  if (!file) return undefined;
  let last = fields.map(() => 0);
  let atStart: number[] | undefined;
  for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
    if (!line.includes('"task_started"') && !line.includes('"token_count"')) continue;
    let payload: Record<string, unknown>;
    try {
      payload = obj(obj(JSON.parse(line)).payload);
    } catch {
      continue; // a line codex was still writing
    }
    if (payload.type === "task_started") atStart = last;
    else if (payload.type === "token_count") {
      const total = obj(obj(payload.info).total_token_usage);
      if (Object.keys(total).length) last = fields.map((k) => num(total[k]));
    }
  }
  return atStart;
}
