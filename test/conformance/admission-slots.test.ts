/**
 * The contract of the host-wide agent session slots
 * (src/journal/admission-slots.ts), run against each implementation (today
 * the embedded SQLite store): at most `max` taken, shared by every process
 * of the user, a release frees one (twice is harmless), `list` shows the
 * live holders, and the slot of a process killed with SIGKILL is free at
 * the next take. Real files, real processes (a second process takes slots
 * through its own store and is killed).
 */

import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { AdmissionSlots } from "../../src/journal/admission-slots.ts";
import { openAdmissionSlots } from "../../src/journal/open.ts";
import { statSync } from "node:fs";
import { BUN, ROOT, lineWatcher } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

interface SlotBackend {
  name: string;
  open(dir: string): AdmissionSlots;
  /** A script (run with bun in another process) that opens the store in $SLOTS_DIR, takes $SLOTS_TAKE slots, prints "taken <ids>" and waits. */
  holderScript: string;
}

const BACKENDS: SlotBackend[] = [
  {
    name: "sqlite",
    open: (dir) => openAdmissionSlots(dir),
    holderScript: `
      const { openAdmissionSlots } = await import(${JSON.stringify(join(ROOT, "src/journal/open.ts"))});
      const slots = openAdmissionSlots(process.env.SLOTS_DIR);
      const ids = [];
      for (let i = 0; i < Number(process.env.SLOTS_TAKE); i++) ids.push(await slots.take(100));
      console.log("taken " + ids.join(","));
      setInterval(() => {}, 1000);
    `,
  },
];

const opened: AdmissionSlots[] = [];
const procs: Subprocess[] = [];
afterEach(async () => {
  for (const p of procs.splice(0)) {
    p.kill("SIGKILL");
    await p.exited;
  }
  for (const s of opened.splice(0)) s.close();
  removeTempDirs();
});

for (const backend of BACKENDS) {
  const open = (dir: string) => {
    const s = backend.open(dir);
    opened.push(s);
    return s;
  };

  /** Another process holding `n` slots of `dir`: its pid and slot ids. */
  async function holder(dir: string, n: number): Promise<{ proc: Subprocess; ids: number[] }> {
    const proc = Bun.spawn([BUN, "-e", backend.holderScript], { env: { ...process.env, SLOTS_DIR: dir, SLOTS_TAKE: String(n) }, stdout: "pipe", stderr: "inherit" });
    procs.push(proc);
    const line = await lineWatcher(proc.stdout).waitFor(/^taken /);
    return { proc, ids: line.slice("taken ".length).split(",").map(Number) };
  }

  describe(`${backend.name}: admission slots`, () => {
    test(`${backend.name}: at most max are taken, across stores of one directory; a release frees one`, async () => {
      const dir = makeTempDir();
      const a = open(dir);
      const b = open(dir);
      const first = await a.take(2);
      const second = await b.take(2);
      expect(first).toBeDefined();
      expect(second).toBeDefined();
      expect(first).not.toBe(second);
      expect(await a.take(2)).toBeUndefined();
      expect(await b.take(2)).toBeUndefined();
      expect((await a.list()).map((s) => s.id).sort()).toEqual([first!, second!].sort());
      expect((await b.list()).every((s) => s.pid === process.pid && s.at > 0)).toBe(true);
      await a.release(first!);
      await a.release(first!); // twice: nothing more happens
      expect((await b.list()).map((s) => s.id)).toEqual([second!]);
      const third = await b.take(2);
      expect(third).toBeDefined();
      expect(await a.take(2)).toBeUndefined();
    });

    test(`${backend.name}: slots held by another live process count; once it is killed (SIGKILL) they are free`, async () => {
      const dir = makeTempDir();
      const mine = open(dir);
      const other = await holder(dir, 2);
      expect(other.ids.every((id) => Number.isInteger(id) && id > 0)).toBe(true);
      const held = await mine.list();
      expect(held.map((s) => s.pid)).toEqual([other.proc.pid, other.proc.pid]);
      expect(await mine.take(2)).toBeUndefined();
      other.proc.kill("SIGKILL");
      await other.proc.exited;
      expect(await mine.list()).toEqual([]);
      expect(await mine.take(2)).toBeDefined();
      expect(await mine.take(2)).toBeDefined();
      expect(await mine.take(2)).toBeUndefined();
    });

    test(`${backend.name}: the store lives in the directory it was given (created on first open, private)`, async () => {
      const dir = join(makeTempDir(), "nested", "slots");
      const s = open(dir);
      expect(await s.take(1)).toBeDefined();
      expect(statSync(dir).mode & 0o777).toBe(0o700);
    });
  });
}
