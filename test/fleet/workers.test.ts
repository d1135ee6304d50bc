/**
 * Seeing the worker hosts, through dist/atomic against a real Postgres, with
 * hosts as separate `atomic worker` processes on loopback:
 * - `atomic workers`: hosts (running, stopped after SIGTERM, lost after
 *   SIGKILL and silence), their busy workers with run and stage, --json;
 *   refused on the embedded SQLite journal;
 * - a stage queued for a queue no live host serves says why, in the live
 *   lines of `atomic run`, in `atomic show` and on the page (Chromium),
 *   until a host of that queue starts and runs it; then show and the page
 *   say on which host each stage ran.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, processesMatching, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { freshDatabase, postgresInstalled } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { startWorkerHost } from "../helpers/worker-hosts.ts";
import pg from "pg";
import { cleanupNow, spawnInPty } from "../e2e/support.ts";
import { HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "../status/browser-support.ts";

declare const document: {
  body: { dataset: Record<string, string | undefined> };
  querySelectorAll(selector: string): { length: number };
};

afterEach(async () => {
  await cleanupNow();
  await killSpawned();
  removeTempDirs();
});

interface HostJson {
  hostId: string;
  state: string;
  storedState: string;
  queues: string[];
  slots: number;
  busy: number;
  heartbeatAgeMs: number;
  version: string;
  refused: string | null;
  workers: { workerId: string; runId: string; stageKey: string; stageName: string; queue: string }[];
}

/** `atomic workers` on `journal` (text, or --json parsed per line). */
async function workers(journal: string, opts: { json?: boolean; env?: Record<string, string> } = {}) {
  const r = await runAtomic(["workers", "--journal", journal, ...(opts.json ? ["--json"] : [])], { home: makeTempDir(), ...(opts.env ? { env: opts.env } : {}) });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return { text: r.stdout, hosts: opts.json ? r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as HostJson) : [] };
}

function workflowFile(source: string): string {
  const file = join(makeTempDir(), "wf.ts");
  writeFileSync(file, source);
  return file;
}

describe.skipIf(!postgresInstalled())("worker hosts seen from the command line and the page", () => {
  test("a host with the machine's own identity (no --host-id: hostname/machine id/boot id/pid namespace, slashes and all) starts its workers and runs a stage; each worker's log is a file of worker-logs", async () => {
    const journal = await freshDatabase("wdefault");
    const host = await startWorkerHost({ journal, slots: 1 });
    const wf = workflowFile(`import { workflow } from "atomic";
export default workflow({ name: "one", async run(ctx) { await ctx.task("one", { shell: "echo on-the-host" }); } });`);
    const r = await runAtomic(["run", wf, "--workers", "0"], { home: makeTempDir(), env: { ATOMIC_JOURNAL: journal } });
    expect(r.code).toBe(0);
    const logs = readdirSync(join(host.home, "worker-logs"));
    expect(logs.length).toBeGreaterThan(0);
    expect(logs.filter((f) => !/^w\d+-[0-9a-z]+@.+\.log$/.test(f) || f.includes("/"))).toEqual([]);
    expect(await host.signal("SIGTERM")).toBe(0);
  });

  test("atomic workers: two hosts and what runs on them; SIGTERM shows stopped, SIGKILL lost once silent; --json", async () => {
    const journal = await freshDatabase("wui");
    const marker = `hold-${process.pid}-${Date.now()}`;
    const a = await startWorkerHost({ journal, hostId: "wui-a", slots: 1 });
    const b = await startWorkerHost({ journal, hostId: "wui-b", slots: 2, queues: ["default", "gpu"] });
    // A stage only b serves, held until the test ends it (its marker names the stage process).
    const wf = workflowFile(`import { workflow } from "atomic";
export default workflow({ name: "hold", async run(ctx) { await ctx.task("hold", { shell: "sleep 300 # ${marker}", queue: "gpu" }); } });`);
    const root = spawnAtomic(["run", wf, "--workers", "0"], { home: makeTempDir(), env: { ATOMIC_JOURNAL: journal } });
    const out = lineWatcher(root.stdout);
    const runId = /started run ([0-9a-z]{18})/.exec(await out.waitFor(/^started run /))![1]!;

    const busy = await waitUntil(async () => {
      const { hosts } = await workers(journal, { json: true });
      return hosts.find((h) => h.hostId === "wui-b" && h.workers.length === 1) ? hosts : undefined;
    }, 60_000, "host b busy with the stage").then((h) => h!);
    expect(busy.map((h) => h.hostId)).toEqual(["wui-a", "wui-b"]);
    const [ja, jb] = busy as [HostJson, HostJson];
    expect(ja).toMatchObject({ state: "running", storedState: "running", queues: ["default"], slots: 1, workers: [], refused: null });
    expect(jb).toMatchObject({ state: "running", queues: ["default", "gpu"], slots: 2, refused: null });
    expect(jb.workers[0]).toMatchObject({ runId, stageKey: "0", stageName: "hold", queue: "gpu" });
    expect(jb.workers[0]!.workerId).toEndWith("@wui-b");
    expect(typeof jb.version).toBe("string");
    expect(jb.heartbeatAgeMs).toBeLessThan(10_000);

    const listed = (await workers(journal)).text;
    const rowOf = (text: string, host: string) => text.split("\n").find((l) => l.startsWith(`${host} `)) ?? "";
    expect(listed.split("\n")[0]).toMatch(/^HOST\s+STATE\s+QUEUES\s+BUSY\s+HEARTBEAT\s+VERSION/);
    expect(rowOf(listed, "wui-a")).toMatch(/^wui-a\s+running\s+default\s+0\/1\s+\d+ s ago/);
    expect(rowOf(listed, "wui-b")).toMatch(/^wui-b\s+running\s+default,gpu\s+1\/2\s+\d+ s ago/);
    // the busy worker: its id (without the host), its host, the run and the stage
    expect(listed).toMatch(/^WORKER\s+HOST\s+RUN\s+STAGE/m);
    expect(listed).toMatch(new RegExp(`^w\\S+\\s+wui-b\\s+${runId}\\s+hold \\(#0\\)`, "m"));

    // SIGTERM: a drained host says stopped (its last heartbeat); nothing of it is left
    expect(await a.signal("SIGTERM")).toBe(0);
    await a.gone();
    expect(rowOf((await workers(journal)).text, "wui-a")).toMatch(/^wui-a\s+stopped\s/);

    // SIGKILL: its row stays "running" but it falls silent: lost after the threshold (2 s here, the least), its item still leased
    b.proc.kill("SIGKILL");
    await b.gone();
    const env = { ATOMIC_HOST_LOST_MS: "2000" };
    const lost = await waitUntil(async () => (await workers(journal, { json: true, env })).hosts.find((h) => h.hostId === "wui-b" && h.state === "lost"), 30_000, "host b lost").then((h) => h!);
    expect(lost.storedState).toBe("running");
    expect(lost.workers.map((w) => w.runId)).toEqual([runId]);
    const after = (await workers(journal, { env })).text;
    expect(rowOf(after, "wui-a")).toMatch(/^wui-a\s+stopped\s/);
    expect(rowOf(after, "wui-b")).toMatch(/^wui-b\s+lost\s+default,gpu\s+1\/2\s/);
    // the stage process ended with its host
    await waitUntil(() => processesMatching(marker).length === 0, 30_000, "the stage process of the killed host to end");
  }, 180_000);

  test("atomic workers on the embedded SQLite journal: one sentence and a hint, exit 2, nothing written", async () => {
    const home = makeTempDir();
    const r = await runAtomic(["workers"], { home, env: { ATOMIC_JOURNAL: undefined } });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      "error: worker hosts need a shared Postgres journal, and this is the embedded SQLite one.\n" +
        "hint: name the journal the hosts use: atomic workers --journal postgres://user@host:5432/db (or set ATOMIC_JOURNAL)\n",
    );
    expect(existsSync(join(home, "atomic.db"))).toBe(false);
    const j = await runAtomic(["workers", "--json"], { home, env: { ATOMIC_JOURNAL: undefined } });
    expect(j.code).toBe(2);
    expect(JSON.parse(j.stdout)).toMatchObject({ type: "error", code: "needs_shared_journal", exitCode: 2 });
  }, 60_000);

  test("atomic workers: none yet says how to start one; a host's refusal (version skew) is shown with it; old stopped hosts only with --all", async () => {
    const journal = await freshDatabase("wui");
    const empty = await workers(journal);
    expect(empty.text).toBe("no worker hosts yet; start one on a machine with: atomic worker --journal <this journal> [--queues default,gpu]\n");
    // Rows as hosts of another version and a long-gone host leave them (what a heartbeat writes: src/journal/postgres/fleet.ts).
    const db = new pg.Client({ connectionString: journal });
    await db.connect();
    try {
      const now = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
      const refused = "refusing stages of pool protocol 99: this worker (atomic 0.0.1) speaks protocol 1; run the same atomic version as the roots";
      await db.query(
        `insert into atomic.worker_hosts (host_id, version, protocol, schema_version, queues, slots, busy, state, workdir, pid, refused, started_at, heartbeat_at)
         values ('wui-old', '0.0.1', 1, 6, '{default}', 2, 0, 'running', '/srv', 4242, $1, ${now}, ${now}),
                ('wui-gone', '0.0.1', 1, 6, '{gpu}', 1, 0, 'stopped', '/srv', 4343, null, ${now} - 200000000, ${now} - 100000000)`,
        [refused],
      );
      const listed = await workers(journal);
      expect(listed.text).toContain(`refusing: wui-old: ${refused}\n`);
      expect(listed.text).not.toContain("wui-gone");
      expect(listed.text).toContain("1 host(s) stopped or lost over a day ago not shown (--all lists them)");
      const all = await runAtomic(["workers", "--all", "--json"], { home: makeTempDir(), env: { ATOMIC_JOURNAL: journal } });
      const hosts = all.stdout.trim().split("\n").map((l) => JSON.parse(l) as HostJson);
      expect(hosts.map((h) => [h.hostId, h.state, h.refused])).toEqual([["wui-gone", "stopped", null], ["wui-old", "running", refused]]);
    } finally {
      await db.end();
    }
  }, 60_000);

  describe.skipIf(!HAVE_CHROMIUM)("in Chromium", () => {
    beforeAll(launchBrowser);
    afterAll(releaseBrowser);

    test("a stage waiting for a queue no live host serves says why (run, show, page) until a host of it runs it; then where it ran", async () => {
      const journal = await freshDatabase("wui");
      const env = { ATOMIC_JOURNAL: journal };
      // tpu had a host, stopped before the run; gpu never had one
      const t0 = await startWorkerHost({ journal, hostId: "wui-t0", queues: ["tpu"] });
      expect(await t0.signal("SIGTERM")).toBe(0);
      const wf = workflowFile(`import { workflow } from "atomic";
export default workflow({ name: "queues", async run(ctx) {
  const [train, tune] = await ctx.parallel([
    { name: "train", shell: "echo trained", queue: "gpu" },
    { name: "tune", shell: "echo tuned", queue: "tpu" },
  ]);
  return { train: (train as { text: string }).text.trim(), tune: (tune as { text: string }).text.trim() };
} });`);
      const home = makeTempDir();
      const { proc: server, url, login } = await startServe(makeTempDir(), env, ["--no-recover", "--no-schedules"]);
      const root = spawnAtomic(["run", wf, "--workers", "0"], { home, env });
      const out = lineWatcher(root.stdout);
      const runId = /started run ([0-9a-z]{18})/.exec(await out.waitFor(/^started run /))![1]!;
      const { page, errors } = await newPage();
      try {
        // the live lines of atomic run
        await out.waitFor(/^ {2}stage train waiting for a worker on queue gpu; no worker host has served it$/);
        await out.waitFor(/^ {2}stage tune waiting for a worker on queue tpu; none seen for \d+ s$/);

        // atomic show
        const shown = await runAtomic(["show", runId], { home, env });
        expect(shown.code).toBe(0);
        expect(shown.stdout).toMatch(/^ {2}queued {4}train #0\.0\.0 .*\n {12}waiting for a worker on queue gpu; no worker host has served it \(start one: atomic worker --journal … --queues gpu\)$/m);
        expect(shown.stdout).toMatch(/^ {12}waiting for a worker on queue tpu; none seen for \d+ s /m);
        const json = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout) as { steps: { name: string; hostQueue?: string; queueWait?: string }[] };
        expect(json.steps.filter((s) => s.hostQueue).map((s) => [s.name, s.hostQueue])).toEqual([["train", "gpu"], ["tune", "tpu"]]);

        // the page: a notice per waiting stage
        await signIn(page, login, url);
        await page.goto(`${url}runs/${runId}`);
        await page.waitForFunction(() => document.querySelectorAll("p.queue-wait").length === 2, undefined, { timeout: 30_000 });
        const notices = await page.$$eval("p.queue-wait", (els) => els.map((e) => e.textContent));
        expect(notices[0]).toBe("train: waiting for a worker on queue gpu; no worker host has served it");
        expect(notices[1]).toMatch(/^tune: waiting for a worker on queue tpu; none seen for \d+ s$/);
        await page.click('svg.graph g.node[data-name="train"]');
        expect(await page.textContent("#stage-queue-wait")).toBe("waiting for a worker on queue gpu; no worker host has served it");

        // a host of both queues: the stages run there, and the reasons go
        await startWorkerHost({ journal, hostId: "wui-g1", queues: ["gpu", "tpu"], slots: 2 });
        expect(await root.exited).toBe(0);
        await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 30_000 });
        expect(await page.$$("p.queue-wait")).toHaveLength(0);
        await page.click('svg.graph g.node[data-name="train"]');
        await page.waitForSelector("#stage-host");
        expect(await page.textContent("#stage-host")).toBe("wui-g1 (worker host)");
        expect(await page.$("#stage-queue-wait")).toBeNull();
        expect(errors).toEqual([]);

        const done = await runAtomic(["show", runId], { home, env });
        expect(done.stdout).not.toContain("waiting for a worker");
        expect(done.stdout).toMatch(/^ {2}completed train #0\.0\.0 .* on wui-g1$/m);
        expect(done.stdout).toMatch(/^ {2}completed tune #0\.1\.0 .* on wui-g1$/m);
      } finally {
        await closePageAndServer(page, server);
      }
    }, 180_000);
  });

  test("the live tree on a terminal says why a stage queued for a worker host waits, until one runs it", async () => {
    const journal = await freshDatabase("wui");
    const wf = workflowFile(`import { workflow } from "atomic";
export default workflow({ name: "gpu", async run(ctx) { await ctx.task("train", { shell: "echo trained", queue: "gpu" }); } });`);
    const term = spawnInPty(["run", wf, "--workers", "0"], { home: makeTempDir(), env: { NO_COLOR: "1", ATOMIC_JOURNAL: journal } });
    await waitUntil(() => term.text().includes("○ train queued  waiting for a worker on queue gpu; no worker host has served it"), 60_000, "the reason drawn").catch(async (e) => {
      throw new Error(`${(e as Error).message}; ${await term.describe()}`);
    });
    await startWorkerHost({ journal, hostId: "wui-g3", queues: ["gpu"] });
    expect(await term.exited).toBe(0);
    // the last frame: the stage done, the reason gone
    const last = term.text().split("\x1b[J").at(-1)!;
    expect(last).toMatch(/✓ train \S+/);
    expect(last).not.toContain("waiting for a worker");
  }, 120_000);

  test("with workers of its own the root runs default-queue stages itself: no reason for them, shown as run beside the root", async () => {
    const journal = await freshDatabase("wui");
    const env = { ATOMIC_JOURNAL: journal };
    await startWorkerHost({ journal, hostId: "wui-g2", queues: ["gpu"] });
    const wf = workflowFile(`import { workflow } from "atomic";
export default workflow({ name: "mixed", async run(ctx) {
  await ctx.task("prep", { shell: "echo prep" });
  await ctx.task("train", { shell: "echo trained", queue: "gpu" });
} });`);
    const home = makeTempDir();
    const r = await runAtomic(["run", wf, "--workers", "1"], { home, env });
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain("waiting for a worker");
    const runId = /started run ([0-9a-z]{18})/.exec(r.stdout)![1]!;
    const shown = await runAtomic(["show", runId], { home, env });
    expect(shown.stdout).toMatch(/^ {2}completed prep #0 exit 0 \S+$/m);
    expect(shown.stdout).toMatch(/^ {2}completed train #1 .* on wui-g2$/m);
    const json = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout) as { steps: { name: string; ranOn?: { host: string; remote: boolean } }[] };
    expect(json.steps.find((s) => s.name === "prep")!.ranOn!.remote).toBe(false);
    expect(json.steps.find((s) => s.name === "train")!.ranOn).toEqual({ host: "wui-g2", remote: true });
  }, 120_000);
});
