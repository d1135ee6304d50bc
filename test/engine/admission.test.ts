/**
 * Agent sessions of one run (engine/admission.ts): at most
 * `maxSessionsPerRun` at once; a stage that has to wait queues, says why
 * once, and is handed a session that ends, first come first served; a
 * waiting stage that is stopped leaves the queue without taking one. The
 * host-wide slot store is the real one (a SQLite file in a temp dir).
 */

import { afterEach, expect, test } from "bun:test";
import { Admission, type AdmissionTicket } from "../../src/engine/admission.ts";
import { openAdmissionSlots } from "../../src/journal/open.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const cleanups: (() => unknown)[] = [];

afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
  removeTempDirs();
});

function admission(maxSessionsPerRun: number): Admission {
  const a = new Admission({ maxSessionsPerRun, maxSessionsPerUser: 100, maxLoadPerCpu: 1_000_000 }, () => openAdmissionSlots(makeTempDir()));
  cleanups.push(() => a.close());
  return a;
}

test("sessions of a run: two at once, waiters handed a session in the order they came, each told why once", async () => {
  const a = admission(2);
  const tickets = new Map<number, AdmissionTicket>();
  const order: number[] = [];
  const reasons = new Map<number, string[]>();
  const controllers = [0, 1, 2, 3, 4].map(() => new AbortController());
  const admitted = controllers.map((c, i) =>
    a
      .admit(true, c.signal, (reason) => reasons.set(i, [...(reasons.get(i) ?? []), reason]))
      .then((t) => {
        tickets.set(i, t);
        order.push(i);
      }),
  );
  await waitUntil(() => order.length === 2 && reasons.size === 3, 10_000, "two stages admitted, three waiting");
  expect(order).toEqual([0, 1]);
  for (const i of [2, 3, 4]) expect(reasons.get(i)).toEqual(["waiting for an agent session: 2 of 2 allowed for this run are busy"]);

  tickets.get(1)!.release();
  await waitUntil(() => order.length === 3, 10_000, "the first waiter admitted");
  expect(order).toEqual([0, 1, 2]);

  // A waiting stage that is stopped leaves the queue: the next session goes to the one after it.
  controllers[3]!.abort(new Error("stopped"));
  await expect(admitted[3]!).rejects.toThrow("stopped");
  tickets.get(0)!.release();
  await waitUntil(() => order.length === 4, 10_000, "the last waiter admitted");
  expect(order).toEqual([0, 1, 2, 4]);

  // Both sessions are held (2 and 4): a new stage waits; a release lets it in.
  let late = false;
  let lateWaits = false;
  const lateTicket = a.admit(true, new AbortController().signal, () => (lateWaits = true)).then((t) => {
    late = true;
    return t;
  });
  await waitUntil(() => lateWaits, 10_000, "the new stage to wait");
  expect(late).toBe(false);
  tickets.get(2)!.release();
  (await lateTicket).release();
  expect(late).toBe(true);
  tickets.get(4)!.release();
  // All released: a stage is admitted at once again.
  (await a.admit(true, new AbortController().signal, () => {})).release();
});

test("a session handed to the next stage of the run keeps its user slot: the slot store is not written between them", async () => {
  const dir = makeTempDir();
  const store = openAdmissionSlots(dir);
  cleanups.push(() => store.close());
  const a = new Admission({ maxSessionsPerRun: 2, maxSessionsPerUser: 1, maxLoadPerCpu: 1_000_000 }, () => openAdmissionSlots(dir));
  cleanups.push(() => a.close());
  const order: string[] = [];
  const tickets = new Map<string, AdmissionTicket>();
  const waits = new Map<string, string[]>();
  const admit = (name: string) =>
    a
      .admit(true, new AbortController().signal, (reason) => waits.set(name, [...(waits.get(name) ?? []), reason]))
      .then((t) => {
        order.push(name);
        tickets.set(name, t);
      });

  // first holds the user's one slot; second has a session of the run and polls for that slot; third waits for a session.
  void admit("first");
  await waitUntil(() => order.length === 1, 10_000, "the first stage admitted");
  const held = await store.list();
  expect(held).toHaveLength(1);
  void admit("second");
  await waitUntil(() => waits.has("second"), 10_000, "the second stage to wait for a user slot");
  void admit("third");
  await waitUntil(() => waits.has("third"), 10_000, "the third stage to wait for a session of the run");
  expect(waits.get("second")).toEqual(["waiting for an agent session: all 1 allowed for this user on this host are busy"]);
  expect(waits.get("third")).toEqual(["waiting for an agent session: 2 of 2 allowed for this run are busy"]);

  // The first ends: its session goes to the third with its slot, the very row (as a release and a take would have
  // ended: the third took the freed slot before the second's poll came round).
  tickets.get("first")!.release();
  await waitUntil(() => order.length === 2, 10_000, "the third stage admitted");
  expect(order).toEqual(["first", "third"]);
  expect(await store.list()).toEqual(held);

  // The third ends with nothing queued for a session: its slot is given back, and the second's poll takes it.
  tickets.get("third")!.release();
  await waitUntil(() => order.length === 3, 10_000, "the second stage admitted");
  const taken = await store.list();
  expect(taken).toHaveLength(1);
  expect(taken[0]!.id).not.toBe(held[0]!.id);
  tickets.get("second")!.release();
  expect(await store.list()).toEqual([]);
});
