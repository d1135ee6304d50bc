/**
 * The runner interface: one contract for everything that executes a stage
 * (the shell runner here; the OpenAI agent loop and CLI agents later).
 *
 * `start(request)` returns a handle at once. The handle streams events
 * (output lines, text deltas, tool calls, usage), accepts messages in one of
 * three delivery modes, can be interrupted (end the current turn) or
 * cancelled (end everything, kill the process group), and settles `result`
 * exactly once. A runner decides success from its final event, not only from
 * an exit code; `result` never rejects: failures are results with
 * `status: "failed"` and an error code.
 *
 * A stage request is plain data, so the worker pool can ship it to another
 * process unchanged.
 */

import type { StageResult, Usage } from "../sdk/types.ts";
import type { ModelPrice } from "../shared/config/schema.ts";
import type { SandboxSpec } from "../shared/sandbox-option.ts";

export type DeliveryMode = "steer" | "followUp" | "interrupt";

/** Which limit of the run's budget ran out (RunnerHandle.wrapUp): a cost or token cap, or the duration. */
export type WrapUpReason = "spending" | "time";

export interface StageRequest {
  /** Run and stage identity, for logs and environment variables. */
  runId: string;
  stageKey: string;
  stageName: string;
  attempt: number;
  runner: string;
  /** Shell code for `/bin/sh -c`. */
  command?: string;
  /** Or the argv form: the program and its arguments, run without a shell (sdk/shell.ts). */
  argv?: string[];
  prompt?: string;
  model?: string;
  cwd: string;
  /** The stage's own `cwd` option as written (a worker host resolves it against its --workdir); absent when it named none. */
  cwdOption?: string;
  /** The worker queue it waits on (absent: the default queue). */
  queue?: string;
  /** The pool protocol of the root that enqueued it: a worker host of another protocol refuses it. */
  protocol?: number;
  /** The stage's `env` option: a value to set, or `true` for this process's own value (runners/stage-env.ts). */
  env?: Record<string, string | true>;
  timeoutMs?: number;
  /** Directory for this attempt's files (stdout.log, stderr.log, transcript). */
  artifactDir: string;
  /** The work queue item carrying this request, when it runs on the worker pool. */
  workId?: string;
  /**
   * The run tree has a cost or token budget: once this item's result is
   * committed the pool claims no other item of the drive until the root has
   * counted that result (StageExecutor.budgetCounted), so no stage starts
   * after the spending that used the budget up (docs/design/pool.md).
   */
  budgeted?: boolean;
  /**
   * Messages sent to this stage before it started, in order: delivered
   * before anything else (a shell stage: written to stdin first; an agent:
   * a first user-context block, "Messages received before you started").
   */
  initialMessages?: { id: string; text: string }[];
  /** Agent stages: everything the runner needs, resolved in the root from the task options and config (no secrets). */
  agent?: AgentOptions;
  /**
   * `continueFrom`: the earlier stage's session to continue (or fork):
   * its session id (CLI agents) and its attempt's artifact directory
   * (openai: conversation.json there; pi: its session file).
   */
  continueFrom?: { sessionId?: string; artifactDir: string; fork: boolean };
  /**
   * The attempt's session files travel to other machines (a journal they share offers an artifact store): a CLI
   * whose session is not a file exports it for them (opencode: cli-agents/opencode-sessions.ts).
   */
  sessionsTravel?: boolean;
  /**
   * The stage parked on its agent's `ask_user` call and the person answered:
   * the attempt continues `continueFrom`'s conversation with `text` as that
   * call's result, instead of a new prompt (engine/steps/agent-asks.ts).
   */
  answer?: { callId: string; text: string };
  /**
   * The run tools (message, ask_agent, reply: runners/run-tools.ts): the
   * run's root to ask, the attempt's credential, and the names of the
   * stage's group siblings (`ctx.parallel(…, { group: true })`).
   */
  runTools?: { rootId: string; token: string; home: string; siblings?: string[] };
  /** W3C trace context of the stage attempt's span, when traces are on: the stage's processes get it as TRACEPARENT. */
  traceparent?: string;
  /**
   * On a worker host: the environment the stage's run recorded when it started (its secrets' names only),
   * which the stage gets over the host's own (runners/stage-env.ts); the host reads it from the journal.
   * A root's own stages inherit it from the root, whose environment is the run's already.
   */
  runEnv?: { env: Record<string, string>; secrets: string[] };
  /** The stage's sandbox, resolved in the root (absent: none); `hidden`: the atomic home and artifact store; `channels`: atomic's own sockets shown read-only inside (docs/design/sandbox.md). */
  sandbox?: SandboxSpec & { hidden: string[]; channels?: string[] };
  /**
   * A worktree stage (`workspace: "worktree"`): the repository's shared remote (its name and URL in the root's
   * checkout), the base commit, the branch and the cwd's subdirectory in the checkout. A worker host given a
   * checkout (`atomic worker --repo`) opens the worktree there (fleet/host-workspace.ts; docs/design/worktrees.md).
   */
  workspace?: { remote: { name: string; url: string }; baseCommit: string; branch: string; prefix: string };
}

export interface AgentOptions {
  tools?: string[];
  /** JSON Schema of the structured output (a valibot schema is converted in the root). */
  schema?: Record<string, unknown>;
  /** Where to write the final answer, relative to cwd. */
  output?: string;
  maxTurns?: number;
  system?: string;
  /** openai: the endpoint (the key comes from the worker's OPENAI_API_KEY). */
  baseUrl?: string;
  maxRetries?: number;
  maxBackoffMs?: number;
  requestTimeoutMs?: number;
  /** CLI agents: the binary and extra arguments. */
  binary?: string;
  args?: string[];
  /** Prices by model, for runners whose agent reports no cost. */
  pricing?: Record<string, ModelPrice>;
}

/** Characters of a tool call's arguments or result a live event carries (the transcript keeps them whole). */
export const TOOL_TEXT_CAP = 2000;

/** `text` cut to TOOL_TEXT_CAP characters, saying so. */
export function capToolText(text: string): string {
  return text.length <= TOOL_TEXT_CAP ? text : `${text.slice(0, TOOL_TEXT_CAP)}… (${text.length - TOOL_TEXT_CAP} more characters)`;
}

export type RunnerEvent =
  /** `at`: when the stage started (set by the worker that runs it, so the root tells queued time from running time). */
  | { type: "started"; pid?: number; sessionId?: string; at?: number }
  /** `skipped`: bytes of this stream the pool's live cap left out here (src/pool/event-batcher.ts); the stage's logs keep them. */
  | { type: "output"; stream: "stdout" | "stderr"; text: string; skipped?: number }
  | { type: "text_delta"; text: string; skipped?: number }
  /**
   * `at`: when the tool started or ended (the pool delivers events in batches, later). `input`: its
   * arguments, `output`: its result, each cut to TOOL_TEXT_CAP characters, where the runner sees them (for live views).
   */
  | { type: "tool_start"; name: string; id?: string; at?: number; input?: string }
  | { type: "tool_end"; name: string; id?: string; ok: boolean; at?: number; output?: string }
  /** A model request carried the message with this id (the openai runner: the model saw it): its delivery becomes received. */
  | { type: "message_received"; id: string }
  /** The agent waits after its turn because its stage is paused (true), or goes on (false): RunnerHandle.hold. */
  | { type: "held"; held: boolean }
  /** `call`: the model call this usage is of, when the runner made it itself (the openai runner). */
  | { type: "usage"; usage: Partial<Usage>; call?: ModelCall };

/** One model call, as the traces show it (GenAI `chat` spans: docs/design/observability.md). */
export interface ModelCall {
  startedAt: number;
  endedAt: number;
  /** gen_ai.provider.name: the protocol the runner spoke ("openai"). */
  provider: string;
  requestModel?: string;
  responseModel?: string;
  finishReasons: string[];
  /** Calls retried before this one answered (rate limits, unavailable). */
  retries: number;
  /** The error codes of the retried calls, in order (provider_rate_limit, provider_unavailable...). */
  retriedCodes?: string[];
  /**
   * Milliseconds this call waited for rate limits: the host's shared
   * back-off before it (runners/rate-limits.ts) and the back-off after each
   * of its own 429s. Absent when it did not wait.
   */
  rateLimitWaitMs?: number;
}

export interface RunnerHandle {
  readonly result: Promise<StageResult>;
  /** `id`: the message's id, for a runner that reports receipts (message_received). */
  send(message: string, mode: DeliveryMode, id?: string): Promise<void>;
  /** End the current turn; for a shell stage, SIGINT to its process group. */
  interrupt(): void;
  /** End the stage now: the whole process group is killed; result settles "cancelled". */
  cancel(reason?: string): void;
  /**
   * The run's budget is used up: the agent finishes what it is doing and
   * the stage ends with what it has. `reason` says which limit:
   * "spending" (a cost or token cap) lets a model call in flight finish,
   * so its usage is recorded, and runs no tool and no new call after it;
   * "time" (the duration limit) aborts the call in flight and gives the
   * agent one last turn with `text`, without tools (docs/design/engine.md,
   * Budgets). CLI agents finish the turn they are in either way. Runners
   * without turns (shell) do not implement it.
   */
  wrapUp?(text: string, reason?: WrapUpReason): void;
  /**
   * The stage was paused (true) or unpaused (false): the agent finishes the
   * turn it is in and takes no next one until unpaused, saying so with a
   * `held` event each way. Runners whose turns run inside another program
   * (the CLI agents, shell) do not implement it: their attempt goes on.
   */
  hold?(held: boolean): void;
}

export interface Runner {
  readonly kind: string;
  /** The runner can continue an earlier stage's session (`continueFrom`), and fork one; absent: it has no sessions. */
  /** `byId`: it resumes by the earlier result's sessionId (the CLIs but pi), else from the earlier stage's files. */
  readonly sessions?: { fork: boolean; byId?: boolean };
  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle;
}
