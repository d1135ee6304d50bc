/**
 * The worker pool through the real binary: real coordinator and worker
 * processes, killed and stopped with real signals.
 *
 * Stage commands write marker files into a per-test directory ($D): the
 * worker that runs them (`$PPID` of the stage's shell), the stage's own
 * pid (it leads its process group), and a gate file the test creates to
 * let a stage finish. Nothing here asserts a duration. scripts/test.sh runs
 * the file again on the Postgres journal; the tests of the pool's pipes and
 * processes that no journal call decides (journalFreeTest) run once.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BUN, ROOT, lineWatcher, processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import { openJournal } from "../../src/journal/open.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, groupAlive, journalFreeTest } from "../e2e/support.ts";
import { alive, lastRun, show, stage } from "./support.ts";

import { untilExists } from "../helpers/gate.ts";
const FIX = join(import.meta.dir, "fixtures");
const ONE = join(FIX, "one-stage.ts");
const STAGES = join(FIX, "stages.ts");
const started = new Set<number>();

// Tests run concurrently; processes and temp dirs are cleaned once none is running.
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  killStarted();
});

function killStarted(): void {
  for (const pid of started) kill(pid, "SIGKILL");
  started.clear();
}

function kill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

function childrenOf(pid: number): number[] {
  const r = Bun.spawnSync(["ps", "-eo", "pid=,ppid="], { stdout: "pipe" });
  return r.stdout
    .toString()
    .split("\n")
    .map((l) => l.trim().split(/\s+/).map(Number))
    .filter(([, ppid]) => ppid === pid)
    .map(([p]) => p!);
}

async function pidFile(path: string): Promise<number> {
  const text = await waitUntil(
    (): string | undefined => {
      const t = existsSync(path) ? readFileSync(path, "utf8") : "";
      return t.endsWith("\n") ? t : undefined;
    },
    30_000,
    path,
  );
  const pid = Number(text!.trim());
  started.add(pid);
  return pid;
}

function expectOneSentence(stderr: string): void {
  const lines = stderr.trim().split("\n");
  expect(lines[0]).toMatch(/^error: \S.*\.$/);
  expect(lines.length).toBeLessThanOrEqual(2);
  expect(stderr).not.toMatch(/^\s+at /m);
}

e2eTest("a worker SIGKILLed mid-stage: the stage runs again on a new worker (generation 2) and the run completes", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = `echo result; if [ ! -f ${d}/once ]; then touch ${d}/once; echo $$ > ${d}/stage.pid; echo $PPID > ${d}/worker.pid; sleep 30; fi`;
  const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "2"], { home });
  const worker = await pidFile(`${d}/worker.pid`);
  const stagePgid = await pidFile(`${d}/stage.pid`);
  kill(worker, "SIGKILL");
  expect(await proc.exited).toBe(0);
  const run = await lastRun(home);
  const report = await show(home, run.id);
  expect(report.run.outputs).toEqual({ text: "result", exitCode: 0 });
  expect(stage(report, "work").generation).toBe(2);
  expect(stage(report, "work").status).toBe("completed");
  // the lost worker's stage process group was killed, not left running
  await waitUntil(() => !groupAlive(stagePgid), 10_000, "the lost worker's stage to end");
});

e2eTest("the coordinator SIGKILLed once: the stage's retry runs on a fresh pool and the run completes", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = `echo result; if [ ! -f ${d}/once ]; then touch ${d}/once; echo $$ > ${d}/stage.pid; echo $PPID > ${d}/worker.pid; sleep 30; fi`;
  const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "2"], { home });
  const worker = await pidFile(`${d}/worker.pid`);
  const stagePgid = await pidFile(`${d}/stage.pid`);
  const coordinator = parentOf(worker);
  const workers = childrenOf(coordinator);
  expect(workers).toContain(worker);
  kill(coordinator, "SIGKILL");
  expect(await proc.exited).toBe(0);
  const run = await lastRun(home);
  const report = await show(home, run.id);
  expect(report.run.outputs).toEqual({ text: "result", exitCode: 0 });
  const work = stage(report, "work");
  expect(work.status).toBe("completed");
  expect(work.attemptLog.map((a: Record<string, any>) => [a.status, a.error?.code])).toEqual([["failed", "worker_lost"], ["completed", undefined]]);
  // the lost pool's workers noticed and left, killing their stage
  await waitUntil(() => workers.every((w) => !alive(w)) && !groupAlive(stagePgid), 10_000, "workers and stage to end");
});

// A claim that fails (fault point "coordinator-before-claim").
e2eTest("a claim that fails once before handing anything out is tried again: the run completes", async () => {
  const home = makeTempDir();
  const env = { ATOMIC_FAULT_POINTS: "coordinator-before-claim:1", ATOMIC_FAULT_ACTION: "throw" };
  const r = await runAtomic(["run", ONE, "--input", "command=echo result", "--workers", "2"], { home, env });
  expect(r.code).toBe(0);
  const report = await show(home, (await lastRun(home)).id);
  expect(report.run.outputs).toEqual({ text: "result", exitCode: 0 });
  expect([stage(report, "work").status, stage(report, "work").generation]).toEqual(["completed", 1]);
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
});

e2eTest("claims that keep failing stop the run resumably (storage_unavailable); nothing was started, resume completes", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const env = { ATOMIC_FAULT_POINTS: "coordinator-before-claim:*", ATOMIC_FAULT_ACTION: "throw" };
  const r = await runAtomic(["run", ONE, "--input", `command=echo $$ >> ${d}/stages; echo result`, "--workers", "2"], { home, env });
  expect(r.code).toBe(1);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  const run = await lastRun(home);
  const report = await show(home, run.id);
  expect(report.run.error.code).toBe("storage_unavailable");
  expect(report.run.error.message).toMatch(/the pool cannot claim work/);
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
  expect(existsSync(`${d}/stages`)).toBe(false);
  expect((await runAtomic(["resume", run.id], { home })).code).toBe(0);
  expect((await show(home, run.id)).run.outputs).toEqual({ text: "result", exitCode: 0 });
});

e2eTest("a worker that stops answering (SIGSTOP) is replaced; continued (SIGCONT), its late result does not count (refused as stale, or never committed)", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = [
    `if [ ! -f ${d}/once ]; then touch ${d}/once; echo $$ > ${d}/stage1.pid; echo $PPID > ${d}/worker1.pid; sleep 30;`,
    `else echo $PPID > ${d}/worker2.pid; ${untilExists(`${d}/gate`)}; echo second; fi`,
  ].join(" ");
  const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "2", "--work-lease-ms", "2000"], { home });
  const worker1 = await pidFile(`${d}/worker1.pid`);
  const stage1 = await pidFile(`${d}/stage1.pid`);
  const run = await lastRun(home);
  const log = join(home, "artifacts", run.id, "worker-logs", "coordinator.log");
  const logSays = (re: RegExp) => existsSync(log) && re.test(readFileSync(log, "utf8"));
  kill(worker1, "SIGSTOP");
  // Lost: its stage killed and its item given back. It is continued at once: a retired worker is SIGKILLed
  // 10 s after it was lost (the pool's retire grace), and a worker started on a loaded machine can take longer
  // than that to run the second attempt. Continued before the release, its commit could still win the item.
  await waitUntil(() => logSays(/work \S+ released at generation 2/), 30_000, "the stopped worker's item to be released");
  await waitUntil(() => !groupAlive(stage1), 10_000, "the stopped worker's stage to be killed");
  kill(worker1, "SIGCONT");
  // Continued, the worker hears its stage's end and the coordinator's pings sent meanwhile in an order of the
  // kernel's: either it commits and the coordinator refuses the commit as stale, or its heartbeat finds its lease
  // past its local deadline first and it kills the stage and commits nothing (src/pool/work-lease-deadline.ts).
  // Either way its result does not count (on the Postgres pass of the fresh-clone run of 10be411 the second came
  // first, and a wait for the first alone timed out).
  const workerLogs = join(home, "artifacts", run.id, "worker-logs");
  const fencedItself = () =>
    readdirSync(workerLogs).some((f) => f !== "coordinator.log" && /its lease could not be renewed by its deadline; killing the stage, committing nothing/.test(readFileSync(join(workerLogs, f), "utf8")));
  await waitUntil(() => logSays(/refused a stale commit from worker \S+ for work/) || fencedItself(), 20_000, "the stale commit to be refused, or the worker to commit nothing");
  const worker2 = await pidFile(`${d}/worker2.pid`);
  expect(worker2).not.toBe(worker1);
  writeFileSync(`${d}/gate`, "");
  expect(await proc.exited).toBe(0);
  const report = await show(home, run.id);
  expect(stage(report, "work").generation).toBe(2);
  expect(report.run.outputs.text).toBe("second");
  await waitUntil(() => !alive(worker1), 15_000, "the retired worker to exit");
});

e2eTest("the coordinator's own stall (SIGSTOP for twice the lease) is not charged to its worker: it is neither pinged nor replaced", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = `echo $PPID > ${d}/worker.pid; ${untilExists(`${d}/gate`)}; echo done`;
  const leaseMs = 2_000;
  const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "1", "--work-lease-ms", String(leaseMs)], { home });
  const worker = await pidFile(`${d}/worker.pid`);
  const coordinator = parentOf(worker);
  const run = await lastRun(home);
  // The item's lease as the journal has it: only the coordinator renews it (from the worker's heartbeats).
  const journal = await openJournal({ home, durability: "full", journalUrl: journalUrlForHome(home) });
  const leaseEnd = async () => (await journal.work.list(run.id))[0]?.leaseExpiresAt ?? 0;
  try {
    kill(coordinator, "SIGSTOP");
    // Stopped for twice the lease: the journal's lease is a whole lease past due (the heartbeats go unread meanwhile).
    await waitUntil(async () => Date.now() > (await leaseEnd()) + leaseMs, 30_000, "the stopped coordinator's lease to be a lease past due");
    const woke = Date.now();
    kill(coordinator, "SIGCONT");
    // Three sweeps (500 ms apart) after it woke: it renewed the lease from a heartbeat it read 1.5 s after waking or later.
    await waitUntil(async () => (await leaseEnd()) >= woke + 1_500 + leaseMs, 30_000, "a renewal 1.5 s after the coordinator woke");
  } finally {
    await journal.close();
  }
  writeFileSync(`${d}/gate`, "");
  expect(await proc.exited).toBe(0);
  const work = stage(await show(home, run.id), "work");
  expect([work.status, work.generation]).toEqual(["completed", 1]);
  const log = readFileSync(join(home, "artifacts", run.id, "worker-logs", "coordinator.log"), "utf8");
  expect(log).not.toMatch(/past its lease|stopped answering/);
});

e2eTest("a stage that kills its worker 3 times fails the run with worker_retry_limit and the worker log path", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  // Each attempt kills its worker before its process group can be reported (STARTED_REPORT_MS): the
  // coordinator must still find and kill it (and its sleep) by the worker id in its environment. First it
  // writes 20 KB into the worker's stderr (its log), between two markers: the failure carries the last 8 KiB.
  const noise = `{ echo first-$$; head -c 20000 /dev/zero | tr '\\0' x; echo; echo last-$$; } >> /proc/$PPID/fd/2`;
  const r = await runAtomic(["run", ONE, "--input", `command=echo $$ >> ${d}/pids; ${noise}; kill -9 $PPID; sleep 30`, "--workers", "2"], { home });
  expect(r.code).toBe(1);
  const pids = readFileSync(join(d, "pids"), "utf8").trim().split("\n").map(Number);
  expect(pids).toHaveLength(3);
  await waitUntil(() => pids.every((pid) => !groupAlive(pid)), 10_000, "every attempt's process group to be gone");
  const run = await lastRun(home);
  const report = await show(home, run.id);
  expect(report.run.error.code).toBe("worker_retry_limit");
  expect(report.run.error.message).toMatch(/worker-logs\/w\d+-[0-9a-z]+\.log/);
  const tail = report.run.error.message.split(/--- last 8 KiB of \S+worker-logs\/w\d+-[0-9a-z]+\.log ---\n/)[1] as string;
  expect(tail).toContain(`last-${pids[2]}`);
  expect(tail).not.toContain(`first-${pids[2]}`);
  expect(tail.length).toBeLessThanOrEqual(8 * 1024);
  expect(r.stderr).toMatch(/worker_retry_limit|lost its worker/);
  expect(stage(report, "work").status).toBe("failed");
});

e2eTest("pause from another process: no new stage starts; unpause: the run finishes", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const out = join(d, "effects.txt");
  const first = `echo $$ > ${d}/first.pid; ${untilExists(`${d}/gate`)}; echo first`;
  const proc = spawnAtomic(["--json", "run", STAGES, "--input", "n=3", "--input", `out=${out}`, "--input", `firstCommand=${first}`], { home });
  const events = lineWatcher(proc.stdout);
  await pidFile(`${d}/first.pid`);
  const run = await lastRun(home);
  const paused = await runAtomic(["pause", run.id], { home });
  expect(paused.stderr).toBe("");
  expect(paused.code).toBe(0);
  expect(paused.stdout).toMatch(/paused/);
  expect((await lastRun(home)).status).toBe("paused");
  // Pausing stops new starts, not running stages: "first" goes on, and is shown so.
  expect(stage(await show(home, run.id), "first").status).toBe("running");
  writeFileSync(`${d}/gate`, "");
  await waitUntil(async () => stage(await show(home, run.id), "first")?.status === "completed", 20_000, "first to complete");
  // While paused, the fan-out after "first" must not start: each of its stages reached the start gate and is held there.
  for (const name of ["s0", "s1", "s2"]) await events.waitFor(new RegExp(`"type":"step_waiting".*"name":"${name}".*"reason":"the run is paused"`), 20_000);
  expect(existsSync(out)).toBe(false);
  expect((await show(home, run.id)).steps.filter((s: Record<string, any>) => s.name.startsWith("s"))).toEqual([]);
  const unpaused = await runAtomic(["unpause", run.id], { home });
  expect(unpaused.code).toBe(0);
  expect(await proc.exited).toBe(0);
  expect(readFileSync(out, "utf8").trim().split("\n").sort()).toEqual(["s0", "s1", "s2"]);
});

e2eTest("paused: a queued stage cancelled meanwhile does not let an older queued one start", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const proc = spawnAtomic(["--json", "run", join(FIX, "paused-cancel.ts"), "--input", `dir=${d}`, "--workers", "2"], { home });
  const events = lineWatcher(proc.stdout);
  await pidFile(`${d}/hold.pid`);
  await pidFile(`${d}/x.pid`);
  const run = await lastRun(home);
  const started = async (name: string) => (await show(home, run.id)).steps.some((s: Record<string, any>) => s.name === name);
  await waitUntil(() => started("z"), 20_000, "z to be queued");
  writeFileSync(`${d}/go-y`, "");
  await waitUntil(() => started("y"), 20_000, "y to be queued");
  expect((await runAtomic(["pause", run.id], { home })).code).toBe(0);
  // x fails: its group cancels the queued y, and a worker is free. z is older than y and not cancelled.
  writeFileSync(`${d}/go-x`, "");
  // y ends (cancelled) only once the coordinator settled it, after x's commit, where x's worker would have claimed its
  // next item and been dispatched again had the pool not been paused: nothing else dispatches until the unpause.
  await events.waitFor(/"type":"step_ended".*"name":"y".*"status":"cancelled"/, 20_000);
  expect(existsSync(`${d}/effects`)).toBe(false);
  expect(events.lines.filter((l) => /"type":"step_ended".*"name":"z"/.test(l))).toEqual([]);
  expect((await runAtomic(["unpause", run.id], { home })).code).toBe(0);
  writeFileSync(`${d}/go-hold`, "");
  expect(await proc.exited).toBe(1); // x failed
  expect(readFileSync(`${d}/effects`, "utf8")).toBe("z\n");
});

e2eTest("200 stages over 4 workers: each ran exactly once", async () => {
  const home = makeTempDir();
  const out = join(makeTempDir(), "effects.txt");
  const r = await runAtomic(["run", STAGES, "--input", "n=200", "--input", `out=${out}`, "--workers", "4", "--json"], { home, timeoutMs: 120_000 });
  expect(r.code).toBe(0);
  const lines = readFileSync(out, "utf8").trim().split("\n");
  expect(lines.length).toBe(200);
  expect(new Set(lines).size).toBe(200);
  const result = JSON.parse(r.stdout.trim().split("\n").pop()!);
  expect(result.outputs.count).toBe(200);
  expect(result.outputs.texts).toEqual(Array.from({ length: 200 }, (_, i) => `out-s${i}`));
  // the stages really ran on workers: 4 of them, each with a log
  const logs = readdirSync(join(home, "artifacts", result.runId, "worker-logs")).sort();
  expect(logs).toContain("coordinator.log");
  expect(logs.filter((f) => /^w\d+-[0-9a-z]+\.log$/.test(f)).length).toBe(4);
}, 150_000);

journalFreeTest("live stage output flows worker → coordinator → root (--json shows it)", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", ONE, "--input", "command=echo one; echo two >&2; echo three", "--json"], { home });
  expect(r.code).toBe(0);
  const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  const output = events.filter((e) => e.type === "stage_output");
  expect(output.filter((e) => e.stream === "stdout").map((e) => e.text).join("")).toBe("one\nthree\n");
  expect(output.filter((e) => e.stream === "stderr").map((e) => e.text).join("")).toBe("two\n");
});

journalFreeTest("live output is capped per batch (64 Ki characters), says what it skipped; the stage's log keeps everything", async () => {
  const home = makeTempDir();
  // 5 MB to stderr (its log keeps it all), a short stdout (the result's text: `show` stays small).
  const command = "head -c 5000000 /dev/zero | tr '\\0' x | fold -w 99 >&2; echo last-line";
  const r = await runAtomic(["--json", "run", ONE, "--input", `command=${command}`, "--workers", "1"], { home });
  expect(r.code).toBe(0);
  const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  const output = lines.filter((e) => e.type === "stage_output");
  for (const e of output) expect(e.text.length).toBeLessThanOrEqual(64 * 1024 + 100);
  expect(output.some((e) => e.stream === "stderr" && /… \d+\.\d (MiB|KiB) skipped, see atomic logs/.test(e.text))).toBe(true);
  const work = stage(await show(home, lines.pop().runId), "work");
  expect(statSync(work.errorPath).size).toBe(5_000_000 + Math.floor(5_000_000 / 99)); // fold ends the last, short line with none
  expect(readFileSync(work.outputPath, "utf8")).toBe("last-line\n");
});

e2eTest("no orphans: when the root is SIGKILLed, coordinator, workers and stage processes all exit", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const proc = spawnAtomic(["run", ONE, "--input", `command=echo $$ > ${d}/stage.pid; echo $PPID > ${d}/worker.pid; sleep 30`], { home });
  const worker = await pidFile(`${d}/worker.pid`);
  const stagePgid = await pidFile(`${d}/stage.pid`);
  const coordinator = parentOf(worker);
  const workers = childrenOf(coordinator);
  proc.kill("SIGKILL");
  await proc.exited;
  await waitUntil(
    () => !alive(coordinator) && workers.every((w) => !alive(w)) && !groupAlive(stagePgid),
    10_000,
    "every process of the run to exit",
  );
});

e2eTest("bad pool options are one clear error, exit 2, nothing written", async () => {
  const home = makeTempDir();
  const cases: [string[], RegExp][] = [
    [["--workers", "300"], /--workers must be between 0 and 256, got 300/],
    // No workers of its own leaves stages to worker hosts: only a shared journal has them.
    ...(journalUrlForHome(home) ? [] : ([[["--workers", "0"], /--workers 0 leaves stages to worker hosts, which need a shared Postgres journal/]] as [string[], RegExp][])),
    [["--workers", "abc"], /--workers must be a whole number, got "abc"/],
    [["--work-lease-ms", "1000"], /--work-lease-ms must be between 2000 \(two heartbeats of 1000 ms\)/],
    [["--in-process", "--workers", "2"], /--in-process and --workers cannot be used together/],
  ];
  for (const [flags, message] of cases) {
    const r = await runAtomic(["run", ONE, "--input", "command=true", ...flags], { home });
    expect(r.code).toBe(2);
    expectOneSentence(r.stderr);
    expect(r.stderr).toMatch(message);
  }
  const runs = await runAtomic(["runs", "--json"], { home });
  expect(runs.stdout.trim()).toBe("");
});

e2eTest("a refused run (a bad input) leaves no process and writes nothing", async () => {
  const home = join(makeTempDir(), "fresh-home");
  const refused = await runAtomic(["run", ONE, "--input", "command=true", "--input", "bogus=1"], { home });
  expect(refused.code).toBe(2);
  expectOneSentence(refused.stderr);
  expect(refused.stderr).toMatch(/no input named "bogus"/);
  expect(existsSync(home)).toBe(false);
  expect(processesWithHome(home)).toEqual([]);
  // A home that has a run: a refused one adds nothing to it.
  expect((await runAtomic(["run", ONE, "--input", "command=true"], { home })).code).toBe(0);
  const before = readdirSync(join(home, "artifacts")).sort();
  const again = await runAtomic(["run", ONE, "--input", "command=true", "--input", "bogus=1"], { home });
  expect(again.code).toBe(2);
  expectOneSentence(again.stderr);
  expect(readdirSync(join(home, "artifacts")).sort()).toEqual(before);
  expect(processesWithHome(home)).toEqual([]);
  const runs = await runAtomic(["runs", "--json"], { home });
  expect(runs.stdout.trim().split("\n")).toHaveLength(1);
});

e2eTest("Ctrl-C while the workflow still loads: exit 130, no process, nothing written", async () => {
  const dir = makeTempDir();
  const wf = join(dir, "slow-load.ts");
  const started = join(dir, "loading");
  writeFileSync(
    wf,
    `import { writeFileSync } from "node:fs";\nimport { workflow } from "atomic";\nwriteFileSync(${JSON.stringify(started)}, "");\nawait Bun.sleep(10_000);\nexport default workflow({ name: "slow", async run(ctx) { await ctx.shell("s", "true"); } });\n`,
  );
  const home = join(dir, "home");
  const proc = spawnAtomic(["run", wf], { home });
  await waitUntil(() => existsSync(started), 10_000, "the workflow file to start loading");
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  expect(existsSync(home)).toBe(false);
  expect(processesWithHome(home)).toEqual([]);
});

e2eTest("a run whose steps never use a stage (ctx.tool only) starts no coordinator and no worker", async () => {
  const dir = makeTempDir();
  const home = join(dir, "home");
  const marker = join(dir, "root-pid");
  const gate = join(dir, "gate");
  const proc = spawnAtomic(["run", join(FIX, "tools-only.ts"), "--input", `marker=${marker}`, "--input", `gate=${gate}`, "--json"], { home });
  await waitUntil(() => existsSync(marker) && readFileSync(marker, "utf8") !== "", 20_000, "the second tool step to run");
  const rootPid = Number(readFileSync(marker, "utf8"));
  expect(rootPid).toBe(proc.pid);
  // Mid-run, between its steps: the root has no child process (the pool would be a coordinator).
  expect(childrenOf(rootPid)).toEqual([]);
  writeFileSync(gate, "");
  expect(await proc.exited).toBe(0);
  const result = JSON.parse((await new Response(proc.stdout).text()).trim().split("\n").pop()!);
  expect(result.outputs).toEqual({ sum: 6 });
  expect(existsSync(join(home, "artifacts", result.runId, "worker-logs"))).toBe(false);
});

journalFreeTest("from source (bun src/main.ts) the coordinator and workers are the same file re-run in their roles", async () => {
  const home = makeTempDir();
  // The stage names its worker's command line and that worker's parent's (the coordinator).
  const command = "ps -o args= -p $PPID; ps -o args= -p $(ps -o ppid= -p $PPID)";
  const r = await runAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "2", "--json"], { home, fromSource: true });
  expect(r.code).toBe(0);
  const result = JSON.parse(r.stdout.trim().split("\n").pop()!);
  const [worker, coordinator] = (result.outputs.text as string).split("\n");
  const main = join(ROOT, "src", "main.ts");
  expect(worker).toMatch(new RegExp(`^${BUN} ${main} --internal-workflow-worker w\\d+-[0-9a-z]{20}$`));
  // Its configuration (home, journal URL) is in its environment, not on its command line.
  expect(coordinator).toMatch(new RegExp(`^${BUN} ${main} --internal-pool-coordinator$`));
});

journalFreeTest("worker ids are unique across pools: the pool's index for display, then random, never the pid", async () => {
  const home = makeTempDir();
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    // two stages at once (each waits for its gate file until both run), so each pool starts both its workers
    const d = makeTempDir();
    const proc = spawnAtomic(["run", join(FIX, "gated-fanout.ts"), "--input", `dir=${d}`, "--input", "n=2", "--workers", "2", "--json"], { home });
    await waitUntil(() => existsSync(join(d, "g0.started")) && existsSync(join(d, "g1.started")), 60_000, "both stages to run");
    for (const g of ["g0", "g1"]) writeFileSync(join(d, `go-${g}`), "");
    expect(await proc.exited).toBe(0);
    const result = JSON.parse((await new Response(proc.stdout).text()).trim().split("\n").pop()!);
    const logs = readdirSync(join(home, "artifacts", result.runId, "worker-logs")).filter((f) => f !== "coordinator.log");
    ids.push(...logs.map((f) => f.replace(/\.log$/, "")));
  }
  expect(ids.length).toBeGreaterThanOrEqual(4);
  for (const id of ids) expect(id).toMatch(/^w[12]-[0-9a-z]{20}$/);
  expect(new Set(ids).size).toBe(ids.length);
});

journalFreeTest("--in-process runs stages in the root (no pool processes)", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", ONE, "--input", "command=echo $PPID", "--in-process", "--json"], { home });
  expect(r.code).toBe(0);
  const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  const result = events.pop();
  expect(existsSync(join(home, "artifacts", result.runId, "worker-logs"))).toBe(false);
});


