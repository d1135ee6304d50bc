/**
 * Worker hosts on a network of their own (test/helpers/fleet.ts: a network
 * namespace per machine where this machine allows them, else loopback
 * behind relays): 300 shell and 20 agent stages across three hosts with the
 * root on a fourth machine, each run exactly once (side effects counted), and a
 * host cut off from Postgres for longer than its lease while it runs a
 * stage. The cut-off host stops its own stage once its lease deadline
 * passes, another host runs it, exactly one result is applied, and when the
 * network heals the cut-off host's late commit is refused and it goes on
 * claiming as before; with traces on at the root, its next stage joins the
 * run's trace (its span a child of the run's, its TRACEPARENT that span).
 */

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, waitUntil } from "../helpers/atomic.ts";
import { makeFleet, type Fleet, type FleetHost } from "../helpers/fleet.ts";
import { startFakeOpenAI, text, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { traceIdOf } from "../../src/engine/tracing/trace-ids.ts";
import { counts, FIXTURES, marks } from "./support.ts";

const LEASE = 3_000;

let fleet: Fleet;
let server: FakeOpenAI;
beforeAll(async () => {
  fleet = await makeFleet({
    hosts: 4,
    hostIds: ["root", "a", "b", "c"],
    // The server notices a cut-off host's connections in seconds (its transactions' locks go with them).
    postgresConf: ["tcp_keepalives_idle = 1", "tcp_keepalives_interval = 1", "tcp_keepalives_count = 2", "tcp_user_timeout = 3000"],
  });
  // The model provider listens where every machine of the fleet reaches it (the bridge; 127.0.0.1 on loopback).
  server = await startFakeOpenAI((req) => text(`done: ${req.body.messages.find((m) => m.role === "user")?.content ?? ""}`), {
    hostname: new URL(fleet.postgresUrl).hostname,
  });
}, 60_000);
afterAll(async () => {
  await server?.close();
  await fleet?.destroy();
}, 60_000);

const agentEnv = () => ({ OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url });

function worker(host: FleetHost, extra: string[] = []) {
  const proc = host.spawnAtomic(["worker", "--host-id", host.id, "--slots", "4", "--work-lease-ms", String(LEASE), "--workdir", host.workdir, ...extra], {
    env: { ATOMIC_JOURNAL: host.postgresUrl, ...agentEnv() },
  });
  const log = lineWatcher(proc.stderr);
  void new Response(proc.stdout).text();
  return { proc, log };
}

function run(host: FleetHost, wf: string, inputs: string[], env: Record<string, string> = {}) {
  const proc = host.spawnAtomic(["run", join(FIXTURES, wf), "--workers", "0", "--json", "--work-lease-ms", String(LEASE), ...inputs.flatMap((i) => ["--input", i])], {
    env: { ATOMIC_JOURNAL: host.postgresUrl, ...agentEnv(), ...env },
  });
  const out = lineWatcher(proc.stdout);
  const err = lineWatcher(proc.stderr);
  return { proc, out, err, result: async () => (await proc.exited, out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result")) };
}

function sleeping(host: FleetHost): number[] {
  return host.processes().filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, "utf8").startsWith("sleep");
    } catch {
      return false;
    }
  });
}

describe(`worker hosts on a network of their own`, () => {
  test("three worker hosts and a root without workers on a fourth machine: 300 shell and 20 agent stages run exactly once each", async () => {
    const [root, ...hosts] = fleet.hosts as [FleetHost, FleetHost, FleetHost, FleetHost];
    const workers = hosts.map((h) => worker(h));
    await Promise.all(workers.map((w) => w.log.waitFor(/worker host ready/)));
    const file = join(fleet.dir, "fanout-marks");
    const r = run(root, "fleet.ts", ["shells=300", "agents=20", `marks=${file}`]);
    const result = await r.result();
    expect(result?.status).toBe("completed");
    expect(result.outputs.length).toBe(320);
    expect(result.outputs.slice(0, 300).map((x: string) => x.split(" ")[0])).toEqual(Array.from({ length: 300 }, (_, i) => `out-s${i}`));
    expect(result.outputs[300]).toBe("done: say a0");
    // Side effects: each shell stage ran once, on one of the three hosts (all of them took some).
    const seen = counts(marks(file).map((l) => l.split(" ")[0]!));
    expect(seen.size).toBe(300);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect(new Set(marks(file).map((l) => l.split(" ")[1]))).toEqual(new Set(["a", "b", "c"]));
    // Each agent stage asked the model once (its first request carries its prompt).
    const prompts = counts(server.requests.map((q) => q.body.messages.find((m) => m.role === "user")?.content ?? "").filter((c) => /^say a\d+$/.test(c)));
    expect(prompts.size).toBe(20);
    expect([...prompts.values()].every((n) => n === 1)).toBe(true);
    for (const w of workers) w.proc.kill("SIGINT");
    await Promise.all(workers.map((w) => w.proc.exited));
  }, 180_000);

  test("a host cut off for longer than its lease stops its own stage; another host runs it; after the heal one result stands", async () => {
    const [root, a, b] = fleet.hosts as [FleetHost, FleetHost, FleetHost];
    const file = join(fleet.dir, "partition-marks");
    const wa = worker(a);
    await wa.log.waitFor(/worker host ready/);
    const r = run(root, "one.ts", [`marks=${file}`, "seconds=8"]);
    await waitUntil(() => marks(file).includes("started a"), 60_000, "the stage running on host a");
    a.partition();
    // Cut off, host a stops the stage itself once its lease deadline passes (its network is still down).
    await waitUntil(() => sleeping(a).length === 0, 30_000, "host a to stop its own stage");
    expect(a.partitioned).toBe(true);
    // Meanwhile the item's lease expired: host b takes it over.
    const wb = worker(b);
    await waitUntil(() => marks(file).includes("started b"), 60_000, "the stage running again on host b");
    a.heal();
    const result = await r.result();
    expect(result?.status).toBe("completed");
    expect(result.outputs).toBe("done-by b");
    // Host a never finished its copy, host b did: one result applied.
    expect(marks(file).filter((l) => l.startsWith("ended"))).toEqual(["ended b"]);
    // Healed, host a claims again: a second run's stage may go to either host and completes.
    wb.proc.kill("SIGTERM");
    await wb.proc.exited;
    // With traces on at the root (a receiver on the fleet's network): the stage on host a joins the run's trace,
    // its span a child of the run's, and its process there got that span as TRACEPARENT.
    const otlp = await startOtlpReceiver(new URL(fleet.postgresUrl).hostname);
    try {
      const afterHeal = join(fleet.dir, "after-heal");
      const again = run(root, "one.ts", [`marks=${afterHeal}`, "seconds=0"], { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url });
      const second = await again.result();
      expect(second?.status).toBe("completed");
      expect(second.outputs).toBe("done-by a");
      // The run has exited, its spans flushed.
      const runSpan = otlp.spans.items.find((x) => x.name === "invoke_workflow fleet-one");
      const stageSpan = otlp.spans.items.find((x) => x.name === "shell only");
      expect(runSpan?.traceId).toBe(traceIdOf(second.runId));
      expect([stageSpan?.traceId, stageSpan?.parentSpanId]).toEqual([runSpan!.traceId, runSpan!.spanId]);
      expect(marks(afterHeal)).toContain(`traceparent a 00-${runSpan!.traceId}-${stageSpan!.spanId}-01`);
    } finally {
      await otlp.close();
    }
    wa.proc.kill("SIGTERM");
    await wa.proc.exited;
  }, 180_000);
});
