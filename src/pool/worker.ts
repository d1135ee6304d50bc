/**
 * The worker process (`atomic --internal-workflow-worker <id>`): runs one
 * stage at a time for its coordinator, through the same runners the root
 * uses in-process.
 *
 * While a stage runs the worker heartbeats every `heartbeatMs` from its
 * start (each heartbeat is an operation with its own id) and sends runner
 * events in batches about every 250 ms (all but model text, which only
 * watchers read: they have it from the broker). When the stage ends it sends `complete`,
 * retried with the same operation id until a receipt arrives, for as long as
 * the coordinator is connected: a result is never dropped while someone can
 * take it. Until then the worker still holds the item: its heartbeats name
 * it and so does its answer to a ping (`pong.holds`), so a coordinator that
 * expects other work than the worker holds takes the slot back. A result
 * that cannot even be sent is reported (`commit_failed`) and the item given
 * back. A "stale" receipt means the coordinator gave the item to another
 * worker and this result was refused. A worker whose lease could not be
 * renewed by its local deadline while the coordinator kept answering
 * (work-lease-deadline.ts) kills its stage and commits nothing: the item
 * may be another worker's by then.
 *
 * Shutdown: on `shutdown`, on IPC disconnect (the coordinator is gone) or
 * on SIGTERM, the stage's process group is killed and the worker exits;
 * on SIGTERM it first reports what it has (so a late, stale commit is
 * visible in the logs). SIGINT is ignored: the root decides what Ctrl-C
 * does.
 */

import { join } from "node:path";
import { STDOUT_LOG } from "../artifacts/stage-logs.ts";
import { getRunner } from "../runners/registry.ts";
import { transcriptMark } from "../runners/agent-files.ts";
import { killAllGroups, stopsSettled } from "../runners/shell/process-groups.ts";
import type { RunnerEvent, RunnerHandle, StageRequest } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import { ensureError } from "../shared/errors.ts";
import { faultPoint } from "../shared/fault-points.ts";
import { POOL_PROTOCOL_VERSION, assertNever, parseMessage } from "./protocol/common.ts";
import { StageToolsClient } from "../intercom/stage-tools.ts";
import { setRunToolsPort } from "../runners/run-tools.ts";
import { ToWorkerSchema, type FromWorker, type ToWorker } from "./protocol/coordinator-worker.ts";
import { EventBatcher } from "./event-batcher.ts";
import { pinEnvironment } from "../runners/stage-env.ts";
import { WorkLeaseDeadline } from "./work-lease-deadline.ts";
import { trace } from "./trace.ts";
import { writeStderr } from "../shared/raw-stderr.ts";
import { readEnv, setEnv } from "../shared/config/environment.ts";
import { LivePublisher } from "../intercom/live.ts";
import { leftoverCheck, withCleanup } from "./leftovers.ts";

interface Running {
  ref: { workId: string; generation: number; epoch: number };
  handle: RunnerHandle;
  batcher: EventBatcher;
  /** Stopped by its work lease's local deadline: killed, and its result is not committed. */
  fenced?: boolean;
}

const RECEIPT_TIMEOUT_MS = 2_000;
/** The longest an exiting worker waits for its stage's processes to end by themselves (their runner's grace is 2 s). */
const EXIT_GRACE_MS = 3_000;
/**
 * How long a stage runs before its process group is reported (`started`).
 * One that ends sooner, most short stages, needs no report: its commit says
 * it is over. Should this worker die within that window, the coordinator
 * still finds the stage by its ATOMIC_WORKER_ID (reap.ts).
 */
const STARTED_REPORT_MS = 25;

export async function workerMain(argv: string[]): Promise<void> {
  const workerId = argv[0] ?? `w-${process.pid}`;
  // Stages inherit it, so the coordinator can find them if this worker is lost (reap.ts).
  setEnv("ATOMIC_WORKER_ID", workerId);
  // Nothing changes this process's environment from here on: what stages inherit of it is worked out once.
  pinEnvironment();
  const heartbeatMs = readEnv("ATOMIC_HEARTBEAT_MS");
  const deadline = new WorkLeaseDeadline(readEnv("ATOMIC_WORK_LEASE_MS"));
  // Live events (model deltas, tool calls) go straight to watchers through the broker, not through the root (intercom/live.ts).
  const liveHome = readEnv("ATOMIC_LIVE_HOME");
  const live = liveHome ? new LivePublisher(liveHome) : undefined;
  // The run tools (message, ask_agent, reply) of its stages reach their run's driver through the broker.
  if (liveHome) setRunToolsPort(new StageToolsClient(liveHome));
  let running: Running | undefined;
  /** The item whose result is being committed (its stage has ended; no receipt yet). */
  let committing: Running["ref"] | undefined;
  let opSeq = 0;
  let stopping = false;
  const receipts = new Map<string, (status: string) => void>();

  const send = (msg: FromWorker) => {
    if (process.connected) process.send?.(msg);
  };
  const newOp = () => `${workerId}:${++opSeq}`;
  const log = (line: string) => writeStderr(`${new Date().toISOString()} ${workerId} ${line}\n`);

  /** What this worker holds: the stage it runs, else the result it is committing. */
  const holds = () => running?.ref ?? committing;

  const beat = () => {
    if (running && !running.fenced && deadline.passed()) {
      // Its lease may be another worker's by now: the stage goes, and its result with it (work-lease-deadline.ts).
      log(`work ${running.ref.workId}: its lease could not be renewed by its deadline; killing the stage, committing nothing`);
      running.fenced = true;
      running.handle.cancel("the work lease could not be renewed");
      killAllGroups("SIGKILL");
    }
    const refs = [running?.fenced ? undefined : running?.ref, committing].filter((r) => r !== undefined);
    if (refs.length === 0) return;
    const opId = newOp();
    deadline.heartbeatSent(opId);
    send({ type: "heartbeat", opId, refs });
  };
  /**
   * Armed again as each stage starts: the claim that leased its item has just set its lease, so the first renewal is
   * due a period later. (On a timer of the worker's own, a tick came anywhere in the stage's first second and
   * renewed a lease a moment old: a stage of about a second cost a heartbeat, its receipt and a journal write more.)
   */
  let heartbeat = setInterval(beat, heartbeatMs);

  /**
   * Sends `complete` until a receipt comes back (same op id every time), as
   * long as the coordinator is connected; "disconnected" once it is not.
   * A send that throws (the result cannot go out) is reported as
   * `commit_failed` instead: retrying it would hold the item for ever.
   */
  const commit = async (ref: Running["ref"], result: StageResult, events: RunnerEvent[] = []): Promise<string> => {
    const opId = newOp();
    committing = ref;
    try {
      for (let first = true; ; first = false) {
        if (!process.connected) return "disconnected";
        let timer: ReturnType<typeof setTimeout> | undefined;
        const answer = new Promise<string>((resolve) => {
          receipts.set(opId, resolve);
          timer = setTimeout(() => resolve("timeout"), RECEIPT_TIMEOUT_MS);
          timer.unref();
        });
        try {
          faultPoint("worker-before-commit");
          trace("commit_sent", ref.workId);
          send({ type: "complete", opId, ref, result, ...(first && events.length > 0 ? { events } : {}) });
        } catch (err) {
          const message = ensureError(err).message;
          log(`could not send the result of work ${ref.workId}: ${message}`);
          send({ type: "commit_failed", ref, message });
          return "failed";
        }
        const status = await answer;
        clearTimeout(timer); // answered: the worker is not woken 2 s later for nothing (once a stage)
        receipts.delete(opId);
        if (status !== "timeout") return status;
        log(`no receipt for the result of work ${ref.workId} within ${RECEIPT_TIMEOUT_MS} ms; sending it again`);
      }
    } finally {
      if (committing === ref) committing = undefined;
    }
  };

  const start = (msg: Extract<ToWorker, { type: "start" }>) => {
    trace("start", msg.workId);
    if (running) {
      log(`refused work ${msg.workId}: already running ${running.ref.workId}`);
      return;
    }
    const ref = { workId: msg.workId, generation: msg.generation, epoch: msg.epoch };
    const request = msg.request as StageRequest;
    const batcher = new EventBatcher(250, (events) => send({ type: "events", ref, events }));
    // A watcher's mark (docs/design/live-events.md, "Marks") writes the attempt's transcript to disk first.
    const publish = live?.stage(request.runId, request.stageKey, request.attempt, () => transcriptMark(request.artifactDir));
    let handle: RunnerHandle;
    let report: ReturnType<typeof setTimeout> | undefined;
    try {
      handle = getRunner(request.runner).start(request, (event) => {
        publish?.(event);
        // Model text reaches watchers through the broker only (`publish`): the root has no use for it
        // (docs/design/live-events.md, "Publishing"), and carrying it on through the coordinator cost each
        // streamed chunk a copy and a merge here and serialization, parsing and validation at two IPC hops.
        if (event.type === "text_delta") return;
        if (event.type === "started") {
          trace("spawned", ref.workId);
          // The root's signal that the stage left the queue (it was `queued` until now), with the time it really
          // started, and the coordinator's process group to kill should this worker be lost: one `events` batch,
          // ahead of anything the stage says later. A stage that ends sooner sends it with its result (one
          // message per stage, not three: on a machine busy with short stages that was a tenth of the pool's CPU).
          batcher.push({ type: "started", at: Date.now(), ...(event.sessionId ? { sessionId: event.sessionId } : {}) });
          const pgid = event.pid;
          report = setTimeout(() => send({ type: "events", ref, events: batcher.take(), ...(pgid ? { pgid } : {}) }), STARTED_REPORT_MS);
        } else batcher.push(event);
      });
    } catch (err) {
      const result: StageResult = {
        status: "failed",
        text: "",
        exitCode: null,
        outputPath: join(request.artifactDir, STDOUT_LOG),
        error: { code: "runner_failed", message: ensureError(err).message },
      };
      void commit(ref, result);
      return;
    }
    const mine: Running = { ref, handle, batcher };
    running = mine;
    deadline.started();
    clearInterval(heartbeat);
    heartbeat = setInterval(beat, heartbeatMs);
    void handle.result.then(async (result) => {
      trace("exited", ref.workId);
      clearTimeout(report);
      live?.ended(request.runId, request.stageKey, request.attempt);
      const pending = batcher.take();
      // Free before committing: the coordinator may hand us the next item in the same breath as the receipt.
      if (running?.ref === ref) running = undefined;
      if (mine.fenced) {
        if (stopping) exit(0);
        return;
      }
      // Anything of the attempt that left its process group and outlived the runner's cleanup: named and killed.
      const status = await commit(ref, withCleanup(result, await leftoverCheck(request, workerId)), pending);
      if (status !== "committed") log(`commit of work ${ref.workId} (generation ${ref.generation}, epoch ${ref.epoch}) refused: ${status}`);
      if (stopping) exit(0);
    });
  };

  let exiting = false;
  const exit = (code: number) => {
    if (exiting) return;
    exiting = true;
    clearInterval(heartbeat);
    // A stage still running, or still in its stop's grace period, ends the way its runner ends it (SIGTERM,
    // grace, SIGKILL, its tools' processes included) before the groups are killed outright, bounded in time.
    const stage = running && !running.fenced ? running : undefined;
    stage?.handle.cancel("worker stopping");
    const settled = Promise.resolve(stage?.handle.result).then(() => stopsSettled());
    void Promise.race([settled, Bun.sleep(EXIT_GRACE_MS)]).finally(() => {
      killAllGroups("SIGKILL");
      process.exit(code);
    });
  };

  process.on("message", (raw: unknown) => {
    const msg = parseMessage(ToWorkerSchema, raw, "coordinator");
    if (!msg) return;
    if (msg.type !== "receipt") deadline.heard(); // a receipt tells the deadline itself (work-lease-deadline.ts)
    switch (msg.type) {
      case "start":
        if (msg.receipt) receipts.get(msg.receipt.opId)?.(msg.receipt.status);
        start(msg);
        break;
      case "cancel":
        if (running?.ref.workId === msg.workId) running.handle.cancel(msg.reason);
        break;
      case "deliver": {
        const live = running?.ref.workId === msg.workId ? running : undefined;
        if (live) void live.handle.send(msg.message.text, msg.mode, msg.message.id);
        send({ type: "deliver_result", workId: msg.workId, messageId: msg.message.id, delivered: live !== undefined });
        break;
      }
      case "wrap_up":
        if (running?.ref.workId === msg.workId) running.handle.wrapUp?.(msg.text, msg.reason);
        break;
      case "hold":
        if (running?.ref.workId === msg.workId) running.handle.hold?.(msg.held);
        break;
      case "ping":
        send({ type: "pong", nonce: msg.nonce, holds: holds() ?? null });
        break;
      case "control":
        // A worker starts nothing on its own, so pausing needs no action here; the ack says it saw the revision.
        send({ type: "control_ack", rev: msg.rev });
        break;
      case "receipt":
        if (!deadline.receipt(msg.opId, msg.status)) receipts.get(msg.opId)?.(msg.status);
        break;
      case "shutdown":
        exit(0);
        break;
      default:
        assertNever(msg);
    }
  });
  process.on("disconnect", () => exit(0));
  process.on("SIGINT", () => {});
  process.on("SIGTERM", () => {
    // Retired by the coordinator: report what we have (it will be refused if stale), then go.
    log("SIGTERM: stopping");
    stopping = true;
    if (!running) return exit(0);
    running.handle.cancel("worker stopping");
    setTimeout(() => exit(0), RECEIPT_TIMEOUT_MS).unref();
  });
  faultPoint("worker-before-ready");
  send({ type: "ready", version: POOL_PROTOCOL_VERSION, workerId, pid: process.pid });
  log(`ready (pid ${process.pid})`);
  await new Promise(() => {}); // runs until told to exit
}
