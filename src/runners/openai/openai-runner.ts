/**
 * The `openai` runner: a built-in agent loop over any OpenAI-compatible
 * chat-completions endpoint (OpenAI, OpenRouter, Ollama, llama.cpp, vLLM).
 *
 * A turn is one streamed model call; when the reply asks for tools, each
 * is run (confined to the stage's cwd, tools.ts) and answered, and the
 * next turn starts. The stage ends on a reply without tool calls (its text
 * is the result), or when the `structured_output` tool was called with a
 * value matching the task's schema. A reply that should have been
 * structured and is not gets a corrective re-prompt naming the problems,
 * at most MAX_CORRECTIONS times; then the stage fails
 * (structured_output_invalid).
 *
 * Delivery modes are native:
 * - steer: queued, added as a user message before the next model call
 *   (after a final answer it starts another turn);
 * - followUp: after the final answer, another turn with the message;
 * - interrupt: the HTTP request in flight is aborted (or the running tool
 *   killed), tool calls not yet answered are dropped from the history,
 *   then the message is delivered and a new turn starts.
 * wrapUp (budget used up) aborts the turn in flight like interrupt and
 * makes one last call without tools (only `structured_output`, when the
 * task has a schema); its answer ends the stage as completed.
 *
 * Usage per turn comes from the stream's usage chunk (prompt tokens include
 * cached ones: normalized in usage.ts); a provider that sends none gets an
 * estimate, marked `estimated`. Every turn's usage is also streamed as a
 * `usage` event, which is what the root's budget watches.
 */

import type { StageResult, Usage } from "../../sdk/types.ts";
import { AgentFiles, firstPrompt, writeOutputFile } from "../agent-files.ts";
import { schemaValidator, type JsonSchema } from "../json-schema.ts";
import type { DeliveryMode, Runner, RunnerEvent, RunnerHandle, StageRequest } from "../types.ts";
import { addUsage, emptyUsage, estimateTokens, fromInclusive, priced } from "../usage.ts";
import { ChatClient, callWithRetries, requestJson, type ChatTurn } from "./chat-client.ts";
import { ProviderError, oneLine } from "./provider-errors.ts";
import { ToolBox, enabledTools, type ToolName } from "./tools.ts";
import { stageEnv } from "../stage-env.ts";
import { DEFAULT_OPENAI_BASE_URL } from "../../shared/config.ts";

export const TEXT_LIMIT = 64 * 1024;
export const MAX_CORRECTIONS = 3;
export const DEFAULT_MAX_TURNS = 50;
const STRUCTURED_TOOL = "structured_output";

interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

type StopKind = "cancelled" | "timeout";

/**
 * The conversation, with the JSON of every message kept as it is added:
 * each request resends the whole history, and serializing it from scratch
 * every turn grows with its length. A message changed after it was added
 * must be passed to `changed`.
 */
class History {
  private readonly messages: ChatMessage[] = [];
  private readonly json: string[] = [];

  push(message: ChatMessage): void {
    this.messages.push(message);
    this.json.push(JSON.stringify(message));
  }

  changed(message: ChatMessage): void {
    const i = this.messages.lastIndexOf(message);
    if (i >= 0) this.json[i] = JSON.stringify(message);
  }

  /** Byte for byte JSON.stringify of the messages. */
  toJson(): string {
    return `[${this.json.join(",")}]`;
  }
}

export class OpenAIRunner implements Runner {
  readonly kind = "openai";

  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle {
    const loop = new AgentLoop(request, onEvent);
    const result = loop.run();
    onEvent({ type: "started" });
    return {
      result,
      send: (message, mode) => loop.send(message, mode),
      interrupt: () => loop.interruptTurn(),
      cancel: (reason) => loop.stop("cancelled", reason ?? "cancelled"),
      wrapUp: (text) => loop.wrapUp(text),
    };
  }
}

class AgentLoop {
  private readonly files: AgentFiles;
  private readonly messages = new History();
  private readonly steer: string[] = [];
  private readonly follow: string[] = [];
  private readonly interrupts: string[] = [];
  private readonly stopAll = new AbortController();
  private turnAbort: AbortController | undefined;
  private stopKind: StopKind | undefined;
  private stopMessage = "";
  private wrap: { text: string; sent: boolean } | undefined;
  private ended = false;
  private usage: Usage;
  private lastText = "";
  private structured: { value: unknown } | undefined;
  private corrections = 0;
  private tools: ToolBox | undefined;
  private readonly schema: JsonSchema | undefined;
  private validate: ((value: unknown) => string[]) | undefined;
  /** The schema is an object: the tool's parameters are the schema itself; otherwise wrapped as { value }. */
  private readonly wrapped: boolean;

  constructor(
    private readonly request: StageRequest,
    private readonly onEvent: (event: RunnerEvent) => void,
  ) {
    this.files = new AgentFiles(request.artifactDir);
    this.usage = emptyUsage(request.model);
    this.schema = request.agent?.schema;
    this.wrapped = this.schema !== undefined && this.schema.type !== "object";
  }

  // ---------------------------------------------------------------- control (any time)

  async send(text: string, mode: DeliveryMode): Promise<void> {
    if (this.ended) throw new Error("the stage has ended");
    if (mode === "steer") this.steer.push(text);
    else if (mode === "followUp") this.follow.push(text);
    else {
      this.interrupts.push(text);
      this.turnAbort?.abort("interrupt");
    }
  }

  interruptTurn(): void {
    this.turnAbort?.abort("interrupt");
  }

  wrapUp(text: string): void {
    if (this.ended || this.wrap) return;
    this.wrap = { text, sent: false };
    this.turnAbort?.abort("wrap_up");
  }

  stop(kind: StopKind, message: string): void {
    if (this.stopKind || this.ended) return;
    this.stopKind = kind;
    this.stopMessage = message;
    this.stopAll.abort(kind);
    this.turnAbort?.abort(kind);
    this.tools?.cancel();
  }

  // ---------------------------------------------------------------- the loop

  async run(): Promise<StageResult> {
    const req = this.request;
    const timer = req.timeoutMs && req.timeoutMs > 0 ? setTimeout(() => this.stop("timeout", `timed out after ${req.timeoutMs} ms`), req.timeoutMs) : undefined;
    try {
      await Promise.resolve(); // let start() hand the handle out before anything can end
      return await this.loop();
    } catch (err) {
      if (this.stopKind) return this.result(this.stopKind === "cancelled" ? "cancelled" : "failed", this.stopKind, this.stopMessage);
      if (err instanceof ProviderError) return this.result("failed", err.code, err.message);
      return this.result("failed", "runner_failed", oneLine((err as Error)?.message ?? String(err)));
    } finally {
      if (timer) clearTimeout(timer);
      this.ended = true;
      this.files.close();
    }
  }

  private async loop(): Promise<StageResult> {
    const req = this.request;
    const agent = req.agent ?? {};
    if (!req.model) return this.result("failed", "no_model", "the openai runner needs a model: set model in the task, the workflow, config.json or ATOMIC_MODEL");
    let toolNames: ToolName[];
    let toolBox: ToolBox;
    try {
      toolNames = enabledTools(agent.tools);
      toolBox = new ToolBox(req.cwd, toolNames, stageEnv(req));
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
      baseUrl: agent.baseUrl ?? DEFAULT_OPENAI_BASE_URL,
      apiKey: process.env.OPENAI_API_KEY || undefined,
      requestTimeoutMs: agent.requestTimeoutMs ?? 300_000,
    });
    const maxTurns = agent.maxTurns ?? DEFAULT_MAX_TURNS;
    const system = agent.system ?? defaultSystem(req.cwd, toolNames, this.schema !== undefined);
    this.messages.push({ role: "system", content: system });
    const prompt = firstPrompt(req.prompt ?? "", req.initialMessages);
    this.messages.push({ role: "user", content: prompt });
    this.files.section(`${req.stageName} (openai, ${req.model})`);
    this.files.section("User", prompt);
    // The tools are the same every turn (only the wrap-up turn differs): serialized once.
    let toolsJsonAll: string | undefined;
    let wrapToolsJson: string | undefined;

    for (;;) {
      if (this.stopKind) return this.stopped();
      this.inject(this.interrupts, "interrupt");
      this.inject(this.steer, "steer");
      const wrapping = this.wrap !== undefined;
      if (this.wrap && !this.wrap.sent) {
        this.wrap.sent = true;
        this.messages.push({ role: "user", content: this.wrap.text });
        this.files.section("Wrap-up (budget used up)", this.wrap.text);
      }
      if (!wrapping && this.usage.turns >= maxTurns) {
        return this.result("failed", "max_turns", `the agent did not finish within ${maxTurns} turns`);
      }
      const toolsJson = wrapping ? (wrapToolsJson ??= this.toolsJson([])) : (toolsJsonAll ??= this.toolsJson(toolBox.specs()));
      const messagesJson = this.messages.toJson();
      const body = { model: req.model, json: requestJson(req.model, messagesJson, toolsJson) };
      // One controller per attempt of the call (callWithRetries makes them): interrupt, wrap-up
      // and stop abort the current one; the last one also stands for the turn's tools.
      let ac: AbortController | undefined;
      let turn: ChatTurn;
      this.files.section("Assistant");
      try {
        const reply = callWithRetries((ctl) => client.stream(body, ctl, this.streamHandlers), {
          maxRetries: agent.maxRetries ?? 4,
          maxBackoffMs: agent.maxBackoffMs ?? 30_000,
          onAttempt: (ctl) => {
            ac = ctl;
            this.turnAbort = ctl;
            if (this.stopKind) ctl.abort(this.stopKind);
          },
          onRetry: (err, attempt, delay) => {
            this.files.diag(`retry ${attempt} in ${delay} ms after ${err.code}: ${err.message}`);
            this.files.section(`(retrying: ${err.message})`);
          },
        });
        // The request is on its way: the files are written while the provider answers, not after.
        this.files.flush();
        turn = await reply;
      } catch (err) {
        if (this.stopKind) return this.stopped();
        // Aborted by interrupt or wrap-up (a string reason; a timeout's is not, and it was retried).
        if (ac?.signal.aborted && typeof ac.signal.reason === "string") {
          this.files.section(`(turn ${ac.signal.reason === "wrap_up" ? "ended for the wrap-up" : "interrupted"})`);
          continue;
        }
        throw err;
      } finally {
        this.turnAbort = undefined;
      }
      const last = ac!; // onAttempt runs before the first call
      const signal = last.signal;
      this.countUsage(turn, messagesJson);
      const assistant: ChatMessage = { role: "assistant", content: turn.content || null };
      if (turn.toolCalls.length) {
        assistant.tool_calls = turn.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
      }
      this.messages.push(assistant);
      if (turn.content) this.lastText = turn.content;

      if (turn.toolCalls.length > 0) {
        const answered = new Set<string>();
        this.turnAbort = last;
        try {
          for (const call of turn.toolCalls) {
            if (signal.aborted || this.stopKind) break;
            let output: string;
            let ok: boolean;
            if (call.name === STRUCTURED_TOOL && this.schema) {
              ({ ok, output } = this.acceptStructured(call.arguments));
            } else if (wrapping) {
              ({ ok, output } = { ok: false, output: "error: no tools during the wrap-up turn" });
            } else {
              this.onEvent({ type: "tool_start", name: call.name, id: call.id });
              ({ ok, output } = await toolBox.run(call.name, call.arguments, signal));
              if (signal.aborted || this.stopKind) break; // interrupted mid-tool: this call is unfinished
              this.onEvent({ type: "tool_end", name: call.name, id: call.id, ok });
            }
            this.files.tool(call.name, call.arguments, output, ok);
            this.messages.push({ role: "tool", tool_call_id: call.id, content: output });
            answered.add(call.id);
            if (this.structured || this.corrections > MAX_CORRECTIONS) break;
          }
        } finally {
          this.turnAbort = undefined;
        }
        if (this.stopKind) return this.stopped();
        if (answered.size < turn.toolCalls.length) {
          // Unanswered tool calls are dropped: every call in the history needs an answer.
          assistant.tool_calls = assistant.tool_calls!.filter((c) => answered.has(c.id));
          if (assistant.tool_calls.length === 0) delete assistant.tool_calls;
          this.messages.changed(assistant);
          if (!this.structured && this.corrections <= MAX_CORRECTIONS) this.files.section(`(dropped ${turn.toolCalls.length - answered.size} unfinished tool call(s))`);
        }
        if (this.structured) return this.completed();
        if (this.corrections > MAX_CORRECTIONS) return this.structuredFailure();
        if (wrapping) return this.schema ? this.structuredFailure() : this.completed();
        continue;
      }

      // A reply without tool calls.
      if (this.schema && !this.structured && !wrapping) {
        if (++this.corrections > MAX_CORRECTIONS) return this.structuredFailure();
        const text = `Your answer must be given by calling the ${STRUCTURED_TOOL} tool with a value matching its schema. Call it now.`;
        this.lastIssues = ["the answer was plain text, not a structured_output call"];
        this.messages.push({ role: "user", content: text });
        this.files.section(`Corrective re-prompt ${this.corrections}`, text);
        continue;
      }
      if (wrapping) return this.schema && !this.structured ? this.structuredFailure() : this.completed();
      if (this.interrupts.length || this.steer.length) continue; // arrived during the final call: another turn
      if (this.follow.length) {
        this.inject(this.follow, "followUp");
        continue;
      }
      return this.completed();
    }
  }

  private lastIssues: string[] = [];

  /** What a streamed reply feeds as it arrives (one object for every call). */
  private readonly streamHandlers = {
    onRaw: (payload: string) => this.files.raw(payload),
    onText: (delta: string) => {
      this.files.text(delta);
      this.onEvent({ type: "text_delta", text: delta });
    },
  };

  private inject(queue: string[], mode: DeliveryMode): void {
    while (queue.length) {
      const text = queue.shift()!;
      this.messages.push({ role: "user", content: text });
      this.files.section(`Message (${mode})`, text);
    }
  }

  /** The request's `tools` (the given ones, then structured_output when the task has a schema), serialized; undefined: none. */
  private toolsJson(tools: object[]): string | undefined {
    const all = this.schema ? [...tools, this.structuredSpec()] : tools;
    return all.length ? JSON.stringify(all) : undefined;
  }

  private structuredSpec() {
    const parameters = this.wrapped ? { type: "object", properties: { value: this.schema }, required: ["value"] } : this.schema!;
    return {
      type: "function" as const,
      function: { name: STRUCTURED_TOOL, description: "Give your final answer as structured data matching this schema. Call it exactly once, when done.", parameters },
    };
  }

  private acceptStructured(rawArgs: string): { ok: boolean; output: string } {
    let value: unknown;
    let issues: string[];
    try {
      const parsed = JSON.parse(rawArgs || "null") as unknown;
      value = this.wrapped ? (parsed as { value?: unknown } | null)?.value : parsed;
      issues = this.wrapped && (typeof parsed !== "object" || parsed === null || !("value" in parsed)) ? ["$: missing value"] : this.validate!(value);
    } catch {
      issues = ["the arguments are not valid JSON"];
    }
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
  private countUsage(turn: ChatTurn, messagesJson: string): void {
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
    this.onEvent({ type: "usage", usage: delta });
  }

  // ---------------------------------------------------------------- results

  private async completed(): Promise<StageResult> {
    const structured = this.structured?.value;
    const text = this.lastText || (structured !== undefined ? JSON.stringify(structured) : "");
    let outputPath: string | undefined;
    try {
      outputPath = await writeOutputFile(this.request.cwd, this.request.agent?.output, text, structured);
    } catch (err) {
      return this.result("failed", "output_file", `could not write the output file: ${(err as Error).message}`);
    }
    this.files.section("Outcome", "completed");
    return { ...this.result("completed"), ...(structured !== undefined ? { structured } : {}), ...(outputPath ? { outputPath } : {}) };
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

  private result(status: StageResult["status"], code?: string, message?: string): StageResult {
    if (status !== "completed") this.files.section("Outcome", `${status}${message ? `: ${message}` : ""}`);
    this.ended = true;
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
      ...(code && status !== "completed" ? { error: { code, message: message ?? code } } : {}),
    };
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
