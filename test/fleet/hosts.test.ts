/**
 * Worker hosts end to end: `atomic worker` processes (the real binary)
 * sharing one Postgres journal with a root that has no workers of its own
 * (`--workers 0`), or has some. Side effects are counted (each stage
 * execution appends a line), results read back from the run. The tests
 * run concurrently (test/helpers/concurrent.ts), each with a database and
 * host ids of its own: most of their time is spent waiting on the hosts.
 * Each test's hosts stop when it ends (support.ts concurrentHostTest), not
 * when the file's last test does: an idle host polls its journal.
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, untilEvent, waitUntil } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { expectOneSentenceError } from "../e2e/support.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { concurrentTest, whenIdle } from "../helpers/concurrent.ts";
import { concurrentHostTest, FIXTURES, marks, stopHosts, type TestHost } from "./support.ts";
import { parseMetrics } from "../observability/support.ts";
import { POOL_PROTOCOL_VERSION } from "../../src/pool/protocol/common.ts";

const WF = join(FIXTURES, "fleet.ts");

let server: FakeOpenAI;
beforeAll(async () => {
  await testPostgres();
  server = await startFakeOpenAI((req) => text(`done: ${req.body.messages.find((m) => m.role === "user")?.content ?? ""}`));
});
afterAll(async () => {
  await server.close();
});
afterEach(
  whenIdle(async () => {
    await stopHosts();
    await killSpawned();
    removeTempDirs();
  }),
);

const agentEnv = () => ({ OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url });

async function journalUrl(): Promise<string> {
  return freshDatabase("fleet");
}

concurrentHostTest("worker hosts > a stage's queue: only a host serving it runs it; the root's own workers take the default queue", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const file = join(dir, "marks");
  await start({ url, id: "cpu", slots: 2 });
  await start({ url, id: "gpu", slots: 2, queues: ["gpu"] });
  const r = await runAtomic(["run", WF, "--journal", url, "--workers", "0", "--input", "shells=6", "--input", "queue=gpu", "--input", `marks=${file}`], {
    home: join(dir, "root"),
  });
  expect(r.code).toBe(0);
  expect(new Set(marks(file).map((l) => l.split(" ")[1]))).toEqual(new Set(["gpu"]));
  // With workers of its own, the root's pool and the cpu host share the default queue; the gpu host takes none.
  const file2 = join(dir, "marks2");
  const r2 = await runAtomic(["run", WF, "--journal", url, "--workers", "2", "--input", "shells=8", "--input", `marks=${file2}`], { home: join(dir, "root2") });
  expect(r2.code).toBe(0);
  expect(marks(file2).length).toBe(8);
  expect(marks(file2).some((l) => l.endsWith(" gpu"))).toBe(false);
}, 90_000);

concurrentHostTest("worker hosts > /metrics of atomic serve on the shared journal: each live host's slots, busy and free, by host id; a stopped host's leave", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  await start({ url, id: "slots-two", slots: 2 });
  const three = await start({ url, id: "slots-three", slots: 3 });
  const serve = spawnAtomic(["serve", "--port", "0"], { home: join(dir, "serve"), env: { ATOMIC_JOURNAL: url } });
  try {
    const login = new URL((await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim());
    const slots = async () => {
      const res = await fetch(`${login.origin}/metrics`, { headers: { authorization: `Bearer ${login.searchParams.get("token")}` } });
      expect(res.status).toBe(200);
      return parseMetrics(await res.text()).filter((s) => s.name === "atomic_worker_slots").map((s) => `${s.labels.host} ${s.labels.state} ${s.value}`).sort();
    };
    expect(await slots()).toEqual(["slots-three busy 0", "slots-three free 3", "slots-two busy 0", "slots-two free 2"]);
    three.proc.kill("SIGTERM");
    expect(await three.exited).toBe(0);
    expect(await slots()).toEqual(["slots-two busy 0", "slots-two free 2"]);
  } finally {
    serve.kill("SIGINT");
    await serve.exited;
  }
}, 60_000);

concurrentHostTest("worker hosts > a stage's cwd resolves on the host: relative to --workdir; an absolute one missing there fails naming the host", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const host = await start({ url, id: "far", slots: 1 });
  mkdirSync(join(host.workdir, "sub"));
  const ok = await runAtomic(["run", WF, "--journal", url, "--workers", "0", "--json", "--input", "shells=1", "--input", "cwd=sub", "--input", `marks=${join(dir, "m")}`], {
    home: join(dir, "root"),
  });
  expect(ok.code).toBe(0);
  expect(ok.stdout).toContain(`out-s0 ${join(host.workdir, "sub")}`);
  const missing = join(dir, "not-on-that-host");
  const bad = await runAtomic(["run", WF, "--journal", url, "--workers", "0", "--input", "shells=1", "--input", `cwd=${missing}`, "--input", `marks=${join(dir, "m")}`], {
    home: join(dir, "root2"),
  });
  expect(bad.code).toBe(1);
  expect(bad.stderr).toContain(`its cwd ${missing} does not exist on host far`);
  expect(bad.stderr).not.toContain("    at ");
}, 60_000);

concurrentTest("worker hosts > --workers 0 without a shared journal is refused in one sentence", async () => {
  const dir = makeTempDir("atomic-fleet-");
  const r = await runAtomic(["run", WF, "--workers", "0", "--input", `marks=${join(dir, "m")}`], { home: join(dir, "root") });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain("--workers 0 leaves stages to worker hosts, which need a shared Postgres journal");
  const w = await runAtomic(["worker"], { home: join(dir, "w"), env: { ATOMIC_JOURNAL: undefined } });
  expect(w.code).toBe(2);
  expect(w.stderr).toContain("atomic worker runs stages from a shared Postgres journal");
}, 30_000);

concurrentTest("worker hosts > bad worker flags and a bad queue name are one sentence and a hint; nothing is written", async () => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const cases: [string[], RegExp][] = [
    [["--slots", "0"], /^--slots must be a whole number from 1 to 256, got "0"$/],
    [["--slots", "many"], /^--slots must be a whole number from 1 to 256, got "many"$/],
    [["--queues", " , "], /^--queues needs at least one queue name$/],
    [["--queues", "default,gpu one"], /^--queues: "gpu one" is not a queue name$/],
    [["--workdir", join(dir, "missing")], /^--workdir .*missing is not a directory$/],
    [["--grace", "soon"], /^--grace "soon" is not an age$/],
    [["--work-lease-ms", "100"], /^--work-lease-ms must be a whole number from 2000 to 86400000, got "100"$/],
  ];
  for (const [flags, sentence] of cases) {
    const home = join(dir, `w-${flags.join("-").replace(/[^a-z0-9-]/gi, "")}`);
    const r = await runAtomic(["worker", ...flags], { home, env: { ATOMIC_JOURNAL: url } });
    expect(r.code).toBe(2);
    const { message, hint } = expectOneSentenceError(r.stderr);
    expect(message.replace(/\.$/, "")).toMatch(sentence);
    expect(hint).toBeDefined();
    expect(existsSync(home)).toBe(false);
  }
  // No host registered itself (the journal was never opened).
  const db = new URL(url).pathname.slice(1);
  expect(await adminQueryIn(db, ["select count(*)::int as n from pg_tables where schemaname = 'atomic' and tablename = 'worker_hosts'"])).toEqual([{ n: 0 }]);
  // A stage naming a queue that cannot be one: the run fails in one sentence naming the stage, before anything is enqueued.
  const bad = await runAtomic(["run", WF, "--journal", url, "--workers", "0", "--input", "shells=1", "--input", "queue=gpu one", "--input", `marks=${join(dir, "m")}`], {
    home: join(dir, "root"),
  });
  expect(bad.code).toBe(1);
  expect(bad.stderr).toContain('stage "s0": queue "gpu one" is not a queue name');
  expect(bad.stderr).not.toContain("    at ");
  expect(await adminQueryIn(db, ["select count(*)::int as n from atomic.work_items"])).toEqual([{ n: 0 }]);
}, 60_000);

/** The longest a test here waits for a stage to reach a host: the root's start, the claim and the stage's start, beside the rest of the suite. */
const STAGE_ON_HOST_MS = 60_000;

/**
 * The start marks of the fleet fixture's stages (its `started` input) once there are `n`: a mark stays, where a
 * stage process seen running may be gone by the time a busy test looks. Fails at once if the run ends first;
 * either way with the marks, the hosts' logs and the end of the run's stderr (all a failure in CI's log shows).
 */
async function untilStarted(started: string, n: number, run: { proc: { exited: Promise<number> }; said: ReturnType<typeof lineWatcher> }, hosts: readonly TestHost[]): Promise<string[]> {
  const describe = () =>
    [
      `start marks: ${JSON.stringify(marks(started))}`,
      ...hosts.map((h) => `host ${h.id}'s log:\n${h.log.lines.slice(-20).join("\n")}`),
      `the run's stderr:\n${run.said.lines.slice(-20).join("\n")}`,
    ].join("\n");
  const event = waitUntil(() => (marks(started).length >= n ? marks(started) : undefined), STAGE_ON_HOST_MS, `${n} stage start(s)`) as Promise<string[]>;
  return untilEvent(event, `${n} stage start(s) on a host`, { proc: run.proc, limitMs: STAGE_ON_HOST_MS, describe });
}

concurrentHostTest("worker hosts > SIGTERM drains: the running stage finishes, nothing new is claimed; with the grace over, the stage moves to another host", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const [file, started, gate] = [join(dir, "marks"), join(dir, "started"), join(dir, "gate")];
  const first = await start({ url, id: "first", slots: 1, grace: "30s" });
  const run = spawnAtomic(["run", WF, "--journal", url, "--workers", "0", "--input", "shells=2", "--input", `started=${started}`, "--input", `gate=${gate}`, "--input", `marks=${file}`], {
    home: join(dir, "root"),
  });
  // One stage runs on the host's one slot, held at its gate: the SIGTERM below comes while it runs, however busy the machine.
  expect(await untilStarted(started, 1, { proc: run, said: lineWatcher(run.stderr) }, [first])).toEqual([expect.stringMatching(/^s\d first$/)]);
  expect(marks(file)).toEqual([]);
  first.proc.kill("SIGTERM");
  await first.log.waitFor(/draining: no new stages/, STAGE_ON_HOST_MS);
  writeFileSync(gate, "");
  expect(await first.exited).toBe(0);
  // The stage it ran finished there (within its grace); the other was not claimed and waits for a host.
  expect(marks(file)).toEqual([expect.stringMatching(/^s\d first$/)]);
  expect(marks(started)).toHaveLength(1);
  const second = await start({ url, id: "second", slots: 1, grace: "0.2s" });
  expect(await run.exited).toBe(0);
  expect(marks(file).length).toBe(2);
  expect(marks(file)[1]).toEndWith(" second");
  void second;
}, 90_000);

concurrentHostTest("worker hosts > a grace that runs out interrupts the stage and releases it to another host", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const [file, started, gate] = [join(dir, "marks"), join(dir, "started"), join(dir, "gate")];
  const quick = await start({ url, id: "quick", slots: 1, grace: "0.3s" });
  const run = spawnAtomic(["run", WF, "--journal", url, "--workers", "0", "--input", "shells=1", "--input", `started=${started}`, "--input", `gate=${gate}`, "--input", `marks=${file}`], {
    home: join(dir, "root"),
  });
  // The stage holds at its gate: only the grace's end stops it on this host.
  expect(await untilStarted(started, 1, { proc: run, said: lineWatcher(run.stderr) }, [quick])).toEqual(["s0 quick"]);
  quick.proc.kill("SIGTERM");
  expect(await quick.exited).toBe(0);
  expect(quick.log.text()).toContain("the drain's grace is over");
  // The interrupted stage's processes ended with the host: none is left to mark once the gate opens.
  await waitUntil(() => quick.processes().length === 0, STAGE_ON_HOST_MS, "the processes of host quick to end");
  await start({ url, id: "other", slots: 1 });
  writeFileSync(gate, "");
  expect(await run.exited).toBe(0);
  expect(marks(started)).toEqual(["s0 quick", "s0 other"]);
  expect(marks(file)).toEqual(["s0 other"]);
}, 90_000);

concurrentHostTest("worker hosts > a host refuses work of another pool protocol, says so, and leaves it queued", async (start) => {
  const url = await journalUrl();
  const host = await start({ url, id: "old", slots: 1 });
  const db = new URL(url).pathname.slice(1);
  // An item a root of another version enqueued (its lease is live: only the protocol keeps the host off it).
  await adminQueryIn(db, [
    `insert into atomic.leases (run_id, holder_id, host, pid, pid_start, epoch, renewed_at, timeout_ms, released)
       select 'root_skew', 'h', 'x', 1, 0, 1, (extract(epoch from now()) * 1000)::bigint, 600000, 0`,
    `insert into atomic.work_items (id, root_id, run_id, root_epoch, stage_key, attempt, descriptor, state, generation, epoch, ready_at, created_at, updated_at)
       values ('work_skew', 'root_skew', 'root_skew', 1, '0', 1, '{"protocol": 999, "runner": "shell"}', 'ready', 1, 0, 0, 0, 0)`,
  ]).catch((err) => {
    throw new Error(`seeding the skewed item: ${err}`);
  });
  await host.log.waitFor(/refusing stages of pool protocol 999/, 20_000);
  const rows = await adminQueryIn(db, ["select state from atomic.work_items where id = 'work_skew'"]);
  expect(rows[0]).toEqual({ state: "ready" });
}, 60_000);

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

concurrentHostTest("worker hosts: a schema migrated past what a host knows > a running host that sees a newer schema claims nothing, says so, and claims again once it is its own", async (start) => {
  const url = await journalUrl();
  const host = await start({ url, id: "older", slots: 1 });
  const db = new URL(url).pathname.slice(1);
  const current = ((await adminQueryIn(db, ["select value from atomic.meta where key = 'schema_version'"]))[0] as { value: string }).value;
  await adminQueryIn(db, ["update atomic.meta set value = '999' where key = 'schema_version'"]);
  await host.log.waitFor(/refusing all stages: the journal's schema is version 999, newer than version \d+ that this worker/, 20_000);
  // A stage a (newer) root enqueued meanwhile stays queued.
  await adminQueryIn(db, [
    `insert into atomic.leases (run_id, holder_id, host, pid, pid_start, epoch, renewed_at, timeout_ms, released)
       select 'root_new', 'h', 'x', 1, 0, 1, (extract(epoch from now()) * 1000)::bigint, 600000, 0`,
    `insert into atomic.work_items (id, root_id, run_id, root_epoch, stage_key, attempt, descriptor, state, generation, epoch, ready_at, created_at, updated_at)
       values ('work_new', 'root_new', 'root_new', 1, '0', 1, '{"protocol": ${POOL_PROTOCOL_VERSION}, "runner": "shell", "argv": ["true"]}', 'ready', 1, 0, 0, 0, 0)`,
  ]);
  // Several claim polls (one a second, beside its heartbeats): the host heartbeat 3 s after the insert, or later.
  const inserted = Date.now();
  const beatAt = async () => Number((await adminQueryIn(db, ["select heartbeat_at from atomic.worker_hosts where host_id = 'older'"]))[0]?.heartbeat_at ?? 0);
  await waitUntil(async () => (await beatAt()) >= inserted + 3_000, 30_000, "a heartbeat of the host 3 s after the insert");
  expect(await adminQueryIn(db, ["select state from atomic.work_items where id = 'work_new'"])).toEqual([{ state: "ready" }]);
  await adminQueryIn(db, [`update atomic.meta set value = '${current}' where key = 'schema_version'`]);
  await waitUntil(async () => (await adminQueryIn(db, ["select state from atomic.work_items where id = 'work_new'"]))[0]?.state !== "ready", 20_000, "the host to claim again");
}, 60_000);

/** Statements in another database of the test cluster, as its superuser (the last one's rows). */
async function adminQueryIn(database: string, statements: string[]): Promise<Record<string, unknown>[]> {
  const pg = (await import("pg")).default;
  const url = new URL(await testPostgres());
  url.pathname = `/${database}`;
  const c = new pg.Client({ connectionString: url.toString() });
  await c.connect();
  try {
    let rows: Record<string, unknown>[] = [];
    for (const s of statements) rows = (await c.query(s)).rows;
    return rows;
  } finally {
    await c.end();
  }
}

concurrentHostTest("worker hosts: messages and control from any machine > a steer reaches a stage running on a host; a message queued for a later stage reaches it there", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const host = await start({ url, id: "mail", slots: 1 });
  const home = join(dir, "root");
  const run = spawnAtomic(["run", join(FIXTURES, "mail.ts"), "--journal", url, "--workers", "0", "--json"], { home });
  const out = lineWatcher(run.stdout);
  const started = await out.waitFor(/"type":"step_started".*"name":"live"|"name":"live".*"type":"step_started"/, 30_000);
  const runId = JSON.parse(started).runId as string;
  await waitUntil(() => host.processes().length > 2, 60_000, "the live stage running on the host");
  // From another machine's point of view: another home, the same journal.
  const other = join(dir, "elsewhere");
  const queued = await runAtomic(["send", runId, "later", "for later", "--journal", url], { home: other });
  expect(queued.code).toBe(0);
  const live = await runAtomic(["send", runId, "live", "hello host", "--journal", url], { home: other });
  expect(live.code).toBe(0);
  expect(await run.exited).toBe(0);
  const result = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
  expect(result.outputs).toEqual(["got:hello host", "got:for later"]);
}, 90_000);

concurrentHostTest("worker hosts: messages and control from any machine > atomic cancel from another machine stops a stage running on a host", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const file = join(dir, "marks");
  const host = await start({ url, id: "busy", slots: 1 });
  const run = spawnAtomic(["run", join(FIXTURES, "long.ts"), "--journal", url, "--workers", "0", "--json", "--input", `marks=${file}`], { home: join(dir, "root") });
  const out = lineWatcher(run.stdout);
  const runId = JSON.parse(await out.waitFor(/"runId"/, 30_000)).runId as string;
  await waitUntil(() => marks(file).includes("long-started"), 30_000, "the long stage running");
  const sleeping = () => host.processes().filter((p) => cmdline(p).includes("sleep 30"));
  expect(sleeping().length).toBeGreaterThan(0);
  const c = await runAtomic(["cancel", runId, "--journal", url], { home: join(dir, "elsewhere") });
  expect(c.code).toBe(0);
  expect(await run.exited).toBe(4);
  // The stage's processes on the host ended, and nothing after it ran.
  await waitUntil(() => sleeping().length === 0, 15_000, "the stage's processes on the host to end");
  expect(marks(file)).toEqual(["long-started"]);
}, 90_000);

concurrentHostTest("worker hosts: messages and control from any machine > pause holds a run's next stage off every host; unpause lets it run", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const file = join(dir, "marks");
  await start({ url, id: "p", slots: 1 });
  const gate = join(dir, "gate");
  const run = spawnAtomic(["run", join(FIXTURES, "long.ts"), "--journal", url, "--workers", "0", "--json", "--input", `marks=${file}`, "--input", `gate=${gate}`], {
    home: join(dir, "root"),
  });
  const out = lineWatcher(run.stdout);
  const runId = JSON.parse(await out.waitFor(/"runId"/, 30_000)).runId as string;
  await waitUntil(() => marks(file).includes("long-started"), 30_000, "the long stage running");
  const other = join(dir, "elsewhere");
  expect((await runAtomic(["pause", runId, "--journal", url], { home: other })).code).toBe(0);
  writeFileSync(gate, "");
  await waitUntil(() => marks(file).includes("long-ended"), 30_000, "the running stage to finish (pause lets it)");
  // Paused: the next stage reached its start and is held there.
  await out.waitFor(/"type":"step_waiting".*"name":"next".*"reason":"the run is paused"/, 30_000);
  expect(marks(file)).toEqual(["long-started", "long-ended"]);
  expect((await runAtomic(["unpause", runId, "--journal", url], { home: other })).code).toBe(0);
  expect(await run.exited).toBe(0);
  expect(marks(file)).toEqual(["long-started", "long-ended", "next"]);
}, 90_000);

concurrentHostTest("worker hosts: what a local stage shows, a remote one shows > live output reaches the root while the stage runs on a host; usage and cost add up as on a local run", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  await start({ url, id: "talker", slots: 3, env: agentEnv() });
  const gate = join(dir, "gate");
  const home = join(dir, "root");
  const run = spawnAtomic(["run", join(FIXTURES, "chatty.ts"), "--journal", url, "--workers", "0", "--json", "--input", `gate=${gate}`], { home, env: agentEnv() });
  const out = lineWatcher(run.stdout);
  // The first line arrives while the stage still runs (it waits for the gate).
  await out.waitFor(/"type":"stage_output".*tick-one|tick-one.*"type":"stage_output"/, 30_000);
  expect(out.text()).not.toContain("tick-two");
  writeFileSync(gate, "");
  expect(await run.exited).toBe(0);
  const remote = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
  expect(remote.outputs[0]).toBe("tick-one\ntick-two");
  // The same workflow with the root's own workers: the same usage, to the token and cent.
  const local = await runAtomic(["run", join(FIXTURES, "chatty.ts"), "--journal", url, "--workers", "2", "--json", "--input", `gate=${gate}`], {
    home: join(dir, "root2"),
    env: agentEnv(),
  });
  expect(local.code).toBe(0);
  const localId = local.stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((e) => e.type === "result").runId;
  const usageOf = async (id: string, h: string) => {
    const r = await runAtomic(["runs", "--json", "--journal", url], { home: h });
    const row = r.stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((x) => x.id === id);
    return row.usage as Record<string, number>;
  };
  const a = await usageOf(remote.runId, home);
  const b = await usageOf(localId, join(dir, "root2"));
  expect(a).toEqual(b);
  // Two agent stages of the fake model, 10 prompt and 5 completion tokens each.
  expect(a.inputTokens ?? a.input).toBe(20);
}, 90_000);

concurrentHostTest("worker hosts: stage files > atomic logs and logs --follow on the root's machine read a remote stage's output from the artifact store", async (start) => {
  const url = await journalUrl();
  const dir = makeTempDir("atomic-fleet-");
  const host = await start({ url, id: "files", slots: 3, env: agentEnv() });
  const gate = join(dir, "gate");
  const home = join(dir, "root");
  const run = spawnAtomic(["run", join(FIXTURES, "chatty.ts"), "--journal", url, "--workers", "0", "--json", "--input", `gate=${gate}`], { home, env: agentEnv() });
  const out = lineWatcher(run.stdout);
  const runId = JSON.parse(await out.waitFor(/"runId"/, 30_000)).runId as string;
  await out.waitFor(/tick-one/, 30_000);
  // Following from a third machine while the stage still runs on the host.
  const follow = spawnAtomic(["logs", runId, "--stage", "talk", "--follow", "--journal", url], { home: join(dir, "third") });
  const followed = lineWatcher(follow.stdout);
  await followed.waitFor(/tick-one/, 30_000);
  writeFileSync(gate, "");
  await followed.waitFor(/tick-two/, 30_000);
  expect(await run.exited).toBe(0);
  expect(await follow.exited).toBe(0);
  // The files exist only on the host; logs on the root's machine reads them from the store.
  const logs = await runAtomic(["logs", runId, "--stage", "talk", "--journal", url], { home });
  expect(logs.code).toBe(0);
  expect(logs.stdout).toBe("tick-one\ntick-two\n");
  expect(logs.stderr).toBe("");
  void host;
}, 90_000);
