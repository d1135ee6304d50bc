/**
 * The stage executor of a test run: agent stages answered from the test's
 * script, shell stages stubbed by pattern, every other stage run by its
 * real runner in this process (InProcessExecutor). The engine cannot tell
 * a scripted stage from a real one: it gets the same events (started,
 * tool calls, usage, output) and the same kind of result, with the stage's
 * output and transcript written to its attempt's directory.
 *
 * A crash (`crashAt`) is the executor's to notice for stages: the matching
 * stage starts, the run is stopped at once as a killed process would leave
 * it (the attempt recorded as started, never as completed), and the stage
 * never returns a result of its own.
 */

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { StageResult, Usage } from "../sdk/types.ts";
import { InProcessExecutor, type StageExecutor } from "../runners/stage-executor.ts";
import type { RunnerEvent, StageRequest } from "../runners/types.ts";
import { matchKey } from "./matching.ts";
import type { AgentReply, ShellStub, TestRunOptions, TestStage } from "./types.ts";

const NO_USAGE: Usage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 0, turns: 1 };

export class ScriptedExecutor implements StageExecutor {
  readonly queued = false;
  private readonly real = new InProcessExecutor();
  /** Calls so far per agents key: the next call takes the next reply. */
  private readonly calls = new Map<string, number>();
  /** What each stage did, by name (`name#2` for a second stage of the same name). */
  readonly stages: Record<string, TestStage> = {};
  private readonly stageNames = new Map<string, string>();

  constructor(
    private readonly opts: TestRunOptions,
    /** Called when a stage matching crashAt starts; returns true when this drive crashes there. */
    private readonly crashHere: (name: string) => boolean,
    /** A stage's path through child workflows (`summarize/report`), as `atomic send` and `logs --stage` name it. */
    private readonly pathOf: (runId: string, stageName: string) => string = (_, name) => name,
  ) {}

  answers(stage: { name: string; runner: string; runId: string }): boolean {
    return stage.runner !== "shell" && matchKey(this.opts.agents, this.pathOf(stage.runId, stage.name), stage.name) !== undefined;
  }

  async execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult> {
    const path = this.pathOf(request.runId, request.stageName);
    const messages = matchKey(this.opts.messages, path, request.stageName)?.[1];
    if (messages !== undefined) {
      const list = Array.isArray(messages) ? messages : [messages];
      request = { ...request, initialMessages: [...(request.initialMessages ?? []), ...list.map((text, i) => ({ id: `test-${i + 1}`, text }))] };
    }
    if (this.crashHere(path)) {
      onEvent({ type: "started", at: Date.now() });
      // The process "dies" here: nothing of this attempt is ever reported.
      return new Promise((resolve) => {
        const end = () => resolve({ status: "cancelled", text: "", exitCode: null, outputPath: "", error: { code: "cancelled", message: "the test crashed the run here" } });
        if (signal.aborted) end();
        else signal.addEventListener("abort", end, { once: true });
      });
    }
    let result: StageResult;
    let transcript: string;
    if (request.runner === "shell") {
      const command = request.command ?? request.argv?.join(" ") ?? "";
      const stub = matchKey(this.opts.shell, path, request.stageName, command)?.[1];
      if (stub) {
        result = stubShell(request, stub, onEvent);
        transcript = `$ ${command}\n${stub.stdout ?? ""}${stub.stderr ?? ""}`;
      } else {
        result = await this.real.execute(request, signal, onEvent);
        transcript = `$ ${command}\n${result.text}`;
      }
    } else {
      const scripted = matchKey(this.opts.agents, path, request.stageName);
      if (scripted) {
        const [key, script] = scripted;
        const replies = typeof script === "string" ? [script] : script;
        const n = this.calls.get(key) ?? 0;
        this.calls.set(key, n + 1);
        const reply = replies[Math.min(n, replies.length - 1)] ?? "";
        ({ result, transcript } = answerAgent(request, reply, onEvent));
      } else {
        result = await this.real.execute(request, signal, onEvent);
        transcript = readTranscript(result) ?? `${request.prompt ?? ""}\n\n${result.text}`;
      }
    }
    this.note(request, path, result, transcript);
    return result;
  }

  deliver(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: "steer" | "followUp" | "interrupt") {
    return this.real.deliver(stage, message, mode);
  }

  async close(): Promise<void> {
    await this.real.close();
  }

  private note(request: StageRequest, path: string, result: StageResult, transcript: string): void {
    const id = `${request.runId}\u0000${request.stageKey}`;
    let name = this.stageNames.get(id);
    if (!name) {
      name = path;
      for (let i = 2; Object.hasOwn(this.stages, name); i++) name = `${path}#${i}`;
      this.stageNames.set(id, name);
    }
    const before = this.stages[name];
    this.stages[name] = {
      name: request.stageName,
      runner: request.runner,
      attempts: (before?.attempts ?? 0) + 1,
      status: result.status,
      text: result.text,
      ...(result.structured !== undefined ? { structured: result.structured } : {}),
      ...(result.usage ? { usage: result.usage } : {}),
      transcript: before ? `${before.transcript}\n\n--- attempt ${(before.attempts ?? 0) + 1}\n\n${transcript}` : transcript,
      ...(result.error ? { error: { code: result.error.code, message: result.error.message } } : {}),
    };
  }
}

function stubShell(request: StageRequest, stub: ShellStub, onEvent: (event: RunnerEvent) => void): StageResult {
  const files = attemptFiles(request);
  const stdout = stub.stdout ?? "";
  const stderr = stub.stderr ?? "";
  writeFileSync(files.outputPath, stdout);
  writeFileSync(files.errorPath, stderr);
  onEvent({ type: "started", at: Date.now() });
  if (stdout) onEvent({ type: "output", stream: "stdout", text: stdout });
  if (stderr) onEvent({ type: "output", stream: "stderr", text: stderr });
  const exitCode = stub.exitCode ?? 0;
  const base = { text: stdout, exitCode, ...files };
  if (exitCode === 0) return { ...base, status: "completed" };
  return { ...base, status: "failed", error: { code: "exit_code", message: `exited with code ${exitCode}` } };
}

function answerAgent(request: StageRequest, reply: AgentReply, onEvent: (event: RunnerEvent) => void): { result: StageResult; transcript: string } {
  const r = typeof reply === "string" ? { text: reply } : reply;
  const files = attemptFiles(request);
  const lines: string[] = [`## prompt\n\n${request.prompt ?? ""}`];
  for (const m of request.initialMessages ?? []) lines.push(`## message\n\n${m.text}`);
  onEvent({ type: "started", sessionId: `test-${request.runId}-${request.stageKey}-${request.attempt}`, at: Date.now() });
  for (const [i, call] of (r.toolCalls ?? []).entries()) {
    const id = `call-${i + 1}`;
    onEvent({ type: "tool_start", name: call.name, id });
    onEvent({ type: "tool_end", name: call.name, id, ok: call.ok !== false });
    lines.push(`## tool ${call.name}${call.ok === false ? " (failed)" : ""}\n\n${call.input === undefined ? "" : `${JSON.stringify(call.input)}\n`}${call.output ?? ""}`);
  }
  const usage: Usage = { ...NO_USAGE, ...(request.model ? { model: request.model } : {}), ...r.usage };
  onEvent({ type: "usage", usage });
  const text = r.text ?? "";
  if (text) onEvent({ type: "text_delta", text });
  lines.push(`## reply\n\n${text}`);
  writeFileSync(files.outputPath, text);
  const transcript = lines.join("\n\n");
  writeFileSync(files.transcriptPath, transcript);
  const base = { text, exitCode: null, usage, sessionId: `test-${request.runId}-${request.stageKey}`, ...files };
  const failed = (code: string, message: string) => {
    const t = `${transcript}\n\n## error\n\n${code}: ${message}`;
    writeFileSync(files.transcriptPath, t);
    return { result: { ...base, status: "failed" as const, error: { code, message } }, transcript: t };
  };
  if (r.timeout) return failed("timeout", `timed out after ${request.timeoutMs ?? 0} ms`);
  if (r.providerError) {
    const code = r.providerError.startsWith("provider_") ? r.providerError : `provider_${r.providerError}`;
    return failed(code, `the model provider failed (${code}), as the test scripted`);
  }
  if (r.error !== undefined) {
    const e = typeof r.error === "string" ? { message: r.error } : r.error;
    return failed(e.code ?? "agent_error", e.message);
  }
  let structured = r.structured;
  if (structured === undefined && request.agent?.schema) {
    try {
      structured = JSON.parse(text);
    } catch {
      return failed("bad_structured_output", "the stage has a schema, and the scripted reply has neither `structured` nor JSON text");
    }
  }
  return { result: { ...base, status: "completed", ...(structured !== undefined ? { structured } : {}) }, transcript };
}

function attemptFiles(request: StageRequest): { outputPath: string; errorPath: string; transcriptPath: string } {
  mkdirSync(request.artifactDir, { recursive: true });
  return {
    outputPath: join(request.artifactDir, "stdout.log"),
    errorPath: join(request.artifactDir, "stderr.log"),
    transcriptPath: join(request.artifactDir, "transcript.md"),
  };
}

function readTranscript(result: StageResult): string | undefined {
  try {
    return result.transcriptPath ? readFileSync(result.transcriptPath, "utf8") : undefined;
  } catch {
    return undefined;
  }
}
