/**
 * Intercom: the broker's round trips and the durable queue's scaling.
 *
 * 1. Broker round trips (send + delivery receipt) per second, with 1 and 8
 *    clients each waiting for its receipt before the next send, each
 *    sending to a session it registered (so every round trip also delivers
 *    a message, and there is one connection per client as in the
 *    baseline), against a raw NDJSON echo server over a unix socket: a bun
 *    process echoing each line back, the same runtime as the broker (run
 *    from source here), alternating. Target: at least 0.5 of raw. Senders
 *    with receivers on other connections are reported for information.
 * 2. Queuing and settling messages for stages that have not started, in
 *    a run with a history (2,000 events, 200 finished stages): 5,000 and
 *    20,000 messages (at most 50 per stage), each queued through the same
 *    code `atomic send` uses, then settled by the stages starting
 *    (claimed, journaled). Target: 20,000 cost at most 5x what 5,000 cost
 *    (linear in the messages). For information: the same 5,000 in a run
 *    with 10x the history, and the cost per message against a raw
 *    single-row commit. Durability NORMAL (FULL adds one fsync per
 *    message to both sides).
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Socket } from "bun";
import { sendMessage } from "../src/engine/messaging.ts";
import { IntercomClient } from "../src/intercom/client.ts";
import { brokerPid } from "../src/intercom/launch.ts";
import { SqliteJournal } from "../src/journal/sqlite/sqlite-journal.ts";
import type { AppendEntry } from "../src/journal/append.ts";
import type { Journal } from "../src/journal/journal.ts";
import type { Lease } from "../src/journal/runs.ts";
import { newRunId, type RunId } from "../src/shared/ids.ts";
import { thisProcessHolder } from "../src/shared/process-info.ts";
import { BUN, RawCommits, alternate, fmt, median, removeTempDir, spawnTracked, spread, tempDir, type Bench, type Result } from "./lib.ts";

const ROUND_TRIP_MS = 1_000;
const REPS = 5;
const RT_TARGET = 0.5;
const SCALE_TARGET = 5;
const BODY = { text: "x".repeat(64) };

// ---------------------------------------------------------------- 1. round trips

const ECHO_SERVER = `
const path = process.argv[2];
Bun.listen({ unix: path, socket: {
  open(s) { s.data = { buf: "" }; },
  data(s, chunk) {
    s.data.buf += chunk.toString();
    let i;
    while ((i = s.data.buf.indexOf("\\n")) >= 0) {
      const line = s.data.buf.slice(0, i + 1);
      s.data.buf = s.data.buf.slice(i + 1);
      JSON.parse(line);
      s.write(line);
    }
  },
}});
process.stdout.write("ready\\n");
`;

/** Round trips per second against the echo server: `clients` connections, each waiting for its echo. */
async function echoRate(socketPath: string, clients: number): Promise<number> {
  const conns = await Promise.all(
    Array.from({ length: clients }, async () => {
      let waiter: (() => void) | undefined;
      let buf = "";
      const socket: Socket<undefined> = await Bun.connect<undefined>({
        unix: socketPath,
        socket: {
          data(_s, chunk) {
            buf += chunk.toString();
            let i: number;
            while ((i = buf.indexOf("\n")) >= 0) {
              JSON.parse(buf.slice(0, i));
              buf = buf.slice(i + 1);
              const w = waiter;
              waiter = undefined;
              w?.();
            }
          },
        },
      });
      return {
        socket,
        roundTrip(n: number) {
          return new Promise<void>((resolve) => {
            waiter = resolve;
            socket.write(`${JSON.stringify({ id: n, ...BODY })}\n`);
          });
        },
      };
    }),
  );
  const count = await loop(clients, (i, n) => conns[i]!.roundTrip(n));
  for (const c of conns) c.socket.end();
  return count;
}

type Topology = "own" | "pairs";

/**
 * Round trips per second through the broker, `clients` connections each
 * waiting for its receipt before the next send. "own": each client sends to
 * a session it registered itself (one connection per client, as the echo
 * baseline has); "pairs": each sender has a receiver on another connection
 * (twice the connections and a write more per round trip).
 */
async function brokerRate(home: string, clients: number, topology: Topology): Promise<{ rate: number; delivered: number }> {
  let delivered = 0;
  const onMessage = () => void delivered++;
  const senders = await Promise.all(Array.from({ length: clients }, () => IntercomClient.connect({ home, role: "bench", onMessage })));
  const receivers =
    topology === "own" ? senders : await Promise.all(Array.from({ length: clients }, () => IntercomClient.connect({ home, role: "bench", onMessage })));
  await Promise.all(receivers.map((r, i) => r.register(`r${i}`, ["bench"])));
  const rate = await loop(clients, (i, n) => senders[i]!.send(`r${i}`, { id: n, ...BODY }).then(() => {}));
  for (const c of new Set([...senders, ...receivers])) c.close();
  if (delivered === 0) throw new Error("no message was delivered");
  return { rate, delivered };
}

/** Runs `clients` loops of round trips for ROUND_TRIP_MS; returns round trips per second. */
async function loop(clients: number, roundTrip: (client: number, n: number) => Promise<void>): Promise<number> {
  let total = 0;
  const t0 = performance.now();
  const deadline = t0 + ROUND_TRIP_MS;
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      let n = 0;
      while (performance.now() < deadline) {
        await roundTrip(i, n++);
        total++;
      }
    }),
  );
  return total / ((performance.now() - t0) / 1000);
}

async function roundTrips(): Promise<Result[]> {
  const home = tempDir("atomic-bench-ic-");
  const echoPath = join(home, "echo.sock");
  const script = join(home, "echo.ts");
  writeFileSync(script, ECHO_SERVER);
  const echo = spawnTracked([BUN, script, echoPath], { stdout: "pipe" });
  const results: Result[] = [];
  try {
    for await (const chunk of echo.stdout as ReadableStream<Uint8Array>) if (new TextDecoder().decode(chunk).includes("ready")) break;
    // Start the broker (from source, like the echo server: same runtime) and warm both up.
    const warm = await IntercomClient.connect({ home, role: "bench" });
    const broker = brokerPid(home);
    await echoRate(echoPath, 1);
    await brokerRate(home, 1, "own");
    await brokerRate(home, 1, "pairs");
    for (const clients of [1, 8]) {
      let delivered = 0;
      const samples = await alternate(REPS, {
        echo: async () => 1000 / (await echoRate(echoPath, clients)),
        own: async () => {
          const r = await brokerRate(home, clients, "own");
          delivered += r.delivered;
          return 1000 / r.rate;
        },
        pairs: async () => 1000 / (await brokerRate(home, clients, "pairs")).rate,
      });
      // alternate() collects durations: here ms per round trip; rates are their inverses.
      const rate = (xs: number[]) => 1000 / median(xs);
      const echoPerS = rate(samples.echo);
      const brokerPerS = rate(samples.own);
      const pairsPerS = rate(samples.pairs);
      const ratio = brokerPerS / echoPerS;
      const plural = clients > 1 ? "s" : "";
      results.push({
        bench: "intercom",
        label: `broker round trips/s (send + delivery receipt), ${clients} client${plural}`,
        value: brokerPerS,
        unit: "round trips/s",
        baseline: { label: `raw NDJSON echo over a unix socket, ${clients} client${plural}`, value: echoPerS, unit: "round trips/s" },
        ratio: { value: ratio, meaning: "broker ÷ raw echo" },
        target: { text: `ratio >= ${RT_TARGET}`, ok: ratio >= RT_TARGET },
        notes: [
          `each client sends to a session it registered (one connection per client, like the echo): frame validated (valibot), routed by name, message written to the session, receipt written back; ${fmt(delivered, 0)} messages delivered`,
          `broker: ${spread(samples.own.map((ms) => 1000 / ms), "round trips/s")}; echo: ${spread(samples.echo.map((ms) => 1000 / ms), "round trips/s")}`,
          `information: with each sender's receiver on a connection of its own (${clients * 2} connections): ${fmt(pairsPerS, 0)} round trips/s, ${fmt(pairsPerS / echoPerS, 3)} of the echo`,
          `broker pid ${broker}; ${ROUND_TRIP_MS} ms per sample, ${REPS} samples per side, alternating`,
        ],
      });
    }
    warm.close();
  } finally {
    echo.kill("SIGKILL");
    await echo.exited;
    const pid = brokerPid(home);
    if (pid) {
      try {
        process.kill(pid, "SIGTERM");
      } catch {
        // gone
      }
    }
    removeTempDir(home);
  }
  return results;
}

// ---------------------------------------------------------------- 2. queue scaling

interface Fixture {
  journal: Journal;
  lease: Lease;
  rootId: RunId;
}

/** A root run with `events` checkpoint events and `stages` finished stages in the index: its history. */
async function runWithHistory(journal: Journal, events: number, stages: number): Promise<Fixture> {
  const rootId = newRunId();
  const lease = await journal.acquireLease(rootId, thisProcessHolder("bench"), { timeoutMs: 600_000 });
  await journal.append(lease, [
    {
      runId: rootId,
      type: "run_started",
      payload: {},
      newRun: { rootId, parentId: null, parentKey: null, depth: 0, workflowName: "bench", workflowPath: "/bench.ts", workflowDigest: "d", inputs: {} },
    },
  ]);
  const batch: AppendEntry[] = [];
  for (let i = 0; i < events; i++) {
    const stage = i < stages ? { stage: { key: String(i), path: `done/s${i}`, name: `s${i}`, kind: "stage" as const, state: "finished" as const, attempt: 1 } } : {};
    batch.push({ runId: rootId, type: "checkpoint", key: String(i), payload: { kind: "tool", name: "noop", args: "x", result: {} }, ...stage });
    if (batch.length === 500) await journal.append(lease, batch.splice(0));
  }
  if (batch.length) await journal.append(lease, batch.splice(0));
  return { journal, lease, rootId };
}

/** Queues `n` messages (50 per future stage) as `atomic send` does, then lets those stages start and take them. */
async function queueAndSettle(fx: Fixture, n: number): Promise<number> {
  const run = (await fx.journal.getRun(fx.rootId))!;
  const stages = Math.ceil(n / 50);
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await sendMessage(fx.journal, { run, target: `future/s${i % stages}`, text: `message ${i}`, sender: "bench" });
  }
  let claimed = 0;
  for (let s = 0; s < stages; s++) {
    const mail = await fx.journal.messages.claimForStage(
      fx.lease,
      { runId: fx.rootId, stageKey: `f${s}`, path: `future/s${s}`, name: `s${s}`, attempt: 1 },
      () => false,
      (fresh) => ({ runId: fx.rootId, type: "messages_delivered", payload: { stageKey: `f${s}`, messageIds: fresh.map((m) => m.messageId) } }),
    );
    claimed += mail.length;
  }
  const ms = performance.now() - t0;
  if (claimed !== n) throw new Error(`claimed ${claimed} of ${n} messages`);
  return ms;
}

async function queueScaling(): Promise<Result[]> {
  const home = tempDir("atomic-bench-q-");
  try {
    const journal = await SqliteJournal.open(join(home, "atomic.db"), { durability: "normal" });
    const raw = new RawCommits(join(home, "raw.db"), "normal");
    try {
      const small: number[] = [];
      const large: number[] = [];
      const deep: number[] = [];
      const rawMs: number[] = [];
      await queueAndSettle(await runWithHistory(journal, 2_000, 200), 1_000); // warm-up
      for (let r = 0; r < REPS; r++) {
        small.push(await queueAndSettle(await runWithHistory(journal, 2_000, 200), 5_000));
        large.push(await queueAndSettle(await runWithHistory(journal, 2_000, 200), 20_000));
        deep.push(await queueAndSettle(await runWithHistory(journal, 20_000, 2_000), 5_000));
        rawMs.push(raw.commitRows(5_000));
      }
      const ratio = median(large) / median(small);
      const historyRatio = median(deep) / median(small);
      const perMessageUs = (median(small) / 5_000) * 1000;
      const rawUs = (median(rawMs) / 5_000) * 1000;
      return [
        {
          bench: "intercom",
          label: "queue + settle 20,000 messages for future stages vs 5,000 (time ratio)",
          value: median(large),
          unit: "ms",
          baseline: { label: "the same for 5,000 messages", value: median(small), unit: "ms" },
          ratio: { value: ratio, meaning: "time(20,000) ÷ time(5,000); 4 is linear" },
          target: { text: `ratio <= ${SCALE_TARGET}`, ok: ratio <= SCALE_TARGET },
          notes: [
            `5,000: ${spread(small)}; 20,000: ${spread(large)}`,
            `5,000 messages in a run with 10x the history (20,000 events, 2,000 stages): ${spread(deep)}, ${fmt(historyRatio, 2)}x the small history (information)`,
            `per message (queue + settle): ${fmt(perMessageUs, 1)} µs; a raw single-row commit: ${fmt(rawUs, 1)} µs (${fmt(perMessageUs / rawUs, 2)}x; information)`,
            "each message: one transaction (dedup, limit, stage lookup by path); each stage start: one transaction for its 50",
          ],
        },
      ];
    } finally {
      raw.close();
      await journal.close();
    }
  } finally {
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "intercom",
  title: "broker round trips vs a raw NDJSON echo; queuing 5,000 vs 20,000 messages for future stages",
  async run() {
    return [...(await roundTrips()), ...(await queueScaling())];
  },
};

export default bench;
