/**
 * What both pool channels share: the protocol version, the plain-data
 * shapes of stage requests, results and runner events, and the edge
 * validation helper. Every message is plain JSON (IPC serialization
 * "json"), discriminated by `type`.
 */

import * as v from "valibot";
import { writeStderr } from "../../shared/raw-stderr.ts";

/** Bumped on any incompatible change; peers refuse a different version at the handshake. */
export const POOL_PROTOCOL_VERSION = 14; // 14: a worker reports its stage's process group on the `events` batch of its start (no `started` message)

/**
 * A union of object schemas told apart by their `type` literal, parsed by
 * the one option its input's `type` names (a Map lookup, then valibot's
 * parse of that option). `v.variant` tries the options in turn and builds
 * a full issue, message included, for every option whose literal does not
 * match: for a runner event late in its list that was most of what parsing
 * a message cost (bench/README.md, agent-stages). An input whose `type`
 * names no option goes to the whole variant, so its error reads the same.
 */
export function byType<const TOptions extends v.ObjectSchema<{ type: v.LiteralSchema<string, undefined> } & v.ObjectEntries, undefined>[]>(options: TOptions) {
  const all = v.variant("type", options);
  const option = new Map<unknown, TOptions[number]>(options.map((o) => [o.entries.type.literal, o]));
  return v.lazy((input): TOptions[number] | typeof all => option.get((input as { type?: unknown } | null | undefined)?.type) ?? all);
}

/** A StageRequest (src/runners/types.ts): a field added there must be added here, or workers never see it. */
export const StageRequestSchema = v.object({
  runId: v.string(),
  stageKey: v.string(),
  stageName: v.string(),
  attempt: v.number(),
  runner: v.string(),
  command: v.optional(v.string()),
  argv: v.optional(v.array(v.string())),
  prompt: v.optional(v.string()),
  model: v.optional(v.string()),
  cwd: v.string(),
  cwdOption: v.optional(v.string()),
  queue: v.optional(v.string()),
  env: v.optional(v.record(v.string(), v.union([v.string(), v.literal(true)]))),
  timeoutMs: v.optional(v.number()),
  artifactDir: v.string(),
  workId: v.optional(v.string()),
  budgeted: v.optional(v.boolean()),
  protocol: v.optional(v.number()),
  initialMessages: v.optional(v.array(v.object({ id: v.string(), text: v.string() }))),
  continueFrom: v.optional(v.object({ sessionId: v.optional(v.string()), artifactDir: v.string(), fork: v.boolean() })),
  /** The session travels (an opencode attempt exports it); a worker that dropped it would export nothing, as before. */
  sessionsTravel: v.optional(v.boolean()),
  /** Version 7: the answer to the agent's ask_user call the stage parked on (a worker that dropped it would lose it). */
  answer: v.optional(v.object({ callId: v.string(), text: v.string() })),
  /** Version 8: the run tools' root and credential; 9: the home whose broker carries them (a worker that dropped them would refuse every message the agent sends). */
  runTools: v.optional(v.object({ rootId: v.string(), token: v.string(), home: v.string(), siblings: v.optional(v.array(v.string())) })),
  traceparent: v.optional(v.string()),
  /** A worker host's stage: its run's recorded environment (added by the host, between it and its own workers). */
  runEnv: v.optional(v.object({ env: v.record(v.string(), v.string()), secrets: v.array(v.string()) })),
  /** Version 13: a worktree stage's repository, so a worker host opens the worktree in its own checkout (fleet/host-workspace.ts). */
  workspace: v.optional(v.object({ remote: v.object({ name: v.string(), url: v.string() }), baseCommit: v.string(), branch: v.string(), prefix: v.string() })),
  /** Version 6: a worker that dropped it would run the stage unsandboxed. */
  sandbox: v.optional(
    v.object({
      network: v.picklist(["none", "provider", "open"]),
      read: v.array(v.string()),
      write: v.array(v.string()),
      hosts: v.array(v.string()),
      hidden: v.array(v.string()),
      channels: v.optional(v.array(v.string())),
    }),
  ),
  /** Agent stages: AgentOptions (src/runners/types.ts); plain data, checked by the runner. */
  agent: v.optional(
    v.object({
      tools: v.optional(v.array(v.string())),
      schema: v.optional(v.record(v.string(), v.unknown())),
      output: v.optional(v.string()),
      maxTurns: v.optional(v.number()),
      system: v.optional(v.string()),
      baseUrl: v.optional(v.string()),
      maxRetries: v.optional(v.number()),
      maxBackoffMs: v.optional(v.number()),
      requestTimeoutMs: v.optional(v.number()),
      binary: v.optional(v.string()),
      args: v.optional(v.array(v.string())),
      pricing: v.optional(
        v.record(
          v.string(),
          v.object({
            inputPerMTok: v.optional(v.number()),
            outputPerMTok: v.optional(v.number()),
            cacheReadPerMTok: v.optional(v.number()),
            cacheWritePerMTok: v.optional(v.number()),
          }),
        ),
      ),
    }),
  ),
});

/** A StageResult (src/sdk/types.ts), likewise kept in step with it. */
export const StageResultSchema = v.object({
  status: v.picklist(["completed", "failed", "cancelled"]),
  text: v.string(),
  exitCode: v.nullable(v.number()),
  outputPath: v.string(),
  errorPath: v.optional(v.string()),
  error: v.optional(v.object({ code: v.string(), message: v.string(), log: v.optional(v.string()) })),
  warnings: v.optional(v.array(v.string())),
  structured: v.optional(v.unknown()),
  usage: v.optional(
    v.object({
      inputTokens: v.number(),
      outputTokens: v.number(),
      cacheReadTokens: v.number(),
      cacheWriteTokens: v.number(),
      costMicroUsd: v.number(),
      turns: v.number(),
      model: v.optional(v.string()),
      estimated: v.optional(v.boolean()),
      unpriced: v.optional(v.boolean()),
    }),
  ),
  sessionId: v.optional(v.string()),
  transcriptPath: v.optional(v.string()),
  eventsPath: v.optional(v.string()),
  workerId: v.optional(v.string()),
  generation: v.optional(v.number()),
  askUser: v.optional(v.object({ callId: v.string(), question: v.string(), choices: v.optional(v.array(v.string())) })),
  /** Version 13: a worker host ran the stage in its own worktree and pushed its branch to the shared remote (fleet/host-workspace.ts). */
  pushed: v.optional(v.object({ url: v.string(), branch: v.string(), head: v.string() })),
  /** Version 11: the processes that outlived the stage's cleanup (pool/leftovers.ts); an older peer would drop them. */
  cleanup: v.optional(
    v.object({
      code: v.literal("worker_cleanup_unconfirmed"),
      survivors: v.array(v.object({ pid: v.number(), command: v.string(), ended: v.boolean() })),
    }),
  ),
});

export const RunnerEventSchema = byType([
  v.object({ type: v.literal("started"), pid: v.optional(v.number()), sessionId: v.optional(v.string()), at: v.optional(v.number()) }),
  v.object({ type: v.literal("output"), stream: v.picklist(["stdout", "stderr"]), text: v.string(), skipped: v.optional(v.number()) }),
  v.object({ type: v.literal("text_delta"), text: v.string(), skipped: v.optional(v.number()) }),
  v.object({ type: v.literal("message_received"), id: v.string() }),
  v.object({ type: v.literal("held"), held: v.boolean() }),
  v.object({ type: v.literal("tool_start"), name: v.string(), id: v.optional(v.string()), at: v.optional(v.number()), input: v.optional(v.string()) }),
  v.object({ type: v.literal("tool_end"), name: v.string(), id: v.optional(v.string()), ok: v.boolean(), at: v.optional(v.number()), output: v.optional(v.string()) }),
  v.object({
    type: v.literal("usage"),
    usage: v.record(v.string(), v.unknown()),
    call: v.optional(
      v.object({
        startedAt: v.number(),
        endedAt: v.number(),
        provider: v.string(),
        requestModel: v.optional(v.string()),
        responseModel: v.optional(v.string()),
        finishReasons: v.array(v.string()),
        retries: v.number(),
        retriedCodes: v.optional(v.pipe(v.array(v.pipe(v.string(), v.maxLength(64))), v.maxLength(100))),
        rateLimitWaitMs: v.optional(v.pipe(v.number(), v.minValue(0))),
      }),
    ),
  }),
]);

export const DeliveryModeSchema = v.picklist(["steer", "followUp", "interrupt"]);

export const WorkRefSchema = v.object({ workId: v.string(), generation: v.number(), epoch: v.number() });

/**
 * Messages the coordinator passes from the root to the worker running the
 * stage as they are (one shape on both channels).
 */
export const DeliverSchema = v.object({
  type: v.literal("deliver"),
  workId: v.string(),
  message: v.object({ id: v.string(), text: v.string() }),
  mode: DeliveryModeSchema,
});
/** The run's budget ran out: the running agent stage gets one wrap-up turn with `text`. */
export const WrapUpSchema = v.object({ type: v.literal("wrap_up"), workId: v.string(), text: v.string(), reason: v.picklist(["spending", "time"]) });
/** The stage was paused (held) or unpaused: the running agent stage holds after its turn, or goes on. */
export const HoldSchema = v.object({ type: v.literal("hold"), workId: v.string(), held: v.boolean() });
/** Control revision `rev`: paused or not, acknowledged with `control_ack`. */
export const ControlSchema = v.object({ type: v.literal("control"), rev: v.number(), paused: v.boolean() });

/** Parse an incoming message (valibot); undefined (and a log line) for anything malformed. */
export function parseMessage<T>(schema: v.GenericSchema<unknown, T>, raw: unknown, from: string): T | undefined {
  const parsed = v.safeParse(schema, raw);
  if (parsed.success) return parsed.output;
  const issue = parsed.issues[0];
  const path = issue.path?.map((p) => String(p.key)).join(".") ?? "";
  writeStderr(`[pool] dropped a malformed message from ${from}${path ? ` at ${path}` : ""}: ${issue.message}\n`);
  return undefined;
}

export function assertNever(value: never): never {
  throw new Error(`internal: unhandled message ${JSON.stringify(value)}`);
}
