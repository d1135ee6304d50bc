/**
 * The engine's events as OpenTelemetry spans, following the GenAI semantic
 * conventions (semantic-conventions 1.45, the gen_ai names of the
 * "Development" status; docs/design/observability.md has the whole shape):
 *
 *   invoke_workflow <workflow>        a drive of a run (a resumed drive: a child of the first one's span)
 *   ├─ invoke_agent <stage>           an agent stage attempt (its span id: trace-ids.ts; TRACEPARENT)
 *   │  ├─ chat <model>                one model call: usage, finish reasons, atomic's cost
 *   │  └─ execute_tool <tool>         one of the agent's tool calls
 *   ├─ shell <stage>                  a shell stage attempt
 *   ├─ tool|sleep|ask|send <name>     the other steps
 *   └─ child <name>
 *      └─ invoke_workflow <child>     the child run
 *
 * A ctx.tool step that ends well within SHORT_TOOL_MS gets no span of its
 * own (the journal does not record its start either: steps/tool.ts), only
 * a count on its run's span (`atomic.steps.short`): a loop of thousands
 * of quick steps stays cheap to trace (bench/tracing.ts).
 *
 * Messages, questions, waits, pauses and warnings are span events. A span
 * is ended, with its status, by whoever ends or abandons what it stands
 * for: the attempt's end (attempt_ended), the run's end, or, for a drive
 * lost to a crash, the drive that resumes the run (`recover`).
 */

import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Attributes, type Context, type Span, type Tracer as OtelApiTracer } from "@opentelemetry/api";
import {
  ATTR_GEN_AI_AGENT_NAME,
  ATTR_GEN_AI_INPUT_MESSAGES,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_TOOL_CALL_ID,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  ATTR_GEN_AI_WORKFLOW_NAME,
} from "@opentelemetry/semantic-conventions/incubating";
import type { JournalEvent } from "../../journal/runs.ts";
import type { StageRequest } from "../../runners/types.ts";
import type { Usage } from "../../sdk/types.ts";
import { EVENT, type StepStartedPayload } from "../journal-events.ts";
import type { EngineEvent } from "../observer.ts";
import { ChosenIds, createProvider, exportFailed, flushLimitMs, type SpanTally } from "./otel-setup.ts";
import { runSpanIdOf, stageSpanIdOf, traceIdOf } from "./trace-ids.ts";
import type { TraceSettings, Tracer } from "./types.ts";

const FAILED_RUN = new Set(["failed", "blocked", "cancelled", "interrupted"]);
/** A ctx.tool attempt shorter than this gets no span (the tool step's TOOL_VISIBLE_AFTER_MS, steps/tool.ts). */
const SHORT_TOOL_MS = 25;

interface Open {
  span: Span;
  ctx: Context;
}

interface Attempt extends Open {
  runner: string;
  model?: string;
  tools: Map<string, Span>;
}

export class OtelTracer implements Tracer {
  private readonly ids = new ChosenIds();
  private readonly tally: SpanTally = { ended: 0, sent: 0 };
  /** Spans already reported dropped by a flush. */
  private dropped = 0;
  /** Sends what is queued and waits for the answers to every batch sent (otel-setup.ts). */
  private readonly flushAll: () => Promise<void>;
  private readonly tracer: OtelApiTracer;
  private readonly runs = new Map<string, Open & { rootId: string; short: number }>();
  /** ctx.tool steps started and not ended yet: a span only if they turn out long, retried or failed. */
  private readonly tools = new Map<string, { name: string; at: number; attempts: number }>();
  /** A child run's parent span: its child step's. */
  private readonly childParents = new Map<string, Context>();
  private readonly steps = new Map<string, Open>();
  private readonly attempts = new Map<string, Attempt>();

  constructor(private readonly settings: TraceSettings) {
    const setup = createProvider(settings, this.ids, this.tally);
    this.flushAll = setup.flush;
    this.tracer = setup.provider.getTracer("atomic");
  }

  readonly observe = (event: EngineEvent): void => {
    try {
      this.handle(event);
    } catch {
      // traces never break a run
    }
  };

  stageAttempt(request: StageRequest, workflow: string): string | undefined {
    const run = this.runs.get(request.runId);
    if (!run) return undefined;
    const shell = request.runner === "shell";
    const attrs: Attributes = {
      "atomic.run.id": request.runId,
      "atomic.stage.key": request.stageKey,
      "atomic.attempt": request.attempt,
      "atomic.retry": request.attempt > 1,
      "atomic.runner": request.runner,
      [ATTR_GEN_AI_WORKFLOW_NAME]: workflow,
    };
    if (!shell) {
      attrs[ATTR_GEN_AI_OPERATION_NAME] = "invoke_agent";
      attrs[ATTR_GEN_AI_AGENT_NAME] = request.stageName;
      attrs[ATTR_GEN_AI_PROVIDER_NAME] = request.runner;
      if (request.model) attrs[ATTR_GEN_AI_REQUEST_MODEL] = request.model;
      if (this.settings.captureContent && request.prompt) attrs[ATTR_GEN_AI_INPUT_MESSAGES] = JSON.stringify([{ role: "user", parts: [{ type: "text", content: request.prompt }] }]);
    } else {
      attrs["atomic.stage.kind"] = "shell";
    }
    this.ids.nextSpanId = stageSpanIdOf(request.runId, request.stageKey, request.attempt);
    const span = this.tracer.startSpan(`${shell ? "shell" : "invoke_agent"} ${request.stageName}`, { kind: SpanKind.INTERNAL, attributes: attrs }, run.ctx);
    const ctx = trace.setSpan(run.ctx, span);
    this.attempts.set(key(request.runId, request.stageKey), { span, ctx, runner: request.runner, ...(request.model ? { model: request.model } : {}), tools: new Map() });
    const sc = span.spanContext();
    return `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags & TraceFlags.SAMPLED ? "01" : "00"}`;
  }

  recover(runId: string, workflow: string, events: readonly JournalEvent[]): void {
    const drives = events.filter((e) => e.type === EVENT.runStarted || e.type === EVENT.runResumed);
    const lost = drives.at(-1);
    if (!lost) return;
    const lastAt = events.at(-1)!.at;
    const first = lost.type === EVENT.runStarted;
    const traceId = traceIdOf(runId);
    const status = { code: SpanStatusCode.ERROR, message: "the process driving the run was lost; the run was resumed" };
    if (first) this.ids.nextTraceId = traceId;
    if (first) this.ids.nextSpanId = runSpanIdOf(runId);
    const drive = this.tracer.startSpan(
      `invoke_workflow ${workflow}`,
      { kind: SpanKind.INTERNAL, startTime: lost.at, attributes: { [ATTR_GEN_AI_OPERATION_NAME]: "invoke_workflow", [ATTR_GEN_AI_WORKFLOW_NAME]: workflow, "atomic.run.id": runId, "atomic.resumed": !first, "atomic.lost": true } },
      first ? ROOT_CONTEXT : remoteRun(runId, runId),
    );
    drive.setStatus(status);
    const ctx = trace.setSpan(ROOT_CONTEXT, drive);
    // Stage attempts it started and nobody ended: their spans (the ids their processes were given) end here.
    const ended = new Set<string>();
    for (let i = events.length - 1; i >= 0 && events[i] !== lost; i--) {
      const e = events[i]!;
      if (e.key === null) continue;
      const p = e.payload as StepStartedPayload;
      if (e.type === EVENT.checkpoint || e.type === EVENT.stepFailed) ended.add(`${e.key}\u0000${p.attempt ?? "any"}`);
      if (e.type === EVENT.checkpoint) ended.add(`${e.key}\u0000any`);
      if (e.type !== EVENT.stepStarted || p.kind !== "stage" || ended.has(`${e.key}\u0000any`) || ended.has(`${e.key}\u0000${p.attempt}`)) continue;
      this.ids.nextSpanId = stageSpanIdOf(runId, e.key, p.attempt ?? 1);
      const span = this.tracer.startSpan(`${p.runner === "shell" ? "shell" : "invoke_agent"} ${p.name}`, { startTime: p.requestedAt ?? e.at, attributes: { "atomic.run.id": runId, "atomic.stage.key": e.key, "atomic.attempt": p.attempt ?? 1, "atomic.lost": true, ...(p.runner ? { "atomic.runner": p.runner } : {}) } }, ctx);
      span.setStatus({ code: SpanStatusCode.ERROR, message: "abandoned: the process driving the run was lost" });
      span.end(lastAt);
      ended.add(`${e.key}\u0000any`);
    }
    drive.end(lastAt);
  }

  async flush(): Promise<number> {
    // A drive that loses its receiver still ends: the flush is bounded (otel-setup.ts).
    const limitMs = flushLimitMs();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const sent = await Promise.race([
      this.flushAll().then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), limitMs))),
    ]);
    clearTimeout(timer);
    if (!sent) exportFailed(`no answer within ${limitMs / 1000} s`);
    // What was ended and not taken by the receiver by now is lost: dropped from a full queue, refused, or still
    // on its way when the process exits (a batch that gets through later only lowers the next flush's figure).
    const lost = this.tally.ended - this.tally.sent - this.dropped;
    if (lost <= 0) return 0;
    this.dropped += lost;
    return lost;
  }

  private handle(e: EngineEvent): void {
    switch (e.type) {
      case "run_started":
        return this.runStarted(e);
      case "run_ended": {
        const run = this.runs.get(e.runId);
        if (!run) return;
        run.span.setAttribute("atomic.run.status", e.status);
        if (run.short > 0) run.span.setAttribute("atomic.steps.short", run.short);
        if (e.appendLatency) {
          run.span.setAttributes({ "atomic.journal.appends": e.appendLatency.count, "atomic.journal.append_ms.sum": e.appendLatency.sumMs, "atomic.journal.append_ms.max": e.appendLatency.maxMs });
        }
        if (FAILED_RUN.has(e.status)) run.span.setStatus({ code: SpanStatusCode.ERROR, message: e.error?.message ?? e.status });
        if (e.error) run.span.setAttribute("error.type", e.error.code ?? e.error.name);
        run.span.end(e.at);
        this.runs.delete(e.runId);
        return;
      }
      case "step_started": {
        if (e.kind === "stage") {
          if (e.queued) this.attempts.get(key(e.runId, e.position))?.span.setAttribute("atomic.queued", true);
          return;
        }
        if (e.kind === "tool") {
          const k = key(e.runId, e.position);
          const seen = this.tools.get(k);
          if (seen) seen.attempts++;
          else this.tools.set(k, { name: e.name, at: e.at, attempts: 1 });
          return;
        }
        const open = this.steps.get(key(e.runId, e.position));
        if (open) {
          open.span.addEvent("attempt", { "atomic.attempt": e.attempt }, e.at);
          return;
        }
        const run = this.runs.get(e.runId);
        if (!run) return;
        const span = this.tracer.startSpan(`${e.kind} ${e.name}`, { startTime: e.at, attributes: { "atomic.step.kind": e.kind, "atomic.step.key": e.position, "atomic.attempt": e.attempt, "atomic.run.id": e.runId } }, run.ctx);
        const ctx = trace.setSpan(run.ctx, span);
        this.steps.set(key(e.runId, e.position), { span, ctx });
        if (e.childRunId) this.childParents.set(e.childRunId, ctx);
        return;
      }
      case "step_ended": {
        if (e.replayed) return;
        const k = key(e.runId, e.position);
        if (e.kind === "tool") return this.toolEnded(k, e);
        const open = e.kind === "stage" ? this.attempts.get(k) : this.steps.get(k);
        if (!open) return;
        if (e.status !== "completed") open.span.setStatus({ code: SpanStatusCode.ERROR, message: e.error?.message ?? e.status });
        if (e.error?.code) open.span.setAttribute("error.type", e.error.code);
        open.span.end(e.at);
        if (e.kind === "stage") this.attempts.delete(k);
        else this.steps.delete(k);
        return;
      }
      case "step_running":
        this.attempts.get(key(e.runId, e.position))?.span.addEvent("started on a worker", {}, e.at);
        return;
      case "stage_usage":
        return this.chat(e);
      case "stage_tool":
        return this.tool(e);
      case "attempt_ended": {
        const k = key(e.runId, e.position);
        const open = this.attempts.get(k);
        if (!open) return;
        for (const t of open.tools.values()) t.end(e.at);
        open.span.setAttribute("atomic.stage.status", e.status);
        if (e.usage) open.span.setAttributes(usageAttributes(e.usage));
        if (e.status !== "completed") open.span.setStatus({ code: SpanStatusCode.ERROR, message: e.error?.message ?? e.status });
        if (e.error) open.span.setAttribute("error.type", e.error.code);
        open.span.end(e.at);
        this.attempts.delete(k);
        return;
      }
      case "message":
        (this.attempts.get(key(e.runId, e.position)) ?? this.runs.get(e.runId))?.span.addEvent("message", { "atomic.message.id": e.messageId, "atomic.message.state": e.state, "atomic.message.live": e.live, "atomic.stage.key": e.position }, e.at);
        return;
      case "prompt":
        this.runs.get(e.runId)?.span.addEvent("question", { "atomic.prompt.id": e.promptId, "atomic.prompt.state": e.state, ...(this.settings.captureContent ? { "atomic.prompt.question": e.question } : {}) }, e.at);
        return;
      case "step_waiting":
        this.runs.get(e.runId)?.span.addEvent("waiting", { "atomic.step.key": e.position, "atomic.wait.reason": e.reason }, e.at);
        return;
      case "paused":
      case "unpaused":
      case "warning":
        this.runs.get(e.runId)?.span.addEvent(e.type, e.type === "warning" ? { "atomic.warning": e.message } : {}, e.at);
        return;
      default:
        return;
    }
  }

  /** A ctx.tool step ended: a span (started when it did) if it was long, retried or failed; else a count on its run. */
  private toolEnded(k: string, e: Extract<EngineEvent, { type: "step_ended" }>): void {
    const tool = this.tools.get(k);
    this.tools.delete(k);
    const run = this.runs.get(e.runId);
    if (!tool || !run) return;
    if (e.status === "completed" && tool.attempts === 1 && e.at - tool.at < SHORT_TOOL_MS) {
      run.short++;
      return;
    }
    const span = this.tracer.startSpan(`tool ${tool.name}`, { startTime: tool.at, attributes: { "atomic.step.kind": "tool", "atomic.step.key": e.position, "atomic.attempts": tool.attempts, "atomic.run.id": e.runId } }, run.ctx);
    if (e.status !== "completed") span.setStatus({ code: SpanStatusCode.ERROR, message: e.error?.message ?? e.status });
    if (e.error?.code) span.setAttribute("error.type", e.error.code);
    span.end(e.at);
  }

  private runStarted(e: Extract<EngineEvent, { type: "run_started" }>): void {
    const parent = e.parentId ? this.runs.get(e.parentId) : undefined;
    const rootId = parent?.rootId ?? (e.parentId ?? e.runId);
    let ctx: Context;
    if (e.resumed) {
      ctx = remoteRun(rootId, e.runId); // the first drive's span, wherever it was sent from
    } else if (e.parentId) {
      ctx = this.childParents.get(e.runId) ?? parent?.ctx ?? remoteRun(rootId, e.parentId);
      this.ids.nextSpanId = runSpanIdOf(e.runId);
    } else {
      ctx = ROOT_CONTEXT;
      this.ids.nextTraceId = traceIdOf(e.runId);
      this.ids.nextSpanId = runSpanIdOf(e.runId);
    }
    this.childParents.delete(e.runId);
    const span = this.tracer.startSpan(
      `invoke_workflow ${e.workflow}`,
      {
        kind: SpanKind.INTERNAL,
        startTime: e.at,
        attributes: {
          [ATTR_GEN_AI_OPERATION_NAME]: "invoke_workflow",
          [ATTR_GEN_AI_WORKFLOW_NAME]: e.workflow,
          "atomic.run.id": e.runId,
          "atomic.root_run.id": rootId,
          ...(e.parentId ? { "atomic.parent_run.id": e.parentId } : {}),
          "atomic.resumed": e.resumed,
        },
      },
      ctx,
    );
    this.runs.set(e.runId, { span, ctx: trace.setSpan(ctx, span), rootId, short: 0 });
  }

  private chat(e: Extract<EngineEvent, { type: "stage_usage" }>): void {
    const attempt = this.attempts.get(key(e.runId, e.position));
    if (!attempt) return;
    const call = e.call;
    const requestModel = call?.requestModel ?? attempt.model;
    const responseModel = call?.responseModel ?? e.usage.model;
    const span = this.tracer.startSpan(
      `chat ${requestModel ?? responseModel ?? ""}`.trim(),
      {
        kind: SpanKind.CLIENT,
        startTime: call?.startedAt ?? e.at,
        attributes: {
          [ATTR_GEN_AI_OPERATION_NAME]: "chat",
          [ATTR_GEN_AI_PROVIDER_NAME]: call?.provider ?? attempt.runner,
          ...(requestModel ? { [ATTR_GEN_AI_REQUEST_MODEL]: requestModel } : {}),
          ...(responseModel ? { [ATTR_GEN_AI_RESPONSE_MODEL]: responseModel } : {}),
          ...(call ? { [ATTR_GEN_AI_RESPONSE_FINISH_REASONS]: call.finishReasons, "atomic.call.retries": call.retries } : {}),
          ...(call?.retriedCodes?.length ? { "atomic.call.retried_codes": call.retriedCodes } : {}),
          ...(call?.rateLimitWaitMs ? { "atomic.rate_limit.wait_ms": call.rateLimitWaitMs } : {}),
          ...usageAttributes(e.usage),
        },
      },
      attempt.ctx,
    );
    span.end(call?.endedAt ?? e.at);
  }

  private tool(e: Extract<EngineEvent, { type: "stage_tool" }>): void {
    const attempt = this.attempts.get(key(e.runId, e.position));
    if (!attempt) return;
    const id = e.callId ?? e.tool;
    if (e.state === "started") {
      const span = this.tracer.startSpan(
        `execute_tool ${e.tool}`,
        { kind: SpanKind.INTERNAL, startTime: e.at, attributes: { [ATTR_GEN_AI_OPERATION_NAME]: "execute_tool", [ATTR_GEN_AI_TOOL_NAME]: e.tool, ...(e.callId ? { [ATTR_GEN_AI_TOOL_CALL_ID]: e.callId } : {}) } },
        attempt.ctx,
      );
      attempt.tools.set(id, span);
      return;
    }
    const span = attempt.tools.get(id);
    if (!span) return;
    if (e.ok === false) span.setStatus({ code: SpanStatusCode.ERROR, message: "the tool call failed" });
    span.end(e.at);
    attempt.tools.delete(id);
  }
}

function key(runId: string, position: string): string {
  return `${runId}\u0000${position}`;
}

/** The span of a run's first drive, as a remote parent (it was, or will be, sent by whoever started or recovers it). */
function remoteRun(rootId: string, runId: string): Context {
  return trace.setSpanContext(ROOT_CONTEXT, { traceId: traceIdOf(rootId), spanId: runSpanIdOf(runId), traceFlags: TraceFlags.SAMPLED, isRemote: true });
}

/**
 * Usage as GenAI attributes. gen_ai.usage.input_tokens counts every input
 * token, cached ones included (the convention's meaning); atomic's own
 * count without cache reads and writes is atomic.usage.input_tokens.
 */
function usageAttributes(u: Partial<Usage>): Attributes {
  const input = u.inputTokens ?? 0;
  const read = u.cacheReadTokens ?? 0;
  const write = u.cacheWriteTokens ?? 0;
  return {
    [ATTR_GEN_AI_USAGE_INPUT_TOKENS]: input + read + write,
    [ATTR_GEN_AI_USAGE_OUTPUT_TOKENS]: u.outputTokens ?? 0,
    [ATTR_GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]: read,
    [ATTR_GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS]: write,
    "atomic.usage.input_tokens": input,
    "atomic.cost_micro_usd": u.costMicroUsd ?? 0,
    "atomic.cost_usd": (u.costMicroUsd ?? 0) / 1_000_000,
    ...(u.estimated ? { "atomic.usage.estimated": true } : {}),
    ...(u.unpriced ? { "atomic.usage.unpriced": true } : {}),
  };
}
