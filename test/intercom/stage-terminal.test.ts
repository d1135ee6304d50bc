/**
 * The delivery state stage-terminal (journal/delivery-states.ts), produced
 * for real: a message bound to a running stage that its driver could not
 * hand over before the stage ended for good.
 *
 * The driver hands queued messages to running stages in passes
 * (engine/mail/delivery-pump.ts). The root is stopped (SIGSTOP) while its
 * stage runs on a worker: a message sent then is recorded (bound to the
 * running stage) but no pass can run. The stage ends and its worker's
 * result is committed (the work item is completed in the journal) before
 * the root goes on (SIGCONT): the stage is no longer running anywhere, so
 * no pass can deliver it, and once the stage's checkpoint is recorded the
 * next pass settles the message stage-terminal. `inbox --json` shows it.
 */

import { afterEach, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { startedRunId } from "../e2e/support.ts";
import { cleanupHomes, newHome } from "./support.ts";
import { openJournal } from "../../src/journal/open.ts";
import { journalOf } from "../helpers/postgres.ts";
import type { RunId } from "../../src/shared/ids.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "stage-terminal.ts");

afterEach(async () => {
  await killSpawned();
  await cleanupHomes();
});

test("a message bound to a stage that ended before its driver could hand it over is stage-terminal", async () => {
  const home = newHome();
  const gate = join(home, "gate");
  const env = { GATE_FILE: gate, ATOMIC_INTERCOM_IDLE_MS: "3000" };
  const proc = spawnAtomic(["run", FIXTURE, "--workers", "1"], { home, env });
  let stopped = false;
  try {
    const out = lineWatcher(proc.stdout);
    const id = startedRunId(await out.waitFor(/^started run /)) as RunId;
    await out.waitFor(/stage target started/);
    const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
    try {
      process.kill(proc.pid, "SIGSTOP");
      stopped = true;
      const sent = await runAtomic(["send", id, "target", "too late"], { home, env });
      expect(sent.code).toBe(0);
      writeFileSync(gate, "");
      // The worker committed the stage's result: nothing runs it any more.
      await waitUntil(async () => (await journal.work.list(id)).some((w) => w.stageKey === "0" && w.state === "completed"), 30_000, "the target's work item to be completed");
      process.kill(proc.pid, "SIGCONT");
      stopped = false;
      type Box = { stages: { stage: string; messages: { text: string; state: string; reason: string | null }[] }[] };
      const box = await waitUntil(async () => {
        const b = JSON.parse((await runAtomic(["inbox", id, "--json"], { home, env })).stdout) as Box;
        return b.stages.find((s) => s.stage === "target")?.messages.some((m) => m.state !== "queued") ? b : undefined;
      }, 30_000, "the message to be settled");
      expect(box!.stages.find((s) => s.stage === "target")!.messages).toEqual([{ text: "too late", state: "stage-terminal", reason: "stage target finished before the message arrived" }].map((m) => expect.objectContaining(m)));
      writeFileSync(`${gate}.2`, "");
      expect(await proc.exited).toBe(0);
      const listed = await runAtomic(["inbox", id], { home, env });
      expect(listed.stdout).toMatch(/stage-terminal\s+msg_\S+ .*too late/);
    } finally {
      await journal.close();
    }
  } finally {
    if (stopped) process.kill(proc.pid, "SIGCONT");
  }
}, 90_000);
