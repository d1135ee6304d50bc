/**
 * What a workflow author sees: the options and results of every primitive.
 *
 * Failure semantics shared by all primitives (the "durable step" contract):
 * - A step whose result was checkpointed never runs again for that run;
 *   on resume it returns the recorded result at once.
 * - A step runs at least once: a crash between its end and its checkpoint
 *   re-runs it (ctx.tool hands you an idempotency key for that reason).
 * - A step that fails with `failureMode: "throw"` (the default) is not
 *   checkpointed: the run fails, and `atomic resume` runs the step again.
 *   With `failureMode: "return"` the failure is a result, checkpointed and
 *   replayed like any other.
 */

import type { GenericSchema, InferOutput } from "valibot";
import type { SandboxOption } from "../shared/sandbox-option.ts";

export type InputSchemas = Record<string, GenericSchema>;
export type InputsOf<S extends InputSchemas> = { [K in keyof S]: InferOutput<S[K]> };

export type FailureMode = "throw" | "return";

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  /** Cost in integer micro-dollars (exact sums across stages). */
  costMicroUsd: number;
  turns: number;
  model?: string;
  /** Token counts are estimates (the provider reported no usage). */
  estimated?: boolean;
  /** No price was known for the model: costMicroUsd is 0 and not a real cost. */
  unpriced?: boolean;
}

export type StageStatus = "completed" | "failed" | "cancelled";

/** Result of a stage (ctx.task / ctx.shell). */
export interface StageResult {
  status: StageStatus;
  /** Stage output text: stdout for shell (capped; the whole output is in `outputPath`). */
  text: string;
  exitCode: number | null;
  /** File holding the stage's full stdout. */
  outputPath: string;
  /** File holding the stage's stderr. */
  errorPath?: string;
  structured?: unknown;
  usage?: Usage;
  sessionId?: string;
  /** Agent stages: the readable transcript (markdown) and the raw event log (JSONL, written before parsing). */
  transcriptPath?: string;
  eventsPath?: string;
  /** Set when status is not "completed". */
  /** `log`: the file that says more (an infrastructure fault's: the pool coordinator's log). */
  error?: { code: string; message: string; log?: string };
  /** What the stage's user should know although it did not fail (a tool the agent refused to run). */
  warnings?: string[];
  /** On the worker pool: which worker ran it, and the attempt generation (2 = it was retried after a lost worker). */
  workerId?: string;
  generation?: number;
  /**
   * Agent stages: the runner and model the stage ran with, and the `cwd`
   * it was given (absent: the run's). A stage that continues this one (`continueFrom`, `fork`) runs with
   * them unless it names its own.
   */
  runner?: string;
  model?: string;
  cwd?: string;
  /**
   * Internal, never seen by a workflow: the attempt ended to park the stage
   * on its agent's `ask_user` call (the stage asks the person and goes on
   * with the answer as the call's result).
   */
  askUser?: { callId: string; question: string; choices?: string[] };
  /** A stage with `workspace: "worktree"`: its worktree, branch, the commits it made and its diff against the base. */
  workspace?: StageWorkspace;
  /**
   * Internal, never seen by a workflow: a worker host ran the stage in a worktree of its own checkout and
   * pushed the branch (its head) to the shared remote at `url`; the root fetches it before it settles.
   */
  pushed?: { url: string; branch: string; head: string };
  /** Processes of the stage that outlived its cleanup (they had left its process group), found and killed by its worker. */
  cleanup?: StageCleanup;
}

/**
 * `worker_cleanup_unconfirmed`: the processes of a stage attempt its runner's
 * cleanup left running, each with its pid, command line and whether the
 * worker saw it end after SIGKILL. The stage's result stands.
 */
export interface StageCleanup {
  code: "worker_cleanup_unconfirmed";
  survivors: { pid: number; command: string; ended: boolean }[];
}

/**
 * A stage's git worktree (TaskOptions.workspace), as its result records it:
 * where it is, its branch, the base it started from, the commits on the
 * branch since the base (what the stage left uncommitted is committed last
 * by atomic: `auto`), the files changed and the diff (`diff` capped at
 * 64 KiB, `diffTruncated` then; the whole diff is in `diffPath`).
 */
export interface StageWorkspace {
  /** The stage's name (what `atomic diff` and `atomic review` take). */
  stage: string;
  repo: string;
  path: string;
  branch: string;
  base: string;
  baseCommit: string;
  head: string;
  commits: { sha: string; subject: string; auto?: boolean }[];
  files: { path: string; status: string }[];
  diff: string;
  diffTruncated?: boolean;
  diffPath: string;
}

/** `"worktree"`: a git worktree of the stage's own, on a new branch from the run's current commit; or name the base and branch. */
export type WorkspaceOption = "worktree" | { worktree: { base?: string; branch?: string } };

/** A shell stage's command: shell code (a string, e.g. from `sh\`…\``), or argv (an array: no shell). */
export type ShellCommand = string | readonly string[];

export interface TaskOptions {
  /**
   * Runs the stage with the shell runner. A string is shell code, run by
   * `/bin/sh -c`: a value interpolated into it is interpreted too (spaces,
   * quotes, `$(…)`, `;`). To pass values, use the `sh` template (each value
   * quoted as one word) or an array, the argv form: no shell, `argv[0]` is
   * the program (looked up in PATH), every element one argument as is. An
   * empty array, or an element that is not a string, fails the step before
   * anything is recorded or started; a program that does not exist fails
   * the stage (`spawn_failed`).
   */
  shell?: ShellCommand;
  /** Agent prompt: runs the stage with an agent runner (`runner`, else the workflow's, else config's; default "openai"). */
  prompt?: string;
  /** shell, openai, claude, codex, gemini, opencode, pi. */
  runner?: string;
  model?: string;
  /**
   * Tools an agent may use. The openai runner's set: read, write, edit,
   * list, grep, bash (default: all), confined to the stage's cwd. CLI
   * agents: the same names, mapped to the CLI's own tools (claude: Read,
   * Write, Edit, Glob, Grep, Bash; other names pass unchanged); `[]`: no
   * tools where the CLI allows it.
   * Granted only by name (openai runner; claude but ask_user; docs/guides/messages-and-humans.md):
   * `ask_user` (the agent asks a person; the stage parks on it like
   * ctx.ask), `message` (to another stage of the run, started or not),
   * `ask_agent` (ask a running stage and wait for its `reply`; brings
   * `reply`), `reply`.
   */
  tools?: string[];
  /**
   * Structured output: a valibot schema (or a JSON Schema object: draft-07,
   * or 2020-12 named by `$schema`). A schema that cannot be used fails the
   * step before the stage starts. The result's `structured` holds the
   * validated value; an agent that cannot produce it after 3 corrective
   * re-prompts fails the stage.
   */
  schema?: GenericSchema | Record<string, unknown>;
  /**
   * Where the final answer goes. A path (relative to cwd): the answer
   * (structured output as JSON, else the text) is also written there, and
   * `outputPath` names it. `"file"`: the answer goes to `output.md` in the
   * stage's artifact directory, `outputPath` names that file and `text` is
   * "" (a long answer then neither travels through the journal nor sits in
   * the workflow's memory; read the file). A shell stage with `"file"`
   * keeps its stdout in `outputPath` (stdout.log) and `text` is "". (A file
   * of the cwd literally named "file": write "./file".)
   */
  output?: string;
  /**
   * Files attached to the prompt (agent stages), relative to the stage's
   * cwd: each file's text follows the prompt in a `<file path="…">` block,
   * and the list of paths is named first. Bounded: at most 64 KiB of each
   * file and 256 KiB in all (a longer file is cut, and the block says how
   * much was left out). A file that does not exist or cannot be read fails
   * the step before the stage starts (code `read_failed`, naming the path),
   * so an agent never works from an attachment that silently went missing.
   * The files are read when the stage starts; a recorded stage replays its
   * result without reading them again.
   */
  reads?: string[];
  /**
   * Continue an earlier agent stage's session: the new prompt is one more
   * user turn of that conversation, which the agent sees whole. Give the
   * earlier stage's result (`continueFrom: plan`). The stage runs with the
   * earlier one's runner, model and cwd unless it names its own (a CLI
   * keeps its sessions under its home and cwd); naming another runner fails
   * the step before it starts (`bad_continue`), naming both. A CLI's session is one
   * conversation that each continuation adds to: continuing a result whose
   * session was continued since sees those later turns too (fork first to
   * branch from a point); openai and pi continue from the earlier stage's
   * own copy, as it was when that stage ended. How each runner does it:
   * openai replays the earlier conversation (conversation.json of its
   * artifact directory) as the start of this one; claude `--resume`;
   * codex `exec resume`; gemini `-r`; opencode `-s`; pi opens a copy of
   * the earlier session file. A runner without sessions (shell) refuses
   * the step before it starts (code `bad_continue`).
   */
  continueFrom?: StageResult;
  /**
   * Runs the stage's processes in a sandbox (Linux, bubblewrap;
   * docs/guides/security.md): the cwd writable, the rest of the system
   * read-only, the home hidden but what `read` / `write` name (absolute or
   * `~/…`, each must exist), credentials never visible, a network of its
   * own (`"none"`, `"provider"`: only the model provider, through atomic's
   * proxy, plus `hosts`; `"open"`) and a PID namespace: nothing the stage
   * starts outlives it. `true`: the defaults (network "none" for a shell
   * stage, "provider" for an agent); `"off"`: none. Absent: the workflow's
   * `sandbox`, else the config's, else the default: an agent stage is
   * sandboxed (network "provider"), a shell stage is not. Where bubblewrap
   * cannot make one, the step fails before the stage starts
   * (`bad_sandbox`), the default's too: set `"off"` to run unsandboxed.
   */
  sandbox?: SandboxOption;
  /**
   * Runs the stage in a git worktree of its own (docs/guides/worktrees.md):
   * `"worktree"`, or `{ worktree: { base?, branch? } }`. The worktree is
   * made from the repository of the stage's cwd, on a new branch
   * (default `atomic/<run id>/<position>-<stage>`) from `base` (default:
   * the checkout's current commit, which must have no uncommitted changes),
   * and the stage runs in it (in the same subdirectory as its cwd). A
   * resumed attempt reuses it; `atomic gc` removes it with the run (the
   * branch stays). The result's `workspace` holds the commits and the diff.
   */
  workspace?: WorkspaceOption;
  /**
   * With `continueFrom`: branch off the earlier session instead of adding
   * to it, so the earlier stage's session stays as it was and two forks can
   * go different ways (claude `--fork-session`, codex `exec fork`, opencode
   * `--fork`; openai and pi always work on a copy, so for them a fork and a
   * continuation are the same). gemini cannot fork: refused (`bad_continue`).
   */
  fork?: boolean;
  /** Most model turns an agent may take (default 50). */
  maxTurns?: number;
  /** A system prompt for the openai runner (CLI agents: appended where supported). */
  system?: string;
  /**
   * Where the stage runs (default: the root's working directory). On a
   * worker host (`queue`, or a root with `--workers 0`) a relative cwd is
   * taken from the host's `--workdir`, and an absolute one must exist on
   * that host.
   */
  cwd?: string;
  /**
   * The worker queue the stage waits on (default "default"): only worker
   * hosts that serve it (`atomic worker --queues gpu`) run it. Letters,
   * digits, `.`, `_` and `-`, at most 64.
   */
  queue?: string;
  /**
   * Extra environment variables for the stage process: a string sets the
   * variable; `true` passes atomic's own value of it. Credentials atomic
   * uses (OPENAI_API_KEY and the other provider keys, ATOMIC_JOURNAL,
   * PGPASSWORD, the status token) reach a stage only when named here,
   * e.g. `env: { OPENAI_API_KEY: true }`.
   */
  env?: Record<string, string | true>;
  timeoutMs?: number;
  /** Attempts after the first on failure (default 0). Infrastructure faults are retried on top (3 attempts). */
  retries?: number;
  failureMode?: FailureMode;
}

export interface ShellOptions extends Omit<TaskOptions, "shell" | "prompt"> {}

export interface ToolOptions {
  /** Attempts after the first when `fn` throws (default 2). */
  retries?: number;
  /** First backoff delay; doubles per attempt (default 200 ms, capped at maxBackoffMs). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Abort `fn` after this long (its signal fires), counted as a failed attempt. */
  timeoutMs?: number;
  failureMode?: FailureMode;
}

export interface ToolCallInfo {
  /** Stable across retries and resumes of this step: use it to make external effects exactly-once. */
  idempotencyKey: string;
  /** Fires when the run is cancelled or interrupted, the attempt times out, or the run's time budget is used up. */
  signal: AbortSignal;
  /** 1-based attempt number. */
  attempt: number;
}

export type ToolResult<T> =
  | { ok: true; value: T }
  | { ok: false; error: { code: string; message: string } };

/** A step given to ctx.parallel / ctx.chain: a stage described by data, or a function. */
export type StepSpec =
  | ({ name: string } & TaskOptions)
  | (() => Promise<unknown>);

export interface ParallelOptions {
  /** At most this many steps at once (default: all). */
  concurrency?: number;
  /** Stop starting new steps after the first failure and fail at once (default true). */
  failFast?: boolean;
  /**
   * The steps are a group of agents that work together: each agent stage
   * given as data is told its siblings' names, to address them with its
   * run tools (`message`, `ask_agent`, `reply`; docs/guides/messages-and-humans.md).
   */
  group?: boolean;
  /** Each stage given as data that names no workspace of its own gets this one (`"worktree"`: a worktree each). */
  workspace?: WorkspaceOption;
}

/**
 * How `ctx.exit` ends a run: completed (exit code 0), failed (1), blocked
 * (3: resumable with `atomic resume` once what blocks it is resolved),
 * cancelled (4), skipped (5: nothing to do; a parent's `ctx.workflow` gets
 * the outputs as from a completed child).
 */
export type ExitStatus = "completed" | "failed" | "cancelled" | "skipped" | "blocked";

export interface ExitOptions {
  status?: ExitStatus;
  reason?: string;
  outputs?: unknown;
}

/** How a message reaches a running stage: into its current turn, after it, or by ending it first. */
export type DeliveryMode = "steer" | "followUp" | "interrupt";

export interface SendOptions {
  /** steer (default): into the current turn; followUp: after it; interrupt: end the turn, then deliver. A shell stage gets every message on stdin; interrupt sends SIGINT first. */
  mode?: DeliveryMode;
  /** Also deliver to every matching stage that starts later (for patterns like "review/*"). */
  sticky?: boolean;
  /** Message id (deduplication key); default `<run id>:<step position>`. */
  id?: string;
  /** Step name shown in `atomic show` (default: the address). */
  name?: string;
}

export interface SendReceipt {
  messageId: string;
  /** The root run the message went to. */
  runId: string;
  /** The stage path or pattern, relative to that root run. */
  target: string;
  /**
   * Per stage, as when the receipt was made: queued (not started yet, or waiting for live delivery), delivered (handed
   * to the stage), received (the model saw it), receipt-unverified (handed; the runner cannot confirm the model saw it),
   * session-replaced (a retry replaced the session it went to), stage-terminal (the stage had ended), undeliverable.
   */
  deliveries: { stage: string; state: "queued" | "delivered" | "received" | "receipt-unverified" | "session-replaced" | "stage-terminal" | "undeliverable" }[];
}

export interface MergeOptions {
  /** The branch to merge into: it must exist and be checked out nowhere (the checkout's files would fall behind it). */
  into: string;
  /** `merge` (default): a merge commit per branch; `squash`: one plain commit per branch. */
  strategy?: "merge" | "squash";
  /** Step name shown in `atomic show` (default "merge into <branch>"). */
  name?: string;
}

/**
 * What ctx.merge did: `ok` and the target's new commit, or the first branch
 * that conflicted with its files and hunks (conflict markers), the target
 * unchanged and nothing merged.
 */
export type MergeResult =
  | { ok: true; into: string; head: string; merged: { branch: string; commit: string }[] }
  | { ok: false; into: string; head: string; merged: []; conflict: { branch: string; commit: string; files: { path: string; hunks: string }[] } };

/**
 * ctx.bestOf's judge: a function given the candidates that finished (their
 * results, `workspace` holding each diff) returning the index of the best;
 * or an agent stage (`{ name?, prompt, runner?, model?, … }`) whose prompt
 * is followed by each candidate's output and diff and which answers with
 * the winner's number.
 */
export type BestOfJudge = ((candidates: StageResult[]) => number | Promise<number>) | ({ name?: string } & TaskOptions);

export interface BestOfOptions {
  judge: BestOfJudge;
  /**
   * A cost budget the candidates share: with it they run one after another,
   * and a candidate starts only while those before it cost less than
   * `maxCostUsd` together (the run's own budget still applies on top).
   */
  budget?: { maxCostUsd: number };
  /** The branch the winner is merged into (default `atomic/<run id>/<name>`, made from the candidates' base). */
  into?: string;
}

export interface BestOfResult {
  /** The index of the winner in `candidates`. */
  winner: number;
  /** The candidates that ran (finished or failed), in order. */
  candidates: StageResult[];
  /** How many were never started, the budget being used up. */
  skipped: number;
  /** The judge's reason (an agent judge's), if it gave one. */
  reason?: string;
  /** The winner's merge into `into`. */
  merge: MergeResult;
}

export interface ReviewOptions {
  /** Give up after this long without a review: the step fails with code "ask_timeout". */
  timeoutMs?: number;
  /** Step name shown in `atomic show` (default "review <stage>"). */
  name?: string;
  /**
   * Send requested changes back to the stage: each request is a follow-up
   * turn of the stage's agent session (`continueFrom`), named
   * `<stage>-revise-<n>`, in the same worktree on the same branch, its
   * prompt the reviewer's comments; then its diff is reviewed again, until
   * approved or after `rounds` follow-ups (default 3; the last comments are
   * then returned). Needs an agent stage, unless `to`. `prompt`: words put before the
   * comments (default: "The reviewer of your change asks for changes:").
   *
   * `to`: send them to a named next stage instead, given as a stage spec
   * (`{ name, runner?, model?, tools?, … }`, as ctx.bestOf takes one): the
   * n-th request runs it as `<name>-<n>` in the reviewed stage's worktree
   * on its branch, the comments its prompt (default words: "The reviewer
   * of this change asks for changes:"), the first in a new agent session,
   * each later one continuing the previous one's. Any stage can be
   * reviewed so. `to` must not name `prompt`, `shell`, `continueFrom`,
   * `fork`, `workspace` or `cwd` (the review gives them): `bad_review`.
   */
  revise?: boolean | { rounds?: number; prompt?: string; to?: Omit<TaskOptions, "prompt" | "shell" | "continueFrom" | "fork" | "workspace" | "cwd"> & { name: string } };
}

/** A review's outcome: approved, or the reviewer's comments (`file`/`line` absent: about the whole change). With `revise`, `stage` is the reviewed stage's last result (its last follow-up's, or the stage's own). */
export type ReviewResult =
  | { approved: true; by: string | null; stage?: StageResult }
  | { approved: false; by: string | null; comments: { file?: string; line?: number; text: string }[]; stage?: StageResult };

export interface AskOptions {
  /** The answer must be one of these (checked by `atomic answer`). */
  choices?: string[];
  /** Give up after this long without an answer: the step fails with code "ask_timeout". */
  timeoutMs?: number;
  /** Step name shown in `atomic show` (default: the question's first 60 characters). */
  name?: string;
}

export interface WorkflowContext<I = Record<string, unknown>> {
  readonly runId: string;
  readonly inputs: I;
  /** True while this run replays recorded steps (for logging only: never branch on it). */
  readonly replaying: boolean;
  /** Log a line to the run's output (not journaled). */
  log(message: string): void;

  task(name: string, opts: TaskOptions): Promise<StageResult>;
  /** A shell stage: `command` is shell code (a string; build it with `sh\`…\`` to quote values) or argv (an array, no shell); see TaskOptions.shell. */
  shell(name: string, command: ShellCommand, opts?: ShellOptions): Promise<StageResult>;
  /** Runs steps concurrently; resolves to their results in input order. */
  parallel(steps: StepSpec[], opts?: ParallelOptions): Promise<unknown[]>;
  /** Runs steps one after another; resolves to their results in order. */
  chain(steps: StepSpec[]): Promise<unknown[]>;
  /** Runs a child workflow as its own run (own id), nested under a boundary stage. */
  workflow<CI extends InputSchemas, CO>(
    child: WorkflowDefinition<CI, CO>,
    inputs: Partial<InputsOf<CI>>,
    opts?: { name?: string },
  ): Promise<CO>;
  /**
   * A memoized side effect: `fn` runs until it succeeds or its attempts
   * run out, and its value is checkpointed.
   *
   * Failure semantics: a checkpointed value replays on resume without
   * calling `fn`. A crash between `fn`'s end and the checkpoint calls it
   * again with the same `idempotencyKey`. Each attempt is recorded when it
   * starts and, when it throws, with its error (`atomic show` lists them).
   * Retried with backoff (`retries`, default 2), except a
   * `NonRetryableError` and a programming error in `fn`'s own code
   * (ReferenceError, TypeError or SyntaxError without a `code`: fetch's
   * network errors have one and are retried). When the attempts run out
   * the step fails and the run with it, without a checkpoint (`atomic
   * resume` calls `fn` again), unless `failureMode: "return"`.
   * Cancel, Ctrl-C, a timeout or a used-up time budget abort `signal`;
   * a `fn` that ignores it is waited for 2 s, then its promise is
   * abandoned and the step ends as stopped.
   */
  tool<T>(name: string, args: unknown, fn: (info: ToolCallInfo) => Promise<T> | T, opts?: ToolOptions & { failureMode?: "throw" }): Promise<T>;
  tool<T>(name: string, args: unknown, fn: (info: ToolCallInfo) => Promise<T> | T, opts: ToolOptions & { failureMode: "return" }): Promise<ToolResult<T>>;
  /**
   * A durable timer. Failure semantics: the wake-up time is checkpointed
   * before the wait; a resumed run waits min(wake-up time - now, ms),
   * never negative, so a wall clock set back never makes it wait longer
   * than `ms`. Stopped before it woke (Ctrl-C, crash, time budget), it
   * shows as waiting until its wake-up time.
   */
  sleep(ms: number, name?: string): Promise<void>;
  /**
   * A message to a stage: `stagePath` is a path of this run's stages
   * ("review/security": through child workflows), a glob pattern
   * ("review/*"), or `<run id>:<path>` for another run. A running stage
   * receives it now (a shell stage on stdin); a stage that has not started
   * receives it before its first turn. The message is recorded in the
   * journal before this resolves, so it survives a crash of any process.
   *
   * Failure semantics: the send is a step; its receipt is checkpointed and
   * replayed, so a resumed run never sends twice (a crash between the send
   * and its checkpoint sends again under the same message id, which the
   * journal deduplicates). A refused message (no such stage, stage
   * finished, 50 messages already queued for it, empty text) fails the step
   * and the run, without a checkpoint: `atomic resume` tries again.
   */
  send(stagePath: string, text: string, opts?: SendOptions): Promise<SendReceipt>;
  /**
   * Asks a person and waits for the answer, durably: the run shows
   * `awaiting_input` until `atomic answer <run> <question id> <answer>`
   * (or the status page, or intercom) answers. Resolves to the answer.
   *
   * Failure semantics: the question is recorded before the wait and the
   * answer is checkpointed and replayed. A run stopped (Ctrl-C, crash)
   * while waiting is resumable and resumes still waiting; an answer given
   * while no process drives the run is kept and used on resume. With
   * `timeoutMs`, no answer in time fails the step ("ask_timeout", not
   * checkpointed): a resumed run asks again with a fresh timeout.
   */
  ask(question: string, opts?: AskOptions): Promise<string>;
  /**
   * Merges stage branches (results of stages with `workspace: "worktree"`,
   * or branch names) into the branch `into`, in a temporary worktree: no
   * checkout changes. A conflict is a result (`ok: false`: the branch, its
   * files and hunks; `into` unchanged, nothing half-merged), for the
   * workflow to hand to an agent. A target checked out anywhere (the
   * user's checkout too), a branch that does not exist or a stage without a
   * worktree fails the step (`bad_merge`) before anything changes.
   *
   * Failure semantics: a step; its result is checkpointed and replayed,
   * and a merge run again after a crash finds its own commits
   * (`Atomic-Merge:` trailer) instead of merging twice.
   */
  merge(stages: (StageResult | string)[], opts: MergeOptions): Promise<MergeResult>;
  /**
   * Asks a person to review a stage's diff (a stage run with `workspace:
   * "worktree"`) and waits, durably, like ctx.ask: the run shows
   * `awaiting_input` until `atomic review RUN STAGE --approve` or
   * `--comment FILE:LINE TEXT` (or `atomic answer` with "approve" or a
   * comment, or the console's diff view) answers. Resolves to `{ approved:
   * true }` or the comments, which the workflow can send back to the stage
   * (`continueFrom`), or which `revise` sends back itself: a follow-up turn
   * of the stage with the comments, reviewed again until approved. A stage
   * without a worktree, or `revise` of one that is not an agent's, fails
   * the step (`bad_review`).
   *
   * Failure semantics: those of ctx.ask (the question recorded before the
   * wait, the answer checkpointed; a review given while no process drives
   * the run is used on resume).
   */
  review(stage: StageResult, opts?: ReviewOptions): Promise<ReviewResult>;
  /**
   * Best of n: the stage `spec` (`{ name, prompt | shell, … }`) run n times,
   * as `<name>-1` … `<name>-n`, each in a git worktree of its own (told
   * which candidate it is: `BEST_OF_CANDIDATE`, and a line after an agent's
   * prompt); a judge picks one of those that finished; the winner's branch
   * is merged into `into` (ctx.merge); the others' branches stay for
   * inspection. With `budget`, the candidates run one after another and one
   * starts only while the earlier ones cost less than the budget. n < 2 or
   * no judge fails the step (`bad_step`) before anything starts.
   *
   * Failure semantics: each part is a step of its own (stages, the judge's
   * choice, the merge), checkpointed and replayed.
   */
  bestOf(n: number, spec: StepSpec & { name: string }, opts: BestOfOptions): Promise<BestOfResult>;
  /**
   * Tags the run (its root run, from a child workflow): `key=value`, shown
   * by `atomic runs`, `atomic show` and the status page, and filtered on
   * (`atomic runs --tag key=value`). Setting a key again replaces its
   * value. A key is 1 to 64 letters, digits or `_ . - /`; a value at most
   * 256 printable characters; a run has at most 32 tags.
   *
   * Failure semantics: not a step (it takes no replay position): the tag
   * is written when the call is reached, and again on replay to the same
   * value. A bad tag fails the run (`bad_tag`).
   */
  tag(key: string, value: string): Promise<void>;
  /** Ends the run now with the given status and outputs. */
  exit(opts?: ExitOptions): never;
  /**
   * Whether this run takes the code path of the change named `id`:
   * `if (ctx.patched("new-review")) { new code } else { old code }`.
   * True for a run that reaches the call on new ground (a new run, or a
   * resumed run past its recorded steps), which records a marker for `id`
   * (once per run), and for a replay of a history holding that marker;
   * false while a resumed run replays history recorded without it, so runs
   * started before the change replay the old path and later ones the new.
   * Synchronous; the marker takes no replay position, so adding the call
   * shifts no step. Calling it twice with one id in a run fails the run
   * (`patch_id_reused`): give each change its own id.
   */
  patched(id: string): boolean;
  /**
   * Once no run that took the old path of the change `id` remains, the
   * `else` branch goes and `ctx.patched(id)` becomes `ctx.deprecatePatch(id)`:
   * it records the marker on new ground as `patched` does and replays any
   * history, with or without the marker.
   */
  deprecatePatch(id: string): void;
  /**
   * Ends this run's history and continues the workflow as a new run with
   * `inputs` (checked against the workflow's inputs), in the same chain:
   * the new run starts from the workflow file as it is now (the code this
   * run is pinned to if the file is gone or does not load), with this run's
   * environment, budget flags and tags; the two are linked both ways
   * (`atomic show`), this run shows as `continued`, and `atomic run` and
   * `atomic resume` follow the chain to its end. A workflow that loops for
   * weeks keeps each run's journal bounded by calling it every N rounds.
   * Only a root run can continue as new (a child workflow fails with
   * `bad_continue_as_new`).
   *
   * Failure semantics: the hand-over is recorded before the new run starts,
   * so a crash at any point of it resumes to exactly one new run.
   */
  continueAsNew(inputs: Partial<I>): never;
}

/** Limits of a run (and its child runs). When one is used up no new stage starts, live agent stages are wrapped up (a cost or token cap: the model call in flight finishes and counts, no tool or call follows), and the run ends `blocked` (budget_exceeded). */
export interface BudgetOptions {
  maxCostUsd?: number;
  maxTokens?: number;
  /**
   * Wall time of one drive of the run (a run or a resume), in ms. At the
   * limit running shell stages are cancelled, a running ctx.tool's signal
   * aborts, a sleep stops, agent stages get their wrap-up turn and are
   * cancelled 30 s later (or after the limit's length, if shorter).
   */
  maxDurationMs?: number;
  /** Warn once when this percent of a limit is used (default 80). */
  warnAtPercent?: number;
}

export interface WorkflowConfig<I extends InputSchemas, O> {
  name: string;
  description?: string;
  inputs?: I;
  /** Default runner and model of this workflow's prompt stages. */
  runner?: string;
  model?: string;
  /** Default `sandbox` of this workflow's stages (TaskOptions.sandbox); checked when the workflow loads. */
  sandbox?: SandboxOption;
  budget?: BudgetOptions;
  /**
   * false: the local service (`atomic serve`) never resumes a crashed run of this workflow on its own; a
   * person resumes it (`atomic resume`). Runs parked on a question or stopped for a budget are not woken
   * either. Default true. Recorded when the run starts, so a later edit of the file does not change it.
   */
  recover?: boolean;
  /** Valibot schema the return value must satisfy. */
  outputs?: GenericSchema<unknown, O>;
  /**
   * The stages the workflow runs, in order, for `atomic workflows NAME` (documentation only: nothing checks
   * them against the run). A name may hold a placeholder, such as `judge-<criterion>`.
   */
  stages?: { name: string; description: string }[];
  run(ctx: WorkflowContext<InputsOf<I>>): Promise<O>;
}

export const WORKFLOW_BRAND = Symbol.for("atomic.workflow");

export interface WorkflowDefinition<I extends InputSchemas = InputSchemas, O = unknown> extends WorkflowConfig<I, O> {
  readonly [WORKFLOW_BRAND]: true;
}
