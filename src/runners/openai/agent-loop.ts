/**
 * The openai runner's agent loop, as a state machine.
 *
 * States:
 * - idle: made, nothing done yet.
 * - preparing: between two model calls. What was queued is added to the
 *   history (interrupt messages, then steer messages, then the wrap-up
 *   prompt, once), the turn limit is checked, and the next call starts.
 *   Nothing runs here that could be aborted, and nothing here waits.
 * - calling: one model call in flight: its attempts and the waits between
 *   them (chat-client.ts retries). An interrupt or a time wrap-up aborts it
 *   (its partial reply is dropped) and the loop goes back to preparing;
 *   a stop (cancel, the stage's timeout) aborts it and ends the loop. A
 *   reply that asks for tools moves to running_tools; one that does not
 *   ends the loop (the final answer), or goes back to preparing: a
 *   corrective re-prompt, messages that came during the call, a follow-up.
 * - running_tools: the reply's tool calls are answered one at a time, the
 *   turn's AbortController standing for the running tool: an interrupt,
 *   a wrap-up or a stop abort it, and the calls left unanswered are
 *   dropped from the history (every call there needs an answer). Then
 *   back to preparing, or the end (structured output accepted, or given
 *   up; the wrap-up turn's tools answered).
 * - ended: the result is settled; messages are refused.
 *
 * Transitions (each a method that asserts where it starts from; setState
 * reports every one as { from, to } to `onTransition`):
 *   begin      idle → preparing
 *   startCall  preparing → calling
 *   startTools calling → running_tools
 *   nextTurn   calling | running_tools → preparing
 *   end        any but ended → ended
 *
 * ask_user (a tool granted by name): the call is not run here. The turn's
 * earlier calls are answered, the later ones dropped, the conversation is
 * saved and the loop ends with the result `askUser`: the stage parks on
 * the question like ctx.ask (engine/steps/agent-asks.ts) and its next
 * attempt continues this conversation with the answer as the call's result
 * (`request.answer`).
 *
 * The wrap-up (the run's budget is used up) is a flag over these states,
 * with the limit that ran out (docs/design/engine.md, Budgets):
 * - spending (a cost or token cap): the call in flight is left to finish,
 *   so what the provider billed for it is counted and recorded; a running
 *   tool is aborted, no tool of its reply runs (each is answered with a
 *   refusal; `structured_output` is still accepted), a paused stage is
 *   released, and no new call starts: the stage ends as completed with
 *   what the agent said last (failed structured_output_invalid when the
 *   task has a schema and no value was given).
 * - time (the duration limit): the call in flight is aborted, and the next
 *   call is made without tools (only `structured_output`, when the task
 *   has a schema); its answer ends the stage as completed. What an aborted
 *   call cost is unknown (the provider sends usage at the end of its
 *   reply): it is not counted, and the result says so in a warning.
 */

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CONVERSATION_FILE } from "../../artifacts/stage-logs.ts";
import type { StageResult, Usage } from "../../sdk/types.ts";
import { redact } from "../../shared/secrets.ts";
import { CONFIG_DEFAULTS } from "../../shared/config/schema.ts";
import { AgentFiles, firstPrompt, writeOutputFile } from "../agent-files.ts";
import { schemaValidator, type JsonSchema } from "../json-schema.ts";
import type { DeliveryMode, ModelCall, RunnerEvent, StageRequest, WrapUpReason } from "../types.ts";
import { capToolText } from "../types.ts";
import { addUsage, emptyUsage, estimateTokens, fromInclusive, priced } from "../usage.ts";
import { ChatClient, callWithRetries, requestJson, type ChatTurn } from "./chat-client.ts";
import { rateLimitsFor } from "../rate-limits.ts";
import { History, type ChatMessage } from "./history.ts";
import { ProviderError, oneLine } from "./provider-errors.ts";
import { STRUCTURED_TOOL, checkStructured, structuredSpec } from "./structured-output.ts";
import { ToolBox, askUserArgs, enabledTools, type ToolName } from "./tools.ts";
import { stageEnv } from "../stage-env.ts";
import { sandboxEndpoints } from "../sandbox/launch.ts";
import { readEnv } from "../../shared/config/environment.ts";

export const TEXT_LIMIT = 64 * 1024;
export const MAX_CORRECTIONS = 3;
export const DEFAULT_MAX_TURNS = 50;

export const LoopState = {
  Idle: "idle",
  Preparing: "preparing",
  Calling: "calling",
  RunningTools: "running_tools",
  Ended: "ended",
} as const;
export type LoopState = (typeof LoopState)[keyof typeof LoopState];

export interface LoopTransition {
  from: LoopState;
  to: LoopState;
}

type StopKind = "cancelled" | "timeout";

/** What a stage needs for its turns, made once at its start. */
interface Setup {
  client: ChatClient;
  toolBox: ToolBox;
  maxTurns: number;
}

/** A message waiting to go into the history (`id`: reported as received once a model request carries it). */
interface Queued {
  text: string;
  id?: string;
}

export class AgentLoop {
  private state: LoopState = LoopState.Idle;
  private readonly files: AgentFiles;
  private readonly messages = new History();
  private readonly steer: Queued[] = [];
  private readonly follow: Queued[] = [];
  private readonly interrupts: Queued[] = [];
  /** Ids of messages in the history that no model request has carried yet: received once one answers. */
  private uncarried: string[] = [];
  /** The current attempt of the model call (calling), then the turn's tools (running_tools). */
  private turnAbort: AbortController | undefined;
  private stopKind: StopKind | undefined;
  private stopMessage = "";
  /** The budget ran out (wrapUp): which limit, and whether the time wrap-up's prompt went into the history. */
  private wrap: { text: string; sent: boolean; reason: WrapUpReason } | undefined;
  /** Model calls aborted mid-reply (interrupt, time wrap-up): the provider reported no usage for them. */
  private uncounted = 0;
  /** This turn is the wrap-up turn (the wrap-up was asked for before it started). */
  private wrapping = false;
  private usage: Usage;
  private lastText = "";
  private structured: { value: unknown } | undefined;
  private corrections = 0;
  private lastIssues: string[] = [];
  /** The agent asked the person (ask_user): the loop ends and the stage parks on it. */
  private asked: { callId: string; question: string; choices?: string[] } | undefined;
  private tools: ToolBox | undefined;
  private readonly schema: JsonSchema | undefined;
  /** The schema's check (ajv, loaded with the stage's first schema). */
  private validate: ((value: unknown) => string[]) | undefined;
  /** The tools are the same every turn (only the wrap-up turn differs): serialized once each. */
  private toolsJsonAll: string | undefined;
  private wrapToolsJson: string | undefined;
  /** The stage is paused (hold): the loop waits in preparing, before its next model call, until released or stopped. */
  private holdGate: { promise: Promise<void>; open: () => void } | undefined;

  constructor(
    private readonly request: StageRequest,
    private readonly onEvent: (event: RunnerEvent) => void,
    private readonly onTransition?: (t: LoopTransition) => void,
  ) {
    this.files = new AgentFiles(request.artifactDir);
    this.usage = emptyUsage(request.model);
    this.schema = request.agent?.schema;
  }

  // ---------------------------------------------------------------- transitions

  private setState(to: LoopState): void {
    const from = this.state;
    this.state = to;
    this.onTransition?.({ from, to });
  }

  private assertState(transition: string, ...allowed: LoopState[]): void {
    if (!allowed.includes(this.state)) throw new Error(`agent loop: ${transition} in state ${this.state} (expected ${allowed.join(" or ")})`);
  }

  private begin(): void {
    this.assertState("begin", LoopState.Idle);
    this.setState(LoopState.Preparing);
  }

  private startCall(): void {
    this.assertState("startCall", LoopState.Preparing);
    this.setState(LoopState.Calling);
  }

  private startTools(): void {
    this.assertState("startTools", LoopState.Calling);
    if (!this.turnAbort) throw new Error("agent loop: startTools without the call's AbortController");
    this.setState(LoopState.RunningTools);
  }

  private nextTurn(): void {
    this.assertState("nextTurn", LoopState.Calling, LoopState.RunningTools);
    this.turnAbort = undefined;
    this.setState(LoopState.Preparing);
  }

  private end(): void {
    if (this.state === LoopState.Ended) throw new Error("agent loop: end in state ended");
    this.turnAbort = undefined;
    this.setState(LoopState.Ended);
  }

  // ---------------------------------------------------------------- control (any time)

  async send(text: string, mode: DeliveryMode, id?: string): Promise<void> {
    if (this.state === LoopState.Ended) throw new Error("the stage has ended");
    const message = { text, ...(id ? { id } : {}) };
    if (mode === "steer") this.steer.push(message);
    else if (mode === "followUp") this.follow.push(message);
    else {
      this.interrupts.push(message);
      this.abortTurn("interrupt");
    }
  }

  interruptTurn(): void {
    this.abortTurn("interrupt");
  }

  wrapUp(text: string, reason: WrapUpReason): void {
    if (this.state === LoopState.Ended || this.wrap?.reason === "time" || this.wrap?.reason === reason) return;
    if (this.wrap) this.wrap.reason = reason; // spending first, then the time: the call in flight is aborted now
    else this.wrap = { text, sent: false, reason };
    if (reason === "time") this.abortTurn("wrap_up");
    else {
      // The call in flight finishes (what it cost is counted); a running tool is aborted; a paused stage ends.
      if (this.state === LoopState.RunningTools) this.abortTurn("wrap_up");
      this.release();
    }
  }

  /** A spending cap ran out: no tool runs and no new call starts. */
  private get spent(): boolean {
    return this.wrap?.reason === "spending";
  }

  hold(held: boolean): void {
    if (held === (this.holdGate !== undefined) || this.state === LoopState.Ended) return;
    if (held) {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.holdGate = { promise, open };
    } else this.release();
  }

  private release(): void {
    const gate = this.holdGate;
    this.holdGate = undefined;
    gate?.open();
  }

  stop(kind: StopKind, message: string): void {
    if (this.stopKind || this.state === LoopState.Ended) return;
    this.stopKind = kind;
    this.stopMessage = message;
    this.release();
    this.abortTurn(kind);
    this.tools?.cancel();
  }

  /** Aborts the model call or the tool running now; while preparing there is none (the queues are read next). */
  private abortTurn(reason: string): void {
    if (this.state === LoopState.Calling || this.state === LoopState.RunningTools) this.turnAbort?.abort(reason);
  }

  // ---------------------------------------------------------------- the loop

  async run(): Promise<StageResult> {
    const req = this.request;
    const timer = req.timeoutMs && req.timeoutMs > 0 ? setTimeout(() => this.stop("timeout", `timed out after ${req.timeoutMs} ms`), req.timeoutMs) : undefined;
    try {
      await Promise.resolve(); // let start() hand the handle out before anything can end
      return await this.drive();
    } catch (err) {
      if (this.stopKind) return this.stopped();
      if (err instanceof ProviderError) return this.result("failed", err.code, err.message);
      return this.result("failed", "runner_failed", oneLine((err as Error)?.message ?? String(err)));
    } finally {
      if (timer) clearTimeout(timer);
      if (this.state !== LoopState.Ended) this.end();
      this.files.close();
    }
  }

  private async drive(): Promise<StageResult> {
    const setup = await this.setUp();
    if ("status" in setup) return setup;
    this.begin();
    for (;;) {
      if (this.spent && !this.stopKind) return this.wrappedUp();
      await this.whileHeld();
      if (this.spent && !this.stopKind) return this.wrappedUp();
      const ended = this.prepare(setup.maxTurns);
      if (ended) return ended;
      const turn = await this.call(setup.client, setup.toolBox);
      if (!turn) continue; // aborted for an interrupt or the wrap-up
      this.confirmCarried();
      const assistant = this.recordReply(turn);
      const outcome = turn.toolCalls.length > 0 ? await this.answerTools(turn, assistant, setup.toolBox) : await this.afterAnswer();
      if (outcome) return outcome;
    }
  }

  /** Paused: no next model call until unpaused or stopped; said with a `held` event each way. */
  private async whileHeld(): Promise<void> {
    if (!this.holdGate || this.stopKind) return;
    this.onEvent({ type: "held", held: true });
    while (this.holdGate && !this.stopKind) await this.holdGate.promise;
    this.onEvent({ type: "held", held: false });
  }

  /** The client, the tools and the first two messages; a result when the stage cannot start. */
  private async setUp(): Promise<Setup | StageResult> {
    const req = this.request;
    const agent = req.agent ?? {};
    if (!req.model) return this.result("failed", "no_model", "the openai runner needs a model: set model in the task, the workflow, config.json or ATOMIC_MODEL");
    let toolNames: ToolName[];
    let toolBox: ToolBox;
    try {
      toolNames = enabledTools(agent.tools);
      toolBox = new ToolBox(req.cwd, toolNames, () => stageEnv(req), req.sandbox ? { sandbox: req.sandbox, endpoints: sandboxEndpoints(agent.baseUrl ?? CONFIG_DEFAULTS.openai.baseUrl) } : undefined, req.runTools);
      this.tools = toolBox;
    } catch (err) {
      return this.result("failed", "bad_tools", (err as Error).message);
    }
    try {
      if (this.schema) this.validate = await schemaValidator(this.schema);
    } catch (err) {
      return this.result("failed", "invalid_schema", (err as Error).message);
    }
    const client = new ChatClient({
      baseUrl: agent.baseUrl ?? CONFIG_DEFAULTS.openai.baseUrl,
      apiKey: readEnv("OPENAI_API_KEY"),
      requestTimeoutMs: agent.requestTimeoutMs ?? CONFIG_DEFAULTS.openai.requestTimeoutMs,
      rateLimits: rateLimitsFor(req.artifactDir),
    });
    let system = agent.system ?? defaultSystem(req.cwd, toolNames, this.schema !== undefined);
    if (req.runTools?.siblings?.length) system += `\nYou work beside other agents of this run, in a group: ${req.runTools.siblings.join(", ")}; address them by these names.`;
    this.messages.push({ role: "system", content: system });
    if (req.continueFrom) {
      const earlier = readConversation(req.continueFrom.artifactDir);
      if (typeof earlier === "string") return this.result("failed", "bad_continue", earlier);
      // The earlier turns as they were, under this stage's own system prompt (its tools and schema may differ).
      for (const m of earlier) if (m.role !== "system") this.messages.push(m);
      this.files.section(`(continuing the conversation of ${req.continueFrom.artifactDir}: ${earlier.length} messages)`);
    }
    // Messages sent before this attempt go into its first request: received once a model call answers it.
    this.uncarried.push(...(req.initialMessages ?? []).map((m) => m.id));
    this.files.section(`${req.stageName} (openai, ${req.model})`);
    if (req.answer) {
      // Parked on ask_user, answered: the answer is that call's result; what was sent meanwhile follows it.
      this.messages.push({ role: "tool", tool_call_id: req.answer.callId, content: req.answer.text });
      this.files.section("Answer (ask_user)", req.answer.text);
      if (req.initialMessages?.length) {
        const text = firstPrompt("", req.initialMessages);
        this.messages.push({ role: "user", content: text });
        this.files.section("Messages", text);
      }
    } else {
      const prompt = firstPrompt(req.prompt ?? "", req.initialMessages);
      this.messages.push({ role: "user", content: prompt });
      this.files.section("User", prompt);
    }
    return { client, toolBox, maxTurns: agent.maxTurns ?? DEFAULT_MAX_TURNS };
  }

  /** preparing: the queued messages into the history; a result when the loop must end before the next call. */
  private prepare(maxTurns: number): StageResult | undefined {
    this.assertState("prepare", LoopState.Preparing);
    if (this.stopKind) return this.stopped();
    this.inject(this.interrupts, "interrupt");
    this.inject(this.steer, "steer");
    this.wrapping = this.wrap?.reason === "time";
    if (this.wrap && !this.wrap.sent) {
      this.wrap.sent = true;
      this.messages.push({ role: "user", content: this.wrap.text });
      this.files.section("Wrap-up (budget used up)", this.wrap.text);
    }
    if (!this.wrapping && this.usage.turns >= maxTurns) {
      return this.result("failed", "max_turns", `the agent did not finish within ${maxTurns} turns`);
    }
    return undefined;
  }

  /** preparing → calling: the model call; undefined when an interrupt or the wrap-up aborted it (back to preparing). */
  private async call(client: ChatClient, toolBox: ToolBox): Promise<ChatTurn | undefined> {
    this.startCall();
    const startedAt = Date.now();
    let retries = 0;
    const retriedCodes: string[] = [];
    const waitedBefore = client.rateLimitWaitedMs;
    let backoffMs = 0;
    const req = this.request;
    const agent = req.agent ?? {};
    const toolsJson = this.wrapping ? (this.wrapToolsJson ??= this.toolsJson([])) : (this.toolsJsonAll ??= this.toolsJson(toolBox.specs()));
    const messagesJson = this.messages.toJson();
    const body = { model: req.model, json: requestJson(req.model!, messagesJson, toolsJson) };
    // One controller per attempt of the call (callWithRetries makes them): interrupt, wrap-up
    // and stop abort the current one; the last one also stands for the turn's tools.
    let ac: AbortController | undefined;
    this.files.section("Assistant");
    try {
      const reply = callWithRetries((ctl) => client.stream(body, ctl, this.streamHandlers), {
        maxRetries: agent.maxRetries ?? CONFIG_DEFAULTS.openai.maxRetries,
        maxBackoffMs: agent.maxBackoffMs ?? CONFIG_DEFAULTS.openai.maxBackoffMs,
        onAttempt: (ctl) => {
          ac = ctl;
          this.turnAbort = ctl;
          if (this.stopKind) ctl.abort(this.stopKind);
        },
        onRetry: (err, attempt, delay) => {
          retries++;
          retriedCodes.push(err.code);
          if (err.code === "provider_rate_limit") backoffMs += delay;
          this.files.diag(`retry ${attempt} in ${delay} ms after ${err.code}: ${err.message}`);
          this.files.section(`(retrying: ${err.message})`);
        },
      });
      // The request is on its way: the files are written while the provider answers, not after.
      this.files.flush();
      const turn = await reply;
      this.countUsage(turn, messagesJson, { startedAt, endedAt: Date.now(), provider: "openai", ...(req.model ? { requestModel: req.model } : {}), ...(turn.model ? { responseModel: turn.model } : {}), finishReasons: turn.finishReason ? [turn.finishReason] : [], retries, ...(retries ? { retriedCodes } : {}), ...rateLimitWait(client.rateLimitWaitedMs - waitedBefore + backoffMs) });
      return turn;
    } catch (err) {
      // Aborted by interrupt or wrap-up (a string reason; a timeout's is not, and it was retried). A stop ends the loop (run()).
      if (!this.stopKind && ac?.signal.aborted && typeof ac.signal.reason === "string") {
        this.uncounted++;
        this.files.section(`(turn ${ac.signal.reason === "wrap_up" ? "ended for the wrap-up" : "interrupted"}: the provider reported no usage for it, so it is not counted)`);
        this.nextTurn();
        return undefined;
      }
      throw err;
    }
  }

  /** The reply into the history (the assistant message, with its tool calls). */
  private recordReply(turn: ChatTurn): ChatMessage {
    const assistant: ChatMessage = { role: "assistant", content: turn.content || null };
    if (turn.toolCalls.length) {
      assistant.tool_calls = turn.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
    }
    this.messages.push(assistant);
    if (turn.content) this.lastText = turn.content;
    return assistant;
  }

  /** calling → running_tools: answers the reply's tool calls; then the end, or back to preparing (undefined). */
  private async answerTools(turn: ChatTurn, assistant: ChatMessage, toolBox: ToolBox): Promise<StageResult | undefined> {
    this.startTools();
    const signal = this.turnAbort!.signal;
    const answered = new Set<string>();
    for (const call of turn.toolCalls) {
      if (signal.aborted || this.stopKind) break;
      let output: string;
      let ok: boolean;
      if (call.name === STRUCTURED_TOOL && this.schema) {
        ({ ok, output } = this.acceptStructured(call.arguments));
      } else if (call.name === "ask_user" && toolBox.enabled.includes("ask_user") && !this.wrapping && !this.spent) {
        const asked = askUserArgs(call.arguments);
        if ("question" in asked) {
          // Not answered here: the stage parks on it and the next attempt answers it (request.answer).
          this.asked = { callId: call.id, ...asked };
          this.onEvent({ type: "tool_start", name: call.name, id: call.id, at: Date.now() });
          this.files.section("Question (ask_user)", asked.question + (asked.choices ? `\nchoices: ${asked.choices.join(" | ")}` : ""));
          answered.add(call.id);
          break;
        }
        ({ ok, output } = { ok: false, output: asked.refused });
      } else if (this.wrapping) {
        ({ ok, output } = { ok: false, output: "error: no tools during the wrap-up turn" });
      } else if (this.spent) {
        ({ ok, output } = { ok: false, output: "error: not run: the run's budget is used up" });
      } else {
        this.onEvent({ type: "tool_start", name: call.name, id: call.id, at: Date.now(), input: capToolText(call.arguments) });
        ({ ok, output } = await toolBox.run(call.name, call.arguments, signal));
        if (signal.aborted || this.stopKind) break; // interrupted mid-tool: this call is unfinished
        this.onEvent({ type: "tool_end", name: call.name, id: call.id, ok, at: Date.now(), output: capToolText(output) });
      }
      this.files.tool(call.name, call.arguments, output, ok);
      this.messages.push({ role: "tool", tool_call_id: call.id, content: output });
      answered.add(call.id);
      if (this.structured || this.corrections > MAX_CORRECTIONS) break;
    }
    if (this.stopKind) return this.stopped();
    if (answered.size < turn.toolCalls.length) {
      // Unanswered tool calls are dropped: every call in the history needs an answer.
      assistant.tool_calls = assistant.tool_calls!.filter((c) => answered.has(c.id));
      if (assistant.tool_calls.length === 0) delete assistant.tool_calls;
      this.messages.changed(assistant);
      if (!this.structured && !this.asked && this.corrections <= MAX_CORRECTIONS) this.files.section(`(dropped ${turn.toolCalls.length - answered.size} unfinished tool call(s))`);
    }
    if (this.asked) return this.parked(this.asked);
    if (this.structured) return this.completed();
    if (this.corrections > MAX_CORRECTIONS) return this.structuredFailure();
    if (this.wrapping) return this.schema ? this.structuredFailure() : this.completed();
    if (this.spent) return this.wrappedUp();
    this.nextTurn();
    return undefined;
  }

  /** calling, a reply without tool calls: the end, or back to preparing (undefined). */
  private async afterAnswer(): Promise<StageResult | undefined> {
    if (this.spent) return this.wrappedUp();
    if (this.schema && !this.structured && !this.wrapping) {
      if (++this.corrections > MAX_CORRECTIONS) return this.structuredFailure();
      const text = `Your answer must be given by calling the ${STRUCTURED_TOOL} tool with a value matching its schema. Call it now.`;
      this.lastIssues = ["the answer was plain text, not a structured_output call"];
      this.messages.push({ role: "user", content: text });
      this.files.section(`Corrective re-prompt ${this.corrections}`, text);
      this.nextTurn();
      return undefined;
    }
    if (this.wrapping) return this.schema && !this.structured ? this.structuredFailure() : this.completed();
    if (this.interrupts.length || this.steer.length) {
      this.nextTurn(); // they arrived during the final call: another turn
      return undefined;
    }
    if (this.follow.length) {
      this.inject(this.follow, "followUp");
      this.nextTurn();
      return undefined;
    }
    return this.completed();
  }

  /** What a streamed reply feeds as it arrives (one object for every call). */
  private readonly streamHandlers = {
    onRaw: (payload: string) => this.files.raw(payload),
    onText: (delta: string) => {
      this.files.text(delta);
      this.onEvent({ type: "text_delta", text: delta });
    },
  };

  private inject(queue: Queued[], mode: DeliveryMode): void {
    while (queue.length) {
      const { text, id } = queue.shift()!;
      this.messages.push({ role: "user", content: text });
      this.files.section(`Message (${mode})`, text);
      if (id) this.uncarried.push(id);
    }
  }

  /** A model call answered: every message in its request was seen by the model. */
  private confirmCarried(): void {
    for (const id of this.uncarried) this.onEvent({ type: "message_received", id });
    this.uncarried = [];
  }

  /** The request's `tools` (the given ones, then structured_output when the task has a schema), serialized; undefined: none. */
  private toolsJson(tools: object[]): string | undefined {
    const all = this.schema ? [...tools, structuredSpec(this.schema)] : tools;
    return all.length ? JSON.stringify(all) : undefined;
  }

  private acceptStructured(rawArgs: string): { ok: boolean; output: string } {
    const { value, issues } = checkStructured(rawArgs, this.schema!, this.validate!);
    if (issues.length === 0) {
      this.structured = { value };
      return { ok: true, output: "accepted" };
    }
    this.corrections++;
    this.lastIssues = issues;
    const text = `The value does not match the schema: ${issues.join("; ")}. Call ${STRUCTURED_TOOL} again with a corrected value.`;
    if (this.corrections <= MAX_CORRECTIONS) this.files.section(`Corrective re-prompt ${this.corrections}`, text);
    return { ok: false, output: text };
  }

  /** `messagesJson`: the history as sent this turn (for an estimate when the provider reports no usage). */
  private countUsage(turn: ChatTurn, messagesJson: string, call: ModelCall): void {
    const model = turn.model ?? this.request.model;
    let delta: Partial<Usage>;
    if (turn.usage) {
      delta = priced(fromInclusive(turn.usage.prompt, turn.usage.cached, turn.usage.completion, turn.usage.cacheWrite), model, this.request.agent?.pricing, turn.usage.costUsd);
    } else {
      const out = turn.content + turn.toolCalls.map((c) => c.name + c.arguments).join("");
      delta = { ...priced({ inputTokens: estimateTokens(messagesJson), outputTokens: estimateTokens(out) }, model, this.request.agent?.pricing), estimated: true };
    }
    delta.turns = 1;
    if (model) delta.model = model;
    this.usage = addUsage(this.usage, delta);
    this.onEvent({ type: "usage", usage: delta, call });
  }

  // ---------------------------------------------------------------- results (each ends the loop)

  private async completed(): Promise<StageResult> {
    const structured = this.structured?.value;
    const text = this.lastText || (structured !== undefined ? JSON.stringify(structured) : "");
    let outputPath: string | undefined;
    try {
      outputPath = await writeOutputFile(this.request, text, structured);
    } catch (err) {
      return this.result("failed", "output_file", `could not write the output file: ${(err as Error).message}`);
    }
    this.files.completed(text, structured);
    return { ...this.result("completed"), ...(structured !== undefined ? { structured } : {}), ...(outputPath ? { outputPath } : {}) };
  }

  /** A spending cap ran out: the stage ends with what the agent has, no further call made. */
  private wrappedUp(): Promise<StageResult> | StageResult {
    this.files.section("(the run's budget is used up: no tool runs and no new call starts)");
    return this.schema && !this.structured ? this.structuredFailure() : this.completed();
  }

  /** The conversation a later stage continues (continueFrom) or forks: every message, secrets redacted. A write that fails costs only that. */
  private saveConversation(): void {
    if (this.messages.length === 0) return;
    try {
      this.files.ensureDir();
      writeFileSync(join(this.request.artifactDir, CONVERSATION_FILE), redact(this.messages.toJson()));
    } catch {
      // a later continueFrom says the file is missing
    }
  }

  /** The loop ends on an ask_user call (its conversation saved, that call last): the stage parks on the question. */
  private parked(asked: { callId: string; question: string; choices?: string[] }): StageResult {
    // Not a failure to a reader of the transcript: the stage waits for the person, then goes on (the result's
    // status is only how the engine is told the attempt ended; askUser says why).
    const question = oneLine(asked.question).slice(0, 200);
    this.files.section("Outcome", `waiting for a person's answer to: ${question}`);
    return { ...this.result("failed", "ask_user", `waiting for an answer to: ${question}`, false), askUser: asked };
  }

  private structuredFailure(): StageResult {
    return this.result(
      "failed",
      "structured_output_invalid",
      `the agent gave no valid structured output after ${MAX_CORRECTIONS} corrective re-prompts (${this.lastIssues.slice(0, 3).join("; ") || "no structured_output call"})`,
    );
  }

  private stopped(): StageResult {
    return this.result(this.stopKind === "cancelled" ? "cancelled" : "failed", this.stopKind ?? "cancelled", this.stopMessage);
  }

  /** `outcome`: false when the caller wrote the transcript's "Outcome" section itself. */
  private result(status: StageResult["status"], code?: string, message?: string, outcome = true): StageResult {
    if (outcome && status !== "completed") this.files.section("Outcome", `${status}${message ? `: ${message}` : ""}`);
    this.end();
    this.saveConversation();
    const text = this.lastText.length > TEXT_LIMIT ? this.lastText.slice(0, TEXT_LIMIT) : this.lastText;
    return {
      status,
      text,
      exitCode: null,
      outputPath: this.files.transcriptPath,
      errorPath: this.files.errorPath,
      transcriptPath: this.files.transcriptPath,
      eventsPath: this.files.eventsPath,
      usage: this.usage,
      ...(this.uncounted ? { warnings: [`${this.uncounted} model call(s) aborted mid-reply (interrupt or time budget) are not counted in the usage: the provider reported none for them`] } : {}),
      ...(code && status !== "completed" ? { error: { code, message: message ?? code } } : {}),
    };
  }
}

function readConversation(dir: string): ChatMessage[] | string {
  const path = join(dir, CONVERSATION_FILE);
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as unknown;
    if (Array.isArray(parsed) && parsed.every((m) => typeof m === "object" && m !== null && typeof (m as ChatMessage).role === "string")) return parsed as ChatMessage[];
    return `continueFrom: ${path} is not a conversation`;
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    return missing
      ? `continueFrom: the earlier stage left no openai conversation (${path} does not exist): continue a stage that the openai runner ran`
      : `continueFrom: cannot read ${path}: ${(err as Error).message}`;
  }
}

function defaultSystem(cwd: string, tools: readonly string[], structured: boolean): string {
  const lines = [
    "You are a careful software agent working in a workflow stage.",
    `Your working directory is ${cwd}; tools cannot reach outside it.`,
    tools.length ? `Tools: ${tools.join(", ")}.` : "You have no tools.",
    "When you are done, answer with your final result.",
  ];
  if (structured) lines.push(`Give the final result by calling the ${STRUCTURED_TOOL} tool.`);
  return lines.join("\n");
}

/** A model call's rate-limit wait, when it waited at all (ModelCall.rateLimitWaitMs). */
function rateLimitWait(ms: number): { rateLimitWaitMs?: number } {
  return ms > 0 ? { rateLimitWaitMs: ms } : {};
}
