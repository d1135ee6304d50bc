/**
 * The heavy tests' bound across processes (heavy.ts): bun processes given
 * one slot folder hold at most HEAVY_SLOTS slots together; one more waits
 * in the kernel until a holder lets go, by ending its hold or by dying
 * (SIGKILL: its slot is free without it doing anything).
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { lineWatcher } from "./atomic.ts";
import { HEAVY_SLOTS } from "./heavy.ts";
import { makeTempDir, removeTempDirs } from "./temp.ts";

/** Every holder process started, killed after each test whatever happened (a killed one lets its slot go). */
const started: Subprocess<"pipe", "pipe", "inherit">[] = [];

afterEach(async () => {
  const ending = started.splice(0).map((p) => {
    p.kill("SIGKILL");
    return p.exited;
  });
  await Promise.all(ending);
  removeTempDirs();
});

function holder(dir: string) {
  const proc = Bun.spawn([process.execPath, join(import.meta.dir, "heavy-holder.ts")], { env: { ...process.env, ATOMIC_TEST_HEAVY_SLOTS_DIR: dir }, stdin: "pipe", stdout: "pipe" });
  started.push(proc);
  return { proc, out: lineWatcher(proc.stdout) };
}

/** Whether another process could take the slot file now (util-linux flock, not waiting). */
function lockable(file: string): boolean {
  return Bun.spawnSync(["flock", "-n", file, "true"]).exitCode === 0;
}

test("processes sharing a slot folder hold at most HEAVY_SLOTS slots together; the next gets one when a holder ends or is killed", async () => {
  const dir = makeTempDir("atomic-heavy-slots-");
  const slots = Array.from({ length: HEAVY_SLOTS }, (_, i) => join(dir, `slot-${i}`));
  const holders = slots.map(() => holder(dir));
  await Promise.all(holders.map((h) => h.out.waitFor(/^held$/, 60_000)));
  for (const file of slots) expect(lockable(file)).toBe(false);

  const next = holder(dir);
  await next.out.waitFor(/^asking$/, 60_000);
  const last = holder(dir);
  await last.out.waitFor(/^asking$/, 60_000);
  // Every slot file is held by the first ones, so neither of the last two can hold one.
  for (const file of slots) expect(lockable(file)).toBe(false);
  expect([...next.out.lines, ...last.out.lines]).not.toContain("held");

  // A holder killed outright: its slot goes to one of the two waiting.
  holders[0]!.proc.kill("SIGKILL");
  const first = await Promise.race([next, last].map((h) => h.out.waitFor(/^held$/, 60_000).then(() => h)));
  const second = first === next ? last : next;
  for (const file of slots) expect(lockable(file)).toBe(false);
  expect(second.out.lines).not.toContain("held");

  // A holder that ends its hold: its slot goes to the other one waiting.
  const done = (h: typeof first) => {
    h.proc.stdin.write("done\n");
    h.proc.stdin.flush();
  };
  done(first);
  await first.out.waitFor(/^released$/, 60_000);
  await second.out.waitFor(/^held$/, 60_000);

  // Everyone lets go: every slot file is free again.
  const rest = [...holders.slice(1), second];
  for (const h of rest) done(h);
  for (const h of [first, ...rest]) expect(await h.proc.exited).toBe(0);
  // (each holder's `cat` ends on its own once its stdin closed: wait for the lock in the kernel, at most 60 s)
  for (const file of slots) expect(Bun.spawnSync(["flock", "-w", "60", file, "true"]).exitCode).toBe(0);
}, 120_000);
