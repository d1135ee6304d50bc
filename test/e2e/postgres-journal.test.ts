/**
 * The Postgres journal through the real binary (`--journal postgres://…` or
 * ATOMIC_JOURNAL), on a throw-away cluster the tests start
 * (test/helpers/postgres.ts), a database per test:
 * - a workflow with pooled stages runs to completion; `runs`, `show` and
 *   `logs` read it; SIGKILLed mid-run it resumes on Postgres without
 *   re-running a recorded step; the journal's password is in no process's
 *   argv and reaches no stage;
 * - send, inbox, ask/answer, pause/unpause and cancel work on it;
 * - doctor names the journal without its password; serve from another home
 *   shows the run; logs says when a stage's files are not on this machine;
 * - a run killed on one host is refused to another host (another home and
 *   host id on the same journal) until its lease expires, then resumed there.
 * - gc deletes a finished run and keeps a live one (--force too), also
 *   one whose lease is live by the database's clock when gc's host's clock
 *   runs two hours ahead (libfaketime);
 * - schedule add/list/show/trigger, and serve: the service lease on the
 *   journal (a second serve, another home, waits on standby and takes over).
 * Bad input (malformed URL, unknown host, refused connection, wrong
 * password, missing database, no permission for the schema, a newer
 * schema, a server that is not Postgres) is in postgres-bad-input.test.ts.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { POSTGRES_URL_ENV, freshDatabase } from "../helpers/postgres.ts";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { openJournal } from "../../src/journal/open.ts";
import { newRunId, type HolderId } from "../../src/shared/ids.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir, parseNdjson, startedRunId } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const STEPS = fixture("pg-steps.ts");
const FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const INTERCOM = join(import.meta.dir, "..", "intercom", "fixtures");

interface Setup {
  home: string;
  out: string;
  url: string;
  password: string;
  env: Record<string, string>;
}

async function setup(extra: Record<string, string> = {}): Promise<Setup> {
  const url = await freshDatabase("e2e");
  const home = join(makeTempDir("atomic-pg-e2e-"), "home");
  const out = join(home, "..", "out");
  mkdirSync(out);
  // The test cluster's admin URL (with its password) is in this process's environment for the helpers; the
  // binary has no use for it, and the stages must be seen to receive no password.
  const env = { ATOMIC_JOURNAL: url, OUT_DIR: out, [POSTGRES_URL_ENV]: undefined as unknown as string, ...extra };
  return { home, out, url, password: decodeURIComponent(new URL(url).password), env };
}

const cli = (s: Setup, args: string[]) => runAtomic(args, { home: s.home, env: s.env });

function effects(s: Setup): string[] {
  const file = join(s.out, "effects.txt");
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
}

/** The argv of every live process of this home (root, coordinator, workers, broker). */
function argvsOf(home: string): string[] {
  return processesWithHome(home).flatMap((pid) => {
    try {
      return [readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ")];
    } catch {
      return [];
    }
  });
}

e2eTest(
  "postgres: pooled stages run to completion; runs/show/logs read it; a SIGKILLed run resumes without re-running recorded steps; the password is in no argv and no stage",
  async () => {
    const s = await setup({ STEPS: "30", DELAY_MS: "60" });
    const proc = spawnAtomic(["run", STEPS], { home: s.home, env: s.env });
    const out = lineWatcher(proc.stdout);
    const id = startedRunId(await out.waitFor(/^started run /));
    await waitUntil(() => effects(s).length >= 8, 60_000, "eight tool steps");
    const argvs = argvsOf(s.home);
    expect(argvs.length).toBeGreaterThanOrEqual(2); // the root and its pool coordinator at least
    for (const argv of argvs) expect(argv).not.toContain(s.password);
    const stageEnv = readFileSync(join(s.out, "env.txt"), "utf8");
    expect(stageEnv).not.toContain(s.password);
    expect(stageEnv).not.toContain("ATOMIC_JOURNAL=");

    proc.kill("SIGKILL");
    await proc.exited;
    await waitUntil(() => processesWithHome(s.home).length === 0, 20_000, "the run's processes to end");

    const shown = await cli(s, ["show", id, "--json"]);
    expect(shown.code).toBe(0);
    const report = JSON.parse(shown.stdout) as { status: string; steps: { kind: string; name: string; status: string; position: string }[] };
    expect(report.status).toBe("crashed");
    const recorded = report.steps.filter((x) => x.kind === "tool" && x.status === "completed").map((x) => `${id}:${x.position}`);
    expect(recorded.length).toBeGreaterThanOrEqual(7);
    expect(report.steps.filter((x) => x.kind === "stage" && x.status === "completed").map((x) => x.name).sort()).toEqual(["alpha", "beta", "gamma"]);

    const resumed = await cli(s, ["resume", id]);
    expect(resumed.stderr).toBe("");
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain('"total": 465');
    expect(resumed.stdout).toContain('"last": "done"');

    const counts = new Map<string, number>();
    for (const key of effects(s)) counts.set(key, (counts.get(key) ?? 0) + 1);
    expect(counts.size).toBe(30);
    for (const key of recorded) expect(counts.get(key)).toBe(1); // recorded before the kill: never ran again
    expect([...counts.values()].filter((n) => n > 1).length).toBeLessThanOrEqual(1); // only the step in flight at the kill

    const runs = parseNdjson((await cli(s, ["runs", "--json"])).stdout);
    expect(runs.map((r) => [r.id, r.status])).toEqual([[id, "completed"]]);
    const logs = await cli(s, ["logs", id, "--stage", "beta"]);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toContain("beta");
    const table = await cli(s, ["show", id]);
    expect(table.stdout).toMatch(/^status\s+completed$/m);
  },
  120_000,
);

e2eTest("postgres: send and inbox reach a stage before and after it starts; a question is answered from another process", async () => {
  const gate = join(makeTempDir(), "gate");
  const s = await setup({ GATE_FILE: gate, ATOMIC_INTERCOM_IDLE_MS: "3000" });
  const proc = spawnAtomic(["run", join(INTERCOM, "mail.ts")], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  await out.waitFor(/stage gate started/);
  const sent = await cli(s, ["send", id, "reader", "hello there", "--json"]);
  expect(sent.code).toBe(0);
  expect(JSON.parse(sent.stdout)).toMatchObject({ deliveries: [{ stage: "reader", state: "queued", started: false }] });
  const box = JSON.parse((await cli(s, ["inbox", id, "--json"])).stdout) as { stages: { stage: string; messages: { state: string }[] }[] };
  expect(box.stages).toMatchObject([{ stage: "reader", messages: [{ state: "queued" }] }]);
  writeFileSync(gate, "");
  expect(await proc.exited).toBe(0);
  await out.waitFor(/"heard": "got:hello there"/);
  expect((await cli(s, ["inbox", id])).stdout).toMatch(/receipt-unverified\s+msg_\S+ .*hello there/); // a shell stage reads stdin without a receipt

  const asks = spawnAtomic(["run", join(INTERCOM, "asks.ts")], { home: s.home, env: s.env });
  const asked = lineWatcher(asks.stdout);
  const askId = startedRunId(await asked.waitFor(/^started run /));
  const qid = /question (q\w+)/.exec(await asked.waitFor(/question q\w+/))![1]!;
  const answered = await cli(s, ["answer", askId, qid, "yes"]);
  expect(answered.code).toBe(0);
  expect(await asks.exited).toBe(0);
  await asked.waitFor(/"answer": "yes"/);
  expect(readFileSync(join(s.out, "side.txt"), "utf8")).toBe("before\nafter\n");
});

e2eTest("postgres: pause, unpause and cancel reach the driver through the journal", async () => {
  const s = await setup({ E2E_DIR: makeTempDir(), E2E_SLEEP: "60" });
  const proc = spawnAtomic(["run", fixture("waits.ts")], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  await out.waitFor(/stage wait started/);
  expect((await cli(s, ["pause", id])).code).toBe(0);
  await waitUntil(async () => /^status\s+paused$/m.test((await cli(s, ["show", id])).stdout), 20_000, "the run to show paused");
  expect((await cli(s, ["unpause", id])).code).toBe(0);
  await waitUntil(async () => /^status\s+running$/m.test((await cli(s, ["show", id])).stdout), 20_000, "the run to show running");
  expect((await cli(s, ["cancel", id])).code).toBe(0);
  expect(await proc.exited).toBe(4);
  expect(parseNdjson((await cli(s, ["runs", "--json"])).stdout).map((r) => r.status)).toEqual(["cancelled"]);
});

e2eTest("postgres: --journal on the command line, the password from PGPASSWORD; doctor names the journal without it", async () => {
  const s = await setup();
  const u = new URL(s.url);
  u.password = "";
  const bare = u.toString();
  const env = { ATOMIC_JOURNAL: undefined as unknown as string, PGPASSWORD: s.password, OUT_DIR: s.out, STEPS: "2", DELAY_MS: "1" };
  const r = await runAtomic(["--journal", bare, "run", STEPS], { home: s.home, env });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const doctor = await runAtomic(["--journal", bare, "doctor", "--json"], { home: s.home, env });
  const report = JSON.parse(doctor.stdout) as { journal: { location: string; ok: boolean; detail: string } };
  expect(report.journal).toMatchObject({ ok: true, location: `postgres://postgres@${u.host}${u.pathname}` });
  expect(report.journal.detail).toMatch(/^Postgres 1\d\.\d+\b.*, schema atomic at version \d+$/);
  const text = await runAtomic(["doctor"], { home: s.home, env: { ...env, ATOMIC_JOURNAL: s.url } });
  expect(text.stdout).toContain(`journal    postgres://postgres@${u.host}${u.pathname} (Postgres`);
  expect(text.stdout + text.stderr).not.toContain(s.password);
});

e2eTest("postgres: serve, from another home on the same journal, lists and shows a run; the page holds no password", async () => {
  const s = await setup({ STEPS: "3", DELAY_MS: "1" });
  const r = await cli(s, ["run", STEPS]);
  expect(r.code).toBe(0);
  const id = startedRunId(r.stdout);
  // Another home (as on another machine): only the journal is shared.
  const other = join(makeTempDir(), "home");
  const proc = spawnAtomic(["serve", "--port", "0"], { home: other, env: { ATOMIC_JOURNAL: s.url } });
  const out = lineWatcher(proc.stdout);
  const login = (await out.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const m = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
  const auth = { headers: { authorization: `Bearer ${m[2]}` } };
  const runs = (await (await fetch(`${m[1]}api/runs`, auth)).json()) as { runs: { id: string; status: string }[] };
  expect(runs.runs.map((x) => [x.id, x.status])).toEqual([[id, "completed"]]);
  const detail = await (await fetch(`${m[1]}api/runs/${id}`, auth)).text();
  expect(detail).toContain('"total":6');
  const page = await (await fetch(m[1]!, auth)).text();
  expect(`${detail}${page}${out.text()}`).not.toContain(s.password);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);

  // A stage's files stay where it ran: from here (the files moved away, as on another machine) logs says so.
  const here = await runAtomic(["logs", id, "--stage", "beta"], { home: other, env: { ATOMIC_JOURNAL: s.url } });
  expect([here.code, here.stdout, here.stderr]).toEqual([0, "beta\n", ""]);
  renameSync(join(s.home, "artifacts"), join(s.home, "..", "artifacts-elsewhere"));
  const away = await runAtomic(["logs", id, "--stage", "beta"], { home: other, env: { ATOMIC_JOURNAL: s.url } });
  expect(away.code).toBe(0);
  expect(away.stdout).toBe("");
  // (nothing shipped them to the artifact store: the root's local pool ran them here)
  expect(away.stderr).toMatch(/^warning: the output of stage beta is not on this machine \(\S+\) nor in the artifact store \(postgres:\/\/\S+\): it stays on the machine that ran the stage, unless it was removed; run atomic logs there\n$/);
});

e2eTest("postgres: a run killed on one host is refused to another host while its lease lasts (no pid shortcut), then resumed there", async () => {
  const s = await setup({ STEPS: "20", DELAY_MS: "50" });
  // The lease outlasts what comes between the kill and the refused resume (the run's processes ending, another
  // atomic starting) on a loaded machine: 4 s once ran out there first (the suite's lanes run three processes at once).
  const proc = spawnAtomic(["--host-id", "host-a", "run", STEPS, "--lease-ms", "15000"], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  await waitUntil(() => effects(s).length >= 5, 60_000, "five tool steps");
  proc.kill("SIGKILL");
  await proc.exited;
  await waitUntil(() => processesWithHome(s.home).length === 0, 20_000, "the run's processes to end");
  // Another machine (its own home, its own host identity): the dead pid means nothing there.
  const other = join(makeTempDir(), "home");
  const refused = await runAtomic(["--host-id", "host-b", "resume", id, "--cwd", process.cwd()], { home: other, env: s.env });
  if (refused.code === 2) expect(refused.stderr).toMatch(new RegExp(`^error: run ${id} is being driven by another process \\(\\S+, pid \\d+ on host-a\\)\\.`));
  else throw new Error(`the resume on host-b was not refused (exit ${refused.code}): ${refused.stderr}`);
  // Once the lease has expired by the database's clock, host-b takes the run over and completes it.
  await waitUntil(async () => {
    const r = await runAtomic(["--host-id", "host-b", "resume", id, "--cwd", process.cwd()], { home: other, env: s.env });
    if (r.code === 2 && /being driven by another process/.test(r.stderr)) return false;
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('"total": 210');
    return true;
  }, 60_000, "the lease to expire and the resume on host-b to complete");
  const counts = new Map<string, number>();
  for (const key of effects(s)) counts.set(key, (counts.get(key) ?? 0) + 1);
  expect(counts.size).toBe(20);
  expect([...counts.values()].filter((n) => n > 1).length).toBeLessThanOrEqual(1);
}, 150_000);

interface GcJson {
  runs: number;
  rowsByTable: Record<string, number>;
  kept: string[];
  deleted: string[];
  storage?: { bytesBefore: number; bytesAfter: number; note?: string };
}

e2eTest("postgres: gc deletes a finished run with its rows and artifacts and keeps a live one, even with --force; the live run finishes", async () => {
  const s = await setup({ STEPS: "2", DELAY_MS: "1", E2E_DIR: makeTempDir(), E2E_SLEEP: "60" });
  const done = await cli(s, ["run", STEPS]);
  expect(done.code).toBe(0);
  const doneId = /atomic show (\S+)/.exec(done.stdout)![1]!;
  const proc = spawnAtomic(["run", fixture("waits.ts")], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const liveId = startedRunId(await out.waitFor(/^started run /));
  await out.waitFor(/stage wait started/);

  const gc = async (...args: string[]) => {
    const r = await cli(s, ["gc", "--json", "--older-than", "0s", ...args]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as GcJson;
  };
  const dry = await gc("--dry-run");
  expect(dry.deleted).toEqual([doneId]);
  expect((await cli(s, ["show", doneId])).code).toBe(0);
  const real = await gc();
  expect(real.deleted).toEqual([doneId]);
  expect(real.rowsByTable).toEqual(dry.rowsByTable);
  expect(real.rowsByTable.events).toBeGreaterThan(0);
  expect(real.storage!.bytesAfter).toBeGreaterThan(0);
  expect((await cli(s, ["show", doneId])).code).toBe(2);
  expect(existsSync(join(s.home, "artifacts", doneId))).toBe(false);
  const forced = await gc("--force");
  expect(forced.runs).toBe(0);
  expect(forced.kept).toEqual([liveId]);
  expect(parseNdjson((await cli(s, ["runs", "--json"])).stdout).map((r) => [r.id, r.status])).toEqual([[liveId, "running"]]);
  expect((await cli(s, ["cancel", liveId])).code).toBe(0);
  expect(await proc.exited).toBe(4);
  // Cancelled, its driver gone: the next gc deletes it, and says what it measured.
  const text = await cli(s, ["gc", "--older-than", "0s"]);
  expect(text.code).toBe(0);
  expect(text.stdout).toMatch(/^deleted 1 run, \d+ journal rows, .*\njournal tables: .+ before, .+ after \(.+ freed\)\n/);
  expect(parseNdjson((await cli(s, ["runs", "--json"])).stdout)).toEqual([]);
});

e2eTest(
  "postgres: schedule add/list/show/trigger; serve takes the service lease (active), a second serve on the same journal waits on standby",
  async () => {
    const s = await setup();
    const count = join(import.meta.dir, "..", "service", "fixtures", "count.ts");
    const log = join(s.out, "count.log");
    const at = (args: string[]) => runAtomic(["schedule", ...args], { home: s.home, env: s.env, cwd: s.out });
    const added = await at(["add", "nightly", "--cron", "0 3 * * *", count, "--input", `log=${log}`, "--input", "tag=pg"]);
    expect(added.stderr).toBe("");
    expect(added.code).toBe(0);
    expect((await at(["add", "nightly", "--cron", "0 3 * * *", count])).code).toBe(2);
    const list = await at(["list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^nightly\s+0 3 \* \* \*\s+UTC\s+/m);
    const trigger = await at(["trigger", "nightly", "--json"]);
    expect(trigger.code).toBe(0);
    const { runId } = JSON.parse(trigger.stdout) as { runId: string };
    await waitUntil(async () => parseNdjson((await cli(s, ["runs", "--json"])).stdout).some((r) => r.id === runId && r.status === "completed"), 30_000, "the triggered run to complete");
    expect(readFileSync(log, "utf8")).toBe("pg\n");
    expect((JSON.parse((await at(["show", "nightly", "--json"])).stdout) as { lastRunId: string }).lastRunId).toBe(runId);
    await waitUntil(() => processesWithHome(s.home).length === 0, 20_000, "the triggered drive to end");

    const serve = (home: string) => {
      const proc = spawnAtomic(["--json", "serve", "--port", "0"], { home, env: s.env });
      return { proc, log: lineWatcher(proc.stdout) };
    };
    const first = serve(s.home);
    await first.log.waitFor(/"type":"service_active"/);
    // Another home (its own runtime files), the same Postgres journal and host: the service lease is the host's.
    const second = serve(join(s.home, "..", "home2"));
    await second.log.waitFor(/"type":"service_standby"/);
    expect((await at(["list"])).stdout).toMatch(/^nightly\s+/m);
    first.proc.kill("SIGTERM");
    expect(await first.proc.exited).toBe(0);
    await second.log.waitFor(/"type":"service_active"/, 30_000);
    second.proc.kill("SIGTERM");
    expect(await second.proc.exited).toBe(0);
  },
  120_000,
);

e2eTest("postgres: gc on a host whose clock runs two hours ahead keeps a run whose lease is live by the database's clock", async () => {
  if (!existsSync(FAKETIME)) return;
  const s = await setup();
  const journal = await openJournal({ home: makeTempDir(), durability: "full", journalUrl: s.url });
  try {
    // Finished, but its lease still held for a minute by a driver on another host (by the database's clock).
    const rootId = newRunId();
    const lease = await journal.acquireLease(rootId, { holderId: "far-1" as HolderId, host: "elsewhere/m/b/1", pid: 1, pidStart: 1 }, { timeoutMs: 60_000 });
    await journal.append(lease, [
      { runId: rootId, type: "run_started", payload: {}, newRun: { rootId, parentId: null, parentKey: null, depth: 0, workflowName: "far", workflowPath: "/far.ts", workflowDigest: "d", inputs: {} } },
      { runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } },
    ]);
    const ahead = await runAtomic(["gc", "--json", "--older-than", "0s", "--force"], {
      home: s.home,
      env: { ...s.env, LD_PRELOAD: FAKETIME, FAKETIME: "+2h", FAKETIME_DONT_RESET: "1" },
    });
    expect(ahead.stderr).toBe("");
    expect(ahead.code).toBe(0);
    expect(JSON.parse(ahead.stdout.trim().split("\n").at(-1)!) as GcJson).toMatchObject({ runs: 0, kept: [rootId] });
    expect((await journal.getRun(rootId))?.status).toBe("completed");
  } finally {
    await journal.close();
    removeStaleFaketimeSegments();
  }
});
