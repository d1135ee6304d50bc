/**
 * The local service recovers runs by itself (issue 17), through the real
 * binary with real processes and signals: `atomic serve` in a temp home,
 * drivers (`atomic run`) SIGKILLed at known points (a tool step that waits
 * at a gate, a question, a sleep), the service SIGKILLed and restarted, two
 * services on one home. Each test counts the side effects each step had
 * (the fixture's tool steps append their idempotency key to a file): a step
 * recorded before a kill never runs again, the step in flight at a kill
 * runs again (at least once), and the outputs equal an uninterrupted run.
 * Order is asserted (markers, recorded times), never a duration.
 */

import { expect } from "bun:test";
import { concurrentTest } from "../helpers/concurrent.ts";
import { copyFileSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import { PARK_AFTER_MS } from "../../src/service/recovery.ts";
import {
  FIXTURE,
  NO_RECOVERY,
  UNINTERRUPTED,
  countsByStep,
  drivesOf,
  kill9,
  newSetup,
  runIdOf,
  serviceApi,
  serviceCleanup,
  show,
  sideEffects,
  startRun,
  startService,
  twoScansLater,
  untilStatus,
} from "./support.ts";

serviceCleanup();
const T = 120_000;

concurrentTest("kill -9 of a run's driver while the service runs: the service resumes it; outputs as uninterrupted; no recorded step ran again", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  writeFileSync(s.gateFile, "open");
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  // a and b were recorded before the kill: once each; the gate was in flight: twice; c once.
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
  const started = service.events("drive_started");
  expect(started.map((e) => [e.runId, e.reason])).toEqual([[runId, "crashed"]]);
  await service.log.waitFor(/"type":"drive_ended".*"status":"completed"/);
  // The page's detail says the service recovered it; the list marks it.
  const api = await serviceApi(service, `/api/runs/${runId}`);
  expect(api.run.recoveredByService).toBe(1);
  const list = await serviceApi(service, "/api/runs");
  expect(list.runs.find((r: { id: string }) => r.id === runId).recovered).toBe(1);
  expect(list.runs.find((r: { id: string }) => r.id === runId).origins).toEqual(["cli", "recovery"]);
  // Searchable by origin (journal/run-origin.ts): started by the command, recovered by the service.
  for (const origin of ["recovery", "cli"]) expect((await serviceApi(service, `/api/runs?origin=${origin}`)).runs.map((r: { id: string }) => r.id)).toEqual([runId]);
  expect((await serviceApi(service, "/api/runs?origin=api")).runs).toEqual([]);
}, T);

concurrentTest("an idle service waits for the journal to change: no recovery scans while no run is unfinished; a run started then is scanned at once and recovered", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const state = () => serviceApi(service, "/api/service");
  await waitUntil(async () => (await state()).recovery.scans >= 1, 30_000, "the first recovery scan");
  // The scheduler's passes (one a second) are the positive sign that time went by in the service.
  const before = await state();
  await waitUntil(async () => (await state()).schedules.passes >= before.schedules.passes + 3, 30_000, "three schedule passes");
  const idle = await state();
  if (journalUrlForHome(s.home)) {
    // No commit watch on Postgres (src/journal/commit-watch.ts): the scans go on every 500 ms.
    expect(idle.recovery.scans).toBeGreaterThan(before.recovery.scans);
  } else {
    // The service's own lease renewals in between do not wake it.
    expect(idle.recovery.scans).toBe(before.recovery.scans);
  }
  // Another process starts a run (a commit): the duty scans again and watches it from then on, long
  // before the idle floor of 30 s (src/service/recovery.ts IDLE_SCAN_MS), told by the scheduler's passes.
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  const passesAtStart = (await state()).schedules.passes as number;
  await waitUntil(async () => (await state()).recovery.scans > idle.recovery.scans, 30_000, "a recovery scan after the run started");
  expect((await state()).schedules.passes).toBeLessThan(passesAtStart + 10);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  writeFileSync(s.gateFile, "open");
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(service.events("drive_started").map((e) => [e.runId, e.reason])).toEqual([[runId, "crashed"]]);
}, T);

concurrentTest("the service killed and restarted in between: the restarted service resumes the run; no recorded step ran again", async () => {
  const s = newSetup();
  const first = startService(s);
  await first.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  // The first service's drive reaches the gate again (the gate's side effect is there twice) ...
  await waitUntil(() => countsByStep(s, runId).gate === 2, 60_000, "the service's drive to reach the gate");
  const drives = drivesOf(s);
  expect(drives.length).toBe(1);
  // ... then the service and its drive are killed: nobody drives the run.
  await kill9(first.proc);
  for (const pid of drives) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // it went down with the service
    }
  }
  await waitUntil(async () => (await show(s, runId)).status === "crashed", 30_000, "the run to show crashed");
  writeFileSync(s.gateFile, "open");
  const second = startService(s);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 3, c: 1 });
  expect(second.events("drive_started").map((e) => e.runId)).toEqual([runId]);
}, T);

concurrentTest("a drive outlives its service: the service SIGKILLed, the drive finishes the run by itself", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  await waitUntil(() => countsByStep(s, runId).gate === 2, 60_000, "the service's drive to reach the gate");
  await kill9(service.proc);
  writeFileSync(s.gateFile, "open");
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
  await waitUntil(() => drivesOf(s).length === 0, 30_000, "the drive to exit");
}, T);

concurrentTest("a run whose workflow file was deleted: the service recovers it from the code it is pinned to", async () => {
  const s = newSetup();
  const dir = makeTempDir("atomic-service-wf-");
  const file = join(dir, "recoverable.ts");
  copyFileSync(FIXTURE, file);
  const run = startRun(s, "gate", file);
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  rmSync(file);
  writeFileSync(s.gateFile, "open");
  const service = startService(s);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
  expect(service.events("drive_started").map((e) => e.runId)).toEqual([runId]);
  expect(service.events("run_left")).toEqual([]);
}, T);

concurrentTest("a workflow file edited so that it no longer replays: the service resumes the code the run started with", async () => {
  const s = newSetup();
  const dir = makeTempDir("atomic-service-wf-");
  const file = join(dir, "recoverable.ts");
  copyFileSync(FIXTURE, file);
  const run = startRun(s, "gate", file);
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  writeFileSync(file, readFileSync(file, "utf8").replace('step("b", 2)', 'step("bee", 2)'));
  writeFileSync(s.gateFile, "open");
  const service = startService(s);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
  // The edit is not the run's code: no note that the file changed.
  expect(service.events("note").filter((e) => String(e.message).includes("changed since the run started"))).toEqual([]);
}, T);

concurrentTest("ctx.ask answered while nothing drives the run: the service continues it with the answer", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const dir = makeTempDir("atomic-service-cwd-");
  const run = startRun(s, "ask", FIXTURE, {}, dir);
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/"kind":"ask"/);
  const asked = Date.now();
  await kill9(run.proc);
  // Parked on its question, with no driver: the service waits for the answer, it does not spin a drive.
  const inbox = JSON.parse((await runAtomic(["--home", s.home, "--json", "inbox", runId], { home: s.home })).stdout);
  const promptId = (inbox.prompts ?? inbox.questions)[0].id as string;
  await twoScansLater(service);
  expect(service.events("drive_started")).toEqual([]);
  // The question is older than a drive may wait for an answer before the service parks it, and the drive
  // that brings the answer is slow to start (as on a busy machine): scans pass while the run still reads as
  // parked, and the service does not stop that drive for it (it would die of the SIGTERM: a crash).
  await waitUntil(() => Date.now() - asked > PARK_AFTER_MS, PARK_AFTER_MS + 5_000, "the question to be older than the park time");
  writeFileSync(join(dir, "hold-load"), "");
  const answered = await runAtomic(["--home", s.home, "answer", runId, promptId, "yes"], { home: s.home });
  expect(answered.code).toBe(0);
  await service.log.waitFor(/"type":"drive_started"/);
  await twoScansLater(service);
  rmSync(join(dir, "hold-load"));
  const done = await untilStatus(s, runId, "completed");
  expect(service.events("drive_crashed")).toEqual([]);
  expect(done.run.outputs).toEqual({ sum: 6, answer: "yes" });
  expect(service.events("drive_started").map((e) => [e.runId, e.reason])).toEqual([[runId, "answered"]]);
  const e = sideEffects(s);
  expect([e.get(`${runId}:0`), e.get(`${runId}:1`), e.get(`${runId}:3`)]).toEqual([1, 1, 1]);
}, T);

concurrentTest("a drive that waits for an answer is parked (no process waits), and the answer wakes the run again", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const detached = await runAtomic(
    ["--home", s.home, "--quiet", "run", FIXTURE, "--detach", "--input", `sideFile=${s.sideFile}`, "--input", "mode=ask"],
    { home: s.home },
  );
  expect(detached.code).toBe(0);
  const runId = detached.stdout.trim();
  await service.log.waitFor(/"type":"drive_parked"/, 60_000);
  await service.log.waitFor(/"type":"drive_ended".*"status":"awaiting_input"/);
  expect(drivesOf(s)).toEqual([]);
  expect((await show(s, runId)).status).toBe("awaiting_input");
  const inbox = JSON.parse((await runAtomic(["--home", s.home, "--json", "inbox", runId], { home: s.home })).stdout);
  const promptId = (inbox.prompts ?? inbox.questions)[0].id as string;
  expect((await runAtomic(["--home", s.home, "answer", runId, promptId, "no"], { home: s.home })).code).toBe(0);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual({ sum: 6, answer: "no" });
  expect(service.events("drive_started").map((e) => e.reason)).toEqual(["crashed", "answered"]);
}, T);

concurrentTest("ctx.sleep(3000) with its driver gone: the service continues the run at its wake-up time, not before", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "sleep");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/"kind":"sleep"/);
  await kill9(run.proc);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  // The step after the sleep ran after the recorded wake-up time.
  const wakeAt = await recordedWakeAt(s, runId);
  const woke = Number([...sideEffects(s).keys()].find((k) => k.startsWith("woke "))!.slice(5));
  expect(woke).toBeGreaterThanOrEqual(wakeAt);
  // One drive. When the service saw the run asleep, it said when it would resume it, then did; on a busy
  // machine its first look after the kill can come within a second of the wake-up (the sleep is 3 s), and
  // then there is nothing to wait for and nothing to say.
  expect(service.events("drive_started").map((e) => [e.runId, e.reason])).toEqual([[runId, "crashed"]]);
  const noted = service.log.lines.findIndex((l) => l.includes("sleeps; the service resumes it at"));
  const started = service.log.lines.findIndex((l) => l.includes('"type":"drive_started"'));
  if (noted >= 0) expect(started).toBeGreaterThan(noted);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 0, c: 1 });
}, T);

concurrentTest("two services on one home: one is active, the other says which; only one drives the recovered run; the standby takes over when the active one dies", async () => {
  const s = newSetup();
  const a = startService(s);
  await a.log.waitFor(/"type":"service_active"/);
  const b = startService(s);
  const standby = await b.log.waitFor(/"type":"service_standby"/);
  expect(standby).toContain(`the service of process ${a.proc.pid} on`);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  writeFileSync(s.gateFile, "open");
  await untilStatus(s, runId, "completed");
  expect([a.events("drive_started").length, b.events("drive_started").length]).toEqual([1, 0]);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
  // A second run crashes after the active service died: the standby, active now, recovers it, once.
  await kill9(a.proc);
  await b.log.waitFor(/"type":"service_active"/);
  rmSync(s.gateFile);
  const again = startRun(s, "gate");
  const secondId = await runIdOf(again.out);
  await again.out.waitFor(/at the gate/);
  await kill9(again.proc);
  writeFileSync(s.gateFile, "open");
  await untilStatus(s, secondId, "completed");
  expect(b.events("drive_started").map((e) => e.runId)).toEqual([secondId]);
  expect(countsByStep(s, secondId)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
}, T);

concurrentTest("SIGTERM of the service stops the runs it drives resumably; a new service continues them", async () => {
  const s = newSetup();
  const first = startService(s);
  await first.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  await waitUntil(() => countsByStep(s, runId).gate === 2, 60_000, "the service's drive to reach the gate");
  first.proc.kill("SIGTERM");
  expect(await first.proc.exited).toBe(0);
  expect(drivesOf(s)).toEqual([]);
  const stopped = await show(s, runId);
  expect(stopped.status).toBe("interrupted");
  writeFileSync(s.gateFile, "open");
  const second = startService(s);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(second.events("drive_started").map((e) => [e.runId, e.reason])).toEqual([[runId, "service_stopped"]]);
  expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 3, c: 1 });
}, T);

concurrentTest("run --detach returns the run id at once and leaves the run to the service; without a service it refuses before writing", async () => {
  const s = newSetup();
  writeFileSync(s.gateFile, "open");
  const args = ["--home", s.home, "run", FIXTURE, "--detach", "--input", `sideFile=${s.sideFile}`, "--input", `gateFile=${s.gateFile}`];
  const refused = await runAtomic(args, { home: s.home });
  expect(refused.code).toBe(2);
  expect(refused.stderr).toContain("no atomic service is running on");
  expect(refused.stderr).toContain("hint: start one with atomic serve");
  expect((await runAtomic(["--home", s.home, "--json", "runs"], { home: s.home })).stdout).toBe("");
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const detached = await runAtomic(args, { home: s.home });
  expect(detached.code).toBe(0);
  const runId = detached.stdout.split("\n")[0]!.trim();
  expect(runId).toMatch(/^[0-9a-z]+$/);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual(UNINTERRUPTED);
  expect(service.events("drive_started").map((e) => e.runId)).toEqual([runId]);
  // The service's first drive of a run left to it is not a recovery (journal/run-origin.ts).
  expect((await serviceApi(service, "/api/runs?origin=recovery")).runs).toEqual([]);
  expect((await serviceApi(service, "/api/runs?origin=cli")).runs.map((r: { id: string }) => r.id)).toEqual([runId]);
  expect((await serviceApi(service, "/api/runs")).runs.find((r: { id: string }) => r.id === runId).origins).toEqual(["cli"]);
}, T);

concurrentTest("a workflow with recover: false is not recovered: its crashed run waits for a person", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate", NO_RECOVERY);
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  await service.log.waitFor(/opted out of recovery/);
  expect(service.events("drive_started")).toEqual([]);
  expect((await show(s, runId)).status).toBe("crashed");
  // Nor can it be left to the service: --detach is refused before anything is written.
  const detached = await runAtomic(["--home", s.home, "resume", runId, "--detach"], { home: s.home });
  expect(detached.code).toBe(2);
  expect(detached.stderr).toBe("error: workflow no-recovery opted out of recovery (recover: false), so the service would never drive a detached run of it.\nhint: drop --detach to drive the run here\n");
  expect((await show(s, runId)).status).toBe("crashed");
  const fresh = await runAtomic(["--home", s.home, "run", NO_RECOVERY, "--detach", "--input", `sideFile=${s.sideFile}`], { home: s.home });
  expect(fresh.code).toBe(2);
  expect(fresh.stderr).toContain("opted out of recovery (recover: false)");
  expect((await runAtomic(["--home", s.home, "--json", "runs"], { home: s.home })).stdout.trim().split("\n").length).toBe(1);
}, T);

concurrentTest("a run whose driver crashes on every drive is tried three times with back-off, then left for a person with the reason", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "crash");
  const runId = await runIdOf(run.out);
  await run.proc.exited; // the first driver killed itself
  const left = await service.log.waitFor(/"type":"run_left"/, 60_000);
  expect(left).toContain("its driver crashed 3 times in a row (last: killed by SIGKILL");
  expect(service.events("drive_crashed").map((e) => e.crashes)).toEqual([1, 2]);
  expect(service.events("drive_started").length).toBe(3);
  const shown = await show(s, runId);
  expect(shown.status).toBe("crashed");
  expect(shown.run.error?.message).toContain("the service stopped recovering this run: its driver crashed 3 times in a row");
  // The first driver and the three drives of the service each ran the crashing step once; a and b never again.
  expect(sideEffects(s).get("crash")).toBe(4);
  expect(countsByStep(s, runId)).toMatchObject({ a: 1, b: 1 });
}, T);

concurrentTest("the crash streak survives a restart of the service: the journal shows the drives that crashed", async () => {
  const s = newSetup();
  const first = startService(s);
  await first.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "crash");
  const runId = await runIdOf(run.out);
  await run.proc.exited;
  await first.log.waitFor(/"type":"drive_crashed"/, 60_000);
  await kill9(first.proc);
  const second = startService(s);
  const left = await second.log.waitFor(/"type":"run_left"/, 60_000);
  expect(left).toContain("its driver crashed 3 times in a row");
  expect([first.events("drive_started").length, second.events("drive_started").length]).toEqual([1, 2]);
  expect(sideEffects(s).get("crash")).toBe(4);
  expect((await show(s, runId)).status).toBe("crashed");
}, T);

async function recordedWakeAt(s: ReturnType<typeof newSetup>, runId: string): Promise<number> {
  const { openJournal } = await import("../../src/journal/open.ts");
  const { journalOf } = await import("../helpers/postgres.ts");
  const journal = await openJournal({ home: s.home, durability: "full", ...journalOf(s.home) });
  try {
    const events = await journal.readEvents(runId as never);
    const sleep = events.find((e) => e.type === "checkpoint" && (e.payload as { kind?: string }).kind === "sleep")!;
    return (sleep.payload as { result: { wakeAt: number } }).result.wakeAt;
  } finally {
    await journal.close();
  }
}

concurrentTest("a chain of runs (ctx.continueAsNew) is recovered as one: the service's drive follows the hand-over, and its end names the chain's last run", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "chain");
  const firstId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  writeFileSync(s.gateFile, "open");
  const ended = JSON.parse(await service.log.waitFor(/"type":"drive_ended"/, 60_000)) as { runId: string; status: string; lastRunId?: string; message: string };
  expect(ended.runId).toBe(firstId);
  expect(ended.status).toBe("completed");
  expect(ended.lastRunId).toBeDefined();
  expect(ended.message).toBe(`run ${firstId} continued as new; its chain ended with run ${ended.lastRunId} completed`);
  expect((await show(s, firstId)).status).toBe("continued");
  const last = await show(s, ended.lastRunId!);
  expect(last.status).toBe("completed");
  expect(last.run.outputs).toEqual(UNINTERRUPTED);
  expect(service.events("drive_started").map((e) => e.runId)).toEqual([firstId]);
}, T);
