/**
 * Two real processes share one journal (a file; on Postgres a schema): both
 * open a fresh one at once (so both race to migrate it), race for one lease (exactly one wins,
 * the other is told who holds it), and append 500 entries each to their
 * own root run, one transaction per append. Afterwards every run's seqs
 * are 1..n without a gap, every entry is there, and nobody saw SQLITE_BUSY.
 */

import { afterEach, expect } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { newRunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, testWhen } from "./backends.ts";

const ROOT = join(import.meta.dir, "..", "..");
const LOCAL_BUN = join(ROOT, "node_modules", ".bin", "bun");
const BUN = existsSync(LOCAL_BUN) ? LOCAL_BUN : process.execPath;
const WORKER = join(ROOT, "test", "helpers", "append-worker.ts");
const COUNT = 500;

type Worker = Subprocess<"pipe", "pipe", "pipe">;
const workers: Worker[] = [];

afterEach(async () => {
  for (const w of workers.splice(0)) {
    if (w.exitCode === null) w.kill();
    await w.exited;
  }
  removeTempDirs();
});

interface Done {
  type: "done";
  holderId: string;
  contested: "won" | "held" | "error";
  heldBy?: string;
  appended: number;
  errors: unknown[];
}

/** Reads a worker's stdout as JSON lines, one message per `next()`. */
function messages(w: Worker): () => Promise<Record<string, unknown>> {
  const reader = w.stdout.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  return async () => {
    for (;;) {
      const nl = buffer.indexOf("\n");
      if (nl >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        return JSON.parse(line) as Record<string, unknown>;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error(`worker exited early: ${await new Response(w.stderr).text()}`);
      buffer += decoder.decode(value, { stream: true });
    }
  };
}

for (const backend of BACKENDS) {
  // A journal in one process's memory has no second process to share it with.
  testWhen(!backend.processLocal)(`${backend.name}: two processes append concurrently and contend for one lease`, async () => {
    const home = makeTempDir();
    const contested = newRunId();
    const roots = [newRunId(), newRunId()];
    // The journal's URL (it may hold a password) by environment, as atomic passes it to its own processes.
    const env = { ...process.env, ...(backend.journalUrl ? { ATOMIC_JOURNAL: await backend.journalUrl(home) } : {}) };
    for (const root of roots) {
      workers.push(
        Bun.spawn([BUN, WORKER, home, root, contested, String(COUNT)], { stdin: "pipe", stdout: "pipe", stderr: "pipe", env }),
      );
    }
    const next = workers.map(messages);

    for (const read of next) expect(await read()).toEqual({ type: "ready" });
    for (const w of workers) w.stdin.write("go\n");
    await Promise.all(workers.map((w) => w.stdin.flush()));
    const done = (await Promise.all(next.map((read) => read()))) as unknown as Done[];

    for (const d of done) {
      expect(d.errors).toEqual([]);
      expect(d.appended).toBe(COUNT);
    }
    const winners = done.filter((d) => d.contested === "won");
    const losers = done.filter((d) => d.contested === "held");
    expect(winners.length).toBe(1);
    expect(losers.length).toBe(1);
    expect(losers[0]?.heldBy).toBe(winners[0]?.holderId);

    const journal = await backend.open(home);
    try {
      expect((await journal.getLease(contested))?.holderId).toBe(winners[0]?.holderId as never);
      for (const root of roots) {
        const events = await journal.readEvents(root);
        expect(events.map((e) => e.seq)).toEqual(Array.from({ length: COUNT }, (_, i) => i + 1));
        expect(events.map((e) => (e.payload as { i: number }).i)).toEqual(Array.from({ length: COUNT }, (_, i) => i + 1));
        expect((await journal.getRun(root))?.lastSeq).toBe(COUNT);
      }
    } finally {
      await journal.close();
    }

    for (const w of workers) {
      w.stdin.write("exit\n");
      await w.stdin.end();
    }
    for (const w of workers) expect(await w.exited).toBe(0);
  });
}
