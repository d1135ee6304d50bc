/**
 * The intercom broker as a real process (started from source, as the
 * binary would start itself), over its real unix socket: lifecycle (spawn
 * lock, one broker per home, private files, idle exit, restart after kill
 * -9), the protocol (register, send, ask, reply, list, status), bad input
 * (every malformed frame closes only its connection; a fuzz of more than
 * 10,000 frames while a well-behaved client keeps being served), and 100
 * concurrent clients exchanging messages without loss, duplication or
 * reordering. Each test has its own ATOMIC_HOME; afterEach stops every
 * broker it started. No duration is asserted.
 *
 * The fuzz runs under fast-check (120 runs of 8 concurrent clients, each
 * making 1-6 connections): a failure prints the seed and the path and
 * shrinks to a smallest set of connections that breaks the broker (each run
 * faces a live broker, restarted if the last one died). Replay it with
 * `FC_SEED=<seed> [FC_PATH=<path>] bun test test/intercom/broker.test.ts -t fuzz`
 * (test/helpers/fast-check.ts).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { existsSync, mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { IntercomClient } from "../../src/intercom/client.ts";
import { encodeFrame } from "../../src/intercom/framing.ts";
import { intercomPaths } from "../../src/intercom/paths.ts";
import { PROTOCOL_VERSION } from "../../src/intercom/protocol/index.ts";
import type { IncomingMessage } from "../../src/intercom/protocol/index.ts";
import { AtomicError } from "../../src/shared/errors.ts";
import { fcParams } from "../helpers/fast-check.ts";
import { BUN, ROOT, lineWatcher, waitUntil } from "../helpers/atomic.ts";
import { alive, brokerPidOf, brokersOf, cleanupHomes, newHome, rawConnect, signal } from "./support.ts";

const IDLE_MS = "1500";
let savedIdle: string | undefined;

beforeAll(() => {
  savedIdle = process.env.ATOMIC_INTERCOM_IDLE_MS;
  process.env.ATOMIC_INTERCOM_IDLE_MS = IDLE_MS;
});

afterAll(() => {
  if (savedIdle === undefined) delete process.env.ATOMIC_INTERCOM_IDLE_MS;
  else process.env.ATOMIC_INTERCOM_IDLE_MS = savedIdle;
});

const clients: IntercomClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await cleanupHomes();
});

async function client(home: string, opts: Partial<ConstructorParameters<typeof IntercomClient>[0]> = {}): Promise<IntercomClient> {
  const c = await IntercomClient.connect({ home, role: "test", ...opts });
  clients.push(c);
  return c;
}

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(AtomicError);
    expect((err as AtomicError).code).toBe(code);
    return;
  }
  throw new Error(`expected an error with code ${code}`);
}

/** A client that answers every ask with { echo: body }. */
async function echoClient(home: string, name: string): Promise<{ client: IntercomClient; got: IncomingMessage[] }> {
  const got: IncomingMessage[] = [];
  const c = await client(home, {
    onMessage: (msg, reply) => {
      got.push(msg);
      if (msg.ask) void reply({ echo: msg.body }).catch(() => {});
    },
  });
  await c.register(name, ["g"]);
  return { client: c, got };
}

// ---------------------------------------------------------------- fuzz input (fast-check)

const HELLO = { v: PROTOCOL_VERSION, type: "hello", id: "h", pid: 1, role: "fuzz" };

/** What one fuzzing connection does, as data fast-check can generate and shrink. */
type Connection =
  | { kind: "huge"; length: number; tail: number } // a huge length prefix
  | { kind: "half"; cut: number } // half a hello frame, then disconnect
  | { kind: "bytes"; bytes: Uint8Array } // random bytes
  | { kind: "burst"; hello: boolean; frames: unknown[] }; // (a hello, then) a burst of JSON frames, most valid-but-wrong

const pick = <T>(...xs: T[]) => fc.constantFrom(...xs);
const frame: fc.Arbitrary<unknown> = fc.oneof(
  fc.record({
    v: fc.constant(PROTOCOL_VERSION),
    type: pick("send", "ask", "reply", "list", "status", "register", "unregister", "bogus"),
    id: pick<unknown>("1", "", 5, null, "x".repeat(300)),
    to: pick<unknown>("echo", "", 7, "group:g", "nobody"),
    body: pick<unknown>(1, "s", null, { a: [1] }),
    name: pick<unknown>("n", "", 3),
    groups: pick<unknown>([], ["g"], "g", [1]),
    timeoutMs: pick<unknown>(1, -1, 1e9, "5"),
    inReplyTo: pick<unknown>("ask-1", 2),
  }),
  fc.record({ v: pick<unknown>(0, 2, "1", undefined), type: fc.constant("hello"), id: fc.constant("h") }),
  pick<unknown>(null, true, 0, "text", [], [{}]),
  fc.constant({ type: "hello" }),
  fc.record({ v: fc.constant(PROTOCOL_VERSION), type: fc.constant("send"), id: fc.constant("ok"), to: fc.constant("nobody"), body: fc.double() }),
  fc.constant({ v: PROTOCOL_VERSION, type: "list", id: "l" }),
  fc.jsonValue({ maxDepth: 3 }),
);
const connection: fc.Arbitrary<Connection> = fc.oneof(
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("huge" as const), length: fc.integer({ min: 0x01000000, max: 0x7fffffff }), tail: fc.nat(7) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("half" as const), cut: fc.nat(1000) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("bytes" as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 64 }) }) },
  {
    weight: 7,
    arbitrary: fc.record({ kind: fc.constant("burst" as const), hello: fc.oneof({ weight: 7, arbitrary: fc.constant(true) }, { weight: 3, arbitrary: fc.constant(false) }), frames: fc.array(frame, { minLength: 1, maxLength: 40 }) }),
  },
);

describe("broker lifecycle", () => {
  test("the first client starts it: private directory (0700), socket (0600), pid file; it exits when idle", async () => {
    const home = newHome();
    const c = await client(home);
    const paths = intercomPaths(home);
    expect(statSync(paths.dir).mode & 0o777).toBe(0o700);
    expect(statSync(paths.socket).mode & 0o777).toBe(0o600);
    const pid = brokerPidOf(home)!;
    expect(alive(pid)).toBe(true);
    expect((await c.status()).pid).toBe(pid);
    expect(existsSync(paths.logFile)).toBe(true);
    c.close();
    await waitUntil(() => !alive(pid), 20_000, "the idle broker to exit");
    expect(existsSync(paths.socket)).toBe(false);
    expect(existsSync(paths.pidFile)).toBe(false);
  });

  test("spawn race: 10 processes start the broker at once; exactly one broker runs and all reach it", async () => {
    const home = newHome();
    const gun = join(home, "go");
    const procs = Array.from({ length: 10 }, () =>
      Bun.spawn([BUN, join(ROOT, "test", "intercom", "fixtures", "connect.ts"), home, gun], { stdout: "pipe", stderr: "pipe", env: { ...process.env } }),
    );
    // All of them at the starting line (loaded, waiting for the gun): the race is as close as it gets.
    await Promise.all(procs.map((p) => lineWatcher(p.stderr).waitFor(/^ready$/, 30_000)));
    writeFileSync(gun, "");
    const outs = await Promise.all(procs.map(async (p) => JSON.parse((await new Response(p.stdout).text()).trim()) as { pid?: number; error?: string }));
    await Promise.all(procs.map((p) => p.exited));
    expect(outs.filter((o) => o.error)).toEqual([]);
    const pids = new Set(outs.map((o) => o.pid));
    expect(pids.size).toBe(1);
    expect(brokersOf(home)).toEqual([...pids] as number[]);
  });

  test("kill -9 of the broker: the next client starts a new one; a reconnecting client comes back and registers again", async () => {
    const home = newHome();
    const first = await client(home);
    const states: string[] = [];
    const keeper = await client(home, { reconnect: true, backoff: { firstMs: 50, maxMs: 100 }, spawn: false, onState: (c) => states.push(c.to) });
    await keeper.register("keeper", ["g"]);
    const old = brokerPidOf(home)!;
    signal(old, "SIGKILL");
    await waitUntil(() => !alive(old), 10_000, "the broker to die");
    await expectCode(first.status(), "intercom_unavailable");
    const next = await client(home);
    const pid = (await next.status()).pid;
    expect(pid).not.toBe(old);
    expect(brokersOf(home)).toEqual([pid]);
    await waitUntil(async () => (await next.list()).some((s) => s.name === "keeper"), 20_000, "the keeper to register again");
    await waitUntil(() => keeper.isOpen, 20_000, "the keeper to be open again");
    expect(states).toContain("backoff");
    expect(states.at(-1)).toBe("open");
  });

  test("a client coming back registers its first name last: once that one is listed, so are all the others", async () => {
    const home = newHome();
    await client(home);
    const keeper = await client(home, { reconnect: true, backoff: { firstMs: 50, maxMs: 100 }, spawn: false });
    // A run's root registers itself, then its stages (engine/mail/broker-link.ts); `atomic sessions` waits for the root.
    await keeper.register("root", ["g"]);
    const stages = Array.from({ length: 30 }, (_, i) => `root:s${i}`);
    for (const name of stages) await keeper.register(name, ["g"]);
    const old = brokerPidOf(home)!;
    signal(old, "SIGKILL");
    await waitUntil(() => !alive(old), 10_000, "the broker to die");
    const next = await client(home);
    // Listed back to back (each a round trip), so the moment the root appears is not missed.
    let listed: string[] = [];
    const deadline = Date.now() + 20_000;
    while (!(listed = (await next.list()).map((x) => x.name)).includes("root") && Date.now() < deadline);
    expect(listed.filter((n) => n.startsWith("root:")).sort()).toEqual([...stages].sort());
  });

  test("a stale spawn lock (its owner is gone) is replaced", async () => {
    const home = newHome();
    const paths = intercomPaths(home);
    const gone = Bun.spawnSync(["true"]).pid;
    mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
    writeFileSync(paths.lockFile, JSON.stringify({ pid: gone, host: (await import("../../src/shared/process-info.ts")).hostId(), at: Date.now(), token: "old" }));
    const c = await client(home);
    expect((await c.status()).pid).toBe(brokerPidOf(home)!);
    expect(existsSync(paths.lockFile)).toBe(false);
  });

  test("a reconnecting client whose home was removed starts no broker there: the home is not made again", async () => {
    const home = join(newHome(), "home");
    mkdirSync(home);
    const states: string[] = [];
    const keeper = await client(home, { reconnect: true, backoff: { firstMs: 50, maxMs: 100 }, onState: (c) => states.push(c.to) });
    const old = brokerPidOf(home)!;
    rmSync(home, { recursive: true });
    // The broker leaves once its socket is gone; the client tries again (connecting), and that try ends.
    await waitUntil(() => !alive(old), 10_000, "the broker to leave with its home");
    await waitUntil(() => states.lastIndexOf("connecting") > 0 && states.lastIndexOf("connecting") < states.length - 1, 20_000, "a reconnect attempt to end");
    expect(states.at(-1)).toBe("backoff");
    expect(keeper.isOpen).toBe(false);
    expect(existsSync(home)).toBe(false);
    expect(brokersOf(home)).toEqual([]);
  });

  test("a client that must not start a broker says so when none runs", async () => {
    const home = newHome();
    await expectCode(IntercomClient.connect({ home, spawn: false }), "intercom_unavailable");
    expect(brokersOf(home)).toEqual([]);
  });
});

describe("broker protocol", () => {
  test("register, send (with a delivery receipt), ask and reply, list by group, status", async () => {
    const home = newHome();
    const a = await client(home);
    const { got } = await echoClient(home, "bee");
    expect(await a.send("bee", { hi: 1 }, { mode: "followUp", from: "a" })).toEqual({ delivered: ["bee"] });
    expect(await a.ask("bee", { q: 2 }, 5_000)).toEqual({ from: "bee", reply: { echo: { q: 2 } } });
    await waitUntil(() => got.length === 2, 5_000, "both messages");
    expect(got[0]).toMatchObject({ type: "message", from: "a", to: "bee", body: { hi: 1 }, mode: "followUp", ask: false });
    expect(got[1]).toMatchObject({ body: { q: 2 }, ask: true });
    expect((await a.send("group:g", "to all")).delivered).toEqual(["bee"]);
    expect((await a.list("g")).map((s) => s.name)).toEqual(["bee"]);
    expect(await a.list("nope")).toEqual([]);
    const st = await a.status();
    expect(st).toMatchObject({ protocol: PROTOCOL_VERSION, connections: 2, sessions: 1 });
    expect(st.counters.sent).toBeGreaterThanOrEqual(2);
  });

  test("a list waiting for names is answered once they are all registered, or at its waitMs without them", async () => {
    const home = newHome();
    const a = await client(home);
    const b = await client(home);
    let answered = false;
    const waiting = a.list("g", { names: ["x", "y"], ms: 60_000 }).then((list) => ((answered = true), list));
    await b.register("x", ["g"]);
    // y is not there yet: the broker still holds the answer (a status round trip on the same connection comes back first).
    await a.status();
    expect(answered).toBe(false);
    await b.register("y", ["g"]);
    expect((await waiting).map((s) => s.name)).toEqual(["x", "y"]);
    // A name that never comes: the answer at waitMs, with what is there.
    expect((await a.list("g", { names: ["never"], ms: 50 })).map((s) => s.name)).toEqual(["x", "y"]);
  });

  test("errors: no such session, a taken name, an ask that times out, a target that leaves before replying", async () => {
    const home = newHome();
    const a = await client(home);
    await expectCode(a.send("nobody", 1), "no_session");
    const got: unknown[] = [];
    const b = await client(home, { onMessage: (msg) => void got.push(msg.body) });
    await b.register("silent");
    await expectCode(a.register("silent"), "name_taken");
    await expectCode(a.ask("silent", "hello?", 200), "timeout");
    const asking = a.ask("silent", "still there?", 60_000);
    // b leaves with the ask in hand (not before it arrived: that would be no_session)
    await waitUntil(() => got.includes("still there?"), 10_000, "the ask to reach b");
    b.close();
    await expectCode(asking, "session_gone");
    await expectCode(a.reply("ask-999", "late"), "unknown_ask");
  });

  test("every kind of bad frame gets an error reply and closes that connection only", async () => {
    const home = newHome();
    const good = await client(home);
    const { client: echo } = await echoClient(home, "echo");
    void echo;
    const socket = intercomPaths(home).socket;
    const hello = { v: PROTOCOL_VERSION, type: "hello", id: "h", pid: 1, role: "raw" };
    const header = (n: number) => {
      const b = new Uint8Array(4);
      new DataView(b.buffer).setUint32(0, n);
      return b;
    };
    const cases: { name: string; send: (c: Awaited<ReturnType<typeof rawConnect>>) => void; code: string }[] = [
      { name: "not JSON", send: (c) => c.write(new Uint8Array([0, 0, 0, 3, 0x7b, 0x7b, 0x7b])), code: "bad_frame" },
      { name: "oversized length", send: (c) => c.write(header(0x7fffffff)), code: "frame_too_large" },
      { name: "zero length", send: (c) => c.write(header(0)), code: "bad_frame" },
      { name: "unknown type", send: (c) => c.frame({ v: PROTOCOL_VERSION, type: "launch", id: "x" }), code: "bad_frame" },
      { name: "wrong version", send: (c) => c.frame({ v: 99, type: "hello", id: "x", pid: 1, role: "r" }), code: "unsupported_version" },
      { name: "wrong field type", send: (c) => c.frame({ ...hello, pid: "one" }), code: "bad_frame" },
      { name: "not an object", send: (c) => c.frame([1, 2, 3]), code: "bad_frame" },
      { name: "no hello first", send: (c) => c.frame({ v: PROTOCOL_VERSION, type: "status", id: "s" }), code: "hello_required" },
      {
        name: "bad frame after a hello",
        send: (c) => {
          c.frame(hello);
          c.frame({ v: PROTOCOL_VERSION, type: "send", id: "x", to: 5, body: 1 });
        },
        code: "bad_frame",
      },
    ];
    for (const k of cases) {
      const c = await rawConnect(socket);
      k.send(c);
      await c.closed;
      const errors = c.frames.filter((f) => f.ok && (f.value as { type: string }).type === "error");
      expect({ name: k.name, code: (errors[0] as { value: { error: { code: string } } } | undefined)?.value.error.code }).toEqual({ name: k.name, code: k.code });
    }
    // Half a frame, then gone.
    const half = await rawConnect(socket);
    half.write(encodeFrame(hello).subarray(0, 7));
    half.end();
    await half.closed;
    expect(await good.ask("echo", "still up?", 5_000)).toMatchObject({ reply: { echo: "still up?" } });
  });

  test("fuzz: over 10,000 random and malformed frames from 8 concurrent clients; a well-behaved client is served throughout", async () => {
    const home = newHome();
    const socket = intercomPaths(home).socket;
    let frames = 0;
    let refused = 0;
    let served = 0;
    const TARGET = 10_000;
    // Each property run starts from a live broker: after a failure (the broker died) fast-check's shrinking
    // re-runs smaller cases, and each must face a fresh broker for the shrunk case to mean anything.
    let world: { good: IntercomClient; pid: number } | undefined;
    const ensureBroker = async () => {
      if (world && alive(world.pid)) return world;
      const good = await client(home);
      await echoClient(home, "echo");
      world = { good, pid: brokerPidOf(home)! };
      return world;
    };

    const connect = async (c: Connection): Promise<void> => {
      const conn = await rawConnect(socket);
      if (c.kind === "huge") {
        const b = new Uint8Array(4 + c.tail);
        new DataView(b.buffer).setUint32(0, c.length);
        conn.write(b);
        frames++;
      } else if (c.kind === "half") {
        const f = encodeFrame(HELLO);
        conn.write(f.subarray(0, 1 + (c.cut % (f.length - 1))));
        frames++;
        conn.end();
      } else if (c.kind === "bytes") {
        conn.write(c.bytes);
        frames++;
      } else {
        if (c.hello) conn.frame(HELLO);
        for (const value of c.frames) {
          try {
            conn.frame(value);
          } catch {
            conn.write(new Uint8Array([0, 0, 0, 1, 0x7d]));
          }
        }
        frames += c.frames.length;
      }
      // Either the broker closes it (a bad frame) or we do.
      const closedByBroker = await Promise.race([conn.closed.then(() => true), Bun.sleep(30).then(() => false)]);
      if (closedByBroker) refused++;
      else conn.end();
      await conn.closed;
    };

    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(connection, { minLength: 1, maxLength: 6 }), { minLength: 8, maxLength: 8 }), async (clients) => {
        const { good, pid } = await ensureBroker();
        let stop = false;
        // The well-behaved client asks all along; every ask must be answered.
        const steady = (async () => {
          while (!stop) {
            const r = await good.ask("echo", { n: served }, 10_000);
            expect(r.reply).toEqual({ echo: { n: served } });
            served++;
          }
        })();
        try {
          await Promise.all(clients.map(async (conns) => {
            for (const c of conns) await connect(c);
          }));
        } finally {
          stop = true;
          await steady;
        }
        expect(alive(pid)).toBe(true);
        expect(await good.ask("echo", "after", 5_000)).toMatchObject({ reply: { echo: "after" } });
      }),
      fcParams(120),
    );
    expect(frames).toBeGreaterThanOrEqual(TARGET);
    expect(refused).toBeGreaterThan(100);
    expect(served).toBeGreaterThan(40);
    const st = await world!.good.status();
    expect(st.pid).toBe(world!.pid);
    expect(st.counters.badFrames).toBeGreaterThan(100);
  }, 120_000);

  test("100 concurrent clients exchange messages: none lost, none duplicated, per-sender order kept", async () => {
    const home = newHome();
    const N = 100;
    const PER = 30;
    const received = Array.from({ length: N }, () => [] as { from: number; seq: number }[]);
    const cs = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        client(home, {
          onMessage: (msg) => received[i]!.push(msg.body as { from: number; seq: number }),
        }),
      ),
    );
    await Promise.all(cs.map((c, i) => c.register(`c${i}`, ["all"])));
    // Each client fires all its messages without waiting (order on the wire is the send order), to two peers.
    const receipts = await Promise.all(
      cs.flatMap((c, i) =>
        Array.from({ length: PER }, (_, seq) => c.send(`c${(i + 1 + (seq % 2) * 49) % N}`, { from: i, seq })),
      ),
    );
    expect(receipts.every((r) => r.delivered.length === 1)).toBe(true);
    await waitUntil(() => received.reduce((n, r) => n + r.length, 0) === N * PER, 20_000, "every message to arrive");
    for (let j = 0; j < N; j++) {
      const bySender = new Map<number, number[]>();
      for (const m of received[j]!) bySender.set(m.from, [...(bySender.get(m.from) ?? []), m.seq]);
      for (const [from, seqs] of bySender) {
        const expected = Array.from({ length: PER }, (_, seq) => seq).filter((seq) => (from + 1 + (seq % 2) * 49) % N === j);
        expect({ from, to: j, seqs }).toEqual({ from, to: j, seqs: expected });
      }
    }
    expect(received.reduce((n, r) => n + r.length, 0)).toBe(N * PER);
  }, 60_000);
});
