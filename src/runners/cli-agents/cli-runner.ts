/**
 * A runner for a headless CLI agent, driven by an adapter (adapters.ts)
 * that knows the agent's flags and its JSON event stream.
 *
 * Life of a stage:
 * - the session id is assigned up front where the CLI accepts one (claude,
 *   gemini, pi), else recorded from the agent's first event; resumes always name it;
 * - continueFrom: the stage starts from the earlier stage's session instead,
 *   its first process resuming it (or, with fork, branching it off into a
 *   new one, whose id the agent's first event names); pi opens a copy of
 *   the earlier session file (pi.ts); claude and codex get the earlier
 *   attempt's copy of their own session file put back where they look
 *   first, and every attempt leaves such a copy when it ends
 *   (cli-session-copy.ts), so the session can continue on another machine;
 * - "stream" adapters (claude with stream-json input, pi rpc) run ONE
 *   process and write user turns and control lines to its stdin: steer goes
 *   in at once (native for pi, best effort for claude), followUp after the
 *   turn's end event, interrupt aborts the turn (control line) and then
 *   delivers: the aborted turn's end event is then not the last one
 *   (`pendingTurns` counts the turns written and not yet ended). When a
 *   turn ends with nothing pending or queued, stdin is closed and the agent
 *   exits; a message that comes after that resumes the session by id in a
 *   new process;
 * - "resume" adapters (codex exec, gemini, opencode run) take no input
 *   while running: steer and followUp are queued and delivered by resuming
 *   the session when the turn ends; interrupt kills the turn's process
 *   group, then resumes with the message;
 * - success is read from the agent's final event (an error result that
 *   exits 0 is a failure; a missing final event is a failure naming the
 *   exit code), never from the exit code alone;
 * - answer (the stage parked on the agent's ask_user, whose call told it to
 *   end its turn): the first process resumes continueFrom's session with
 *   the person's answer as the message;
 * - cancel ends the process group and every other process of the stage
 *   (agent-process.ts: SIGTERM, a grace period, then SIGKILL);
 * - the stage's fate (open to messages, wrapping up, stopping, ended) is
 *   an explicit state machine (cli-session-state.ts).
 *
 * Structured output: native where the CLI has it (claude --json-schema,
 * codex --output-schema); otherwise the prompt asks for JSON only and the
 * final text is parsed. Either way the value is checked against the schema.
 */

import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { StageResult, Usage } from "../../sdk/types.ts";
import { AgentFiles, firstPrompt, writeOutputFile } from "../agent-files.ts";
import { schemaValidator } from "../json-schema.ts";
import type { DeliveryMode, Runner, RunnerEvent, RunnerHandle, StageRequest } from "../types.ts";
import { capToolText } from "../types.ts";
import { addUsage, emptyUsage } from "../usage.ts";
import { AgentProcess, type ProcessEnd } from "./agent-process.ts";
import { stageEnv, stageMarker } from "../stage-env.ts";
import { sandboxed } from "../sandbox/launch.ts";
import { cliSandboxFiles } from "./sandbox-files.ts";
import { rateLimitsFor, type SharedRateLimits } from "../rate-limits.ts";
import { Machine } from "../../shared/state-machine.ts";
import { AtomicError } from "../../shared/errors.ts";
import { SESSION_EVENTS, SESSION_STATES, SESSION_TRANSITIONS, type SessionEvent, type SessionState } from "./cli-session-state.ts";
import { readTotals, writeTotals, type Totals } from "./session-totals.ts";
import { keepCliSession, restoreCliSession, type CliSessionStore } from "./cli-session-copy.ts";

export const TEXT_LIMIT = 64 * 1024;

/** What the adapter learned from the events of the current turn (process). */
export interface TurnState {
  sessionId?: string;
  model?: string;
  /** The turn's final answer text so far. */
  text: string;
  /** Set by the final event: success or the agent's error. */
  final?: { ok: true } | { ok: false; code: string; message: string; retryAfterMs?: number };
  structured?: unknown;
  /** The adapter's own notes about the current process (running totals to take deltas from); emptied when a process starts. */
  process: Record<string, unknown>;
  /** The adapter's own notes for the whole stage, across processes (the model codex's config names; the last error seen). */
  memo: Record<string, unknown>;
  /**
   * The session's usage so far in the CLI's own figures (session-totals.ts):
   * the continued stage's when the stage starts, kept up to date by the
   * adapter, left in the attempt's directory for a stage that continues this one.
   */
  session: Totals;
}

export interface AdapterContext {
  readonly request: StageRequest;
  readonly state: TurnState;
  emit(event: RunnerEvent): void;
  /** Assistant text for the transcript (and a text_delta event). */
  text(delta: string): void;
  tool(name: string, detail: string, ok?: boolean): void;
  /** A usage delta (already normalized and priced). */
  usage(delta: Partial<Usage>): void;
  /** Something the stage's user should know (a tool the agent refused): in the transcript and on the stage's result. */
  warn(message: string): void;
  /** A line to the agent's stdin (stream adapters: a query such as pi's get_state). */
  write(line: string): void;
  /** End the agent's process (an agent stuck in a loop its own events show). */
  stop(): void;
}

export interface ArgsContext {
  message: string;
  sessionId: string | undefined;
  resume: boolean;
  /** This process branches the resumed session off into a new one (continueFrom with fork; first process only). */
  fork: boolean;
  /** A file holding the JSON Schema (for CLIs that take a file). */
  schemaFile: string | undefined;
}

export interface CliAdapter {
  readonly kind: string;
  readonly delivery: "stream" | "resume";
  /** The CLI accepts a session id chosen by us (assigned before the first turn). */
  readonly assignsSession: boolean;
  /** The CLI enforces a JSON Schema itself (else: asked for in the prompt and parsed from the text). */
  readonly nativeSchema: boolean;
  /** The CLI can fork a session (continueFrom with fork: true); every adapter can continue one. */
  readonly canFork?: boolean;
  /** continueFrom opens the earlier stage's session file of this name in its artifact directory (pi), not a session id. */
  readonly sessionFile?: string;
  /** Where the CLI keeps a session by id in its own store: carried with each attempt to where a continuing stage runs (cli-session-copy.ts). */
  readonly sessionStore?: CliSessionStore;
  /** A session that is not one file (opencode's database rows): carried by the CLI's own commands (opencode-sessions.ts). */
  readonly sessionCommands?: {
    keep(binary: string, req: StageRequest, env: Readonly<Record<string, string>>, id: string): Promise<string>;
    restore(binary: string, req: StageRequest, env: Readonly<Record<string, string>>, id: string, earlierDir: string): Promise<string | undefined>;
  };
  /**
   * The credential variables (shared/secrets.ts) this CLI reads to reach its
   * own provider: the only ones of atomic's environment its process gets
   * (runners/stage-env.ts). Its tools inherit them from it: a CLI agent
   * that runs shell commands is trusted with its own key.
   */
  readonly credentials: readonly string[];
  /**
   * Resume adapters: the CLI reads its prompt from stdin (written, then
   * stdin closed), so `ArgsContext.message` must not be put in argv; a
   * prompt in one argv element fails at spawn above about 128 KiB (E2BIG).
   * Stream adapters always write their turns to stdin.
   */
  readonly promptOnStdin?: boolean;
  /**
   * How the CLI says it lost the prompt written to its stdin (gemini: exit 42,
   * "No input provided via stdin", when its event loop came round to the pipe
   * after its 500 ms wait): a process that ends so, with no record, did
   * nothing, and is started again (LOST_PROMPT_STARTS in all), without the
   * new session it opened (forgetNewSession).
   */
  readonly lostPrompt?: { code: number; stderr: RegExp };
  args(req: StageRequest, a: ArgsContext): string[];
  /** Stream adapters: lines that start a turn with `message`. */
  userTurn?(message: string): string[];
  steer?(message: string): string[];
  followUp?(message: string): string[];
  interrupt?(message: string): string[];
  /** One parsed record. Returns true when a turn ended (stream adapters: time for follow-ups, or to close stdin). */
  onRecord(rec: Record<string, unknown>, ctx: AdapterContext): boolean | void;
  /** A nonzero exit without a final event: what it means (gemini's exit codes). */
  explainExit?(code: number): string | undefined;
  /**
   * Stream adapters whose messages join the running turn (pi): a followUp
   * is taken in before the turn's one end event, and an interrupt only
   * aborts the turn, its message delivered as the next turn once the abort
   * has settled (a prompt sent with the abort is refused). Without it
   * (claude), each message written is a turn with an end event of its own.
   */
  readonly messagesJoinTurn?: boolean;
  /** Variables added to the agent's environment (settings the CLI reads only from there); `base`: the stage's environment without them. */
  env?(req: StageRequest, base: Readonly<Record<string, string>>): Record<string, string>;
}

/** Starts of one turn's process, the first included, while the CLI says it lost its prompt (CliAdapter.lostPrompt). */
const LOST_PROMPT_STARTS = 3;

export class CliAgentRunner implements Runner {
  constructor(private readonly adapter: CliAdapter) {}

  get kind(): string {
    return this.adapter.kind;
  }

  get sessions(): { fork: boolean; byId: boolean } {
    return { fork: this.adapter.canFork === true, byId: !this.adapter.sessionFile };
  }

  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle {
    const session = new CliSession(this.adapter, request, onEvent);
    const result = session.run();
    return {
      result,
      send: (text, mode) => session.send(text, mode),
      interrupt: () => session.interruptTurn(),
      cancel: (reason) => session.stop("cancelled", reason ?? "cancelled"),
      wrapUp: (text) => session.wrapUp(text),
    };
  }
}

/** One stage of a CLI agent; its life is the machine of cli-session-state.ts. */
class CliSession {
  private readonly files: AgentFiles;
  private readonly state: TurnState;
  private readonly phase = new Machine<SessionState, SessionEvent>("a CLI agent session", SESSION_TRANSITIONS, SESSION_STATES.open);
  private readonly warnings: string[] = [];
  /** Stream adapters: user turns written whose end event has not come yet. */
  private pendingTurns = 0;
  private usage: Usage;
  /** The agent process of the moment: present while one runs (a turn open). */
  private proc: AgentProcess | undefined;
  private readonly queued: string[] = [];
  private interruptWith: string | undefined;
  /** The environment of the last agent process started (where the CLI keeps its sessions). */
  private lastEnv: Record<string, string> | undefined;
  /** What the turn's process wrote to stderr (its last 4 KiB) and how many records it wrote: CliAdapter.lostPrompt. */
  private turnStderr = "";
  private turnRecords = 0;
  /** Why the session is stopping (set with the move to `stopping`). */
  private stopped: { kind: "cancelled" | "timeout"; message: string } | undefined;

  constructor(
    private readonly adapter: CliAdapter,
    private readonly request: StageRequest,
    private readonly onEvent: (event: RunnerEvent) => void,
  ) {
    this.files = new AgentFiles(request.artifactDir);
    this.usage = emptyUsage(request.model);
    this.state = { text: "", process: {}, memo: {}, session: readTotals(request.continueFrom?.artifactDir) };
    if (request.continueFrom?.sessionId) this.state.sessionId = request.continueFrom.sessionId;
    else if (adapter.assignsSession) this.state.sessionId = crypto.randomUUID();
  }

  async send(text: string, mode: DeliveryMode): Promise<void> {
    if (this.phase.is(SESSION_STATES.ended)) throw new Error("the stage has ended");
    this.files.section(`Message (${mode})`, text);
    const p = this.proc;
    // A stream agent whose stdin is closed (its last turn ended) is about to exit: the message waits for a resumed session.
    const write = (lines: string[]) => lines.every((l) => p!.write(l));
    if (this.adapter.delivery === "stream" && p) {
      if (mode === "steer" && this.adapter.steer && write(this.adapter.steer(text))) return;
      if (mode === "interrupt" && this.adapter.interrupt && write(this.adapter.interrupt(text))) {
        // The interrupted turn ends (its end event is not the stage's end), then the message is one more turn.
        if (this.adapter.messagesJoinTurn) {
          if (text) this.queued.push(text); // the next turn, once the aborted one has ended (onStreamTurnEnd)
        } else if (text) this.pendingTurns++;
        return;
      }
      if (mode === "followUp" && this.adapter.followUp && write(this.adapter.followUp(text))) {
        if (!this.adapter.messagesJoinTurn) this.pendingTurns++;
        return;
      }
    }
    if (mode === "interrupt" && this.adapter.delivery === "resume" && p) {
      this.interruptWith = this.interruptWith ? `${this.interruptWith}\n\n${text}` : text;
      p.stop();
      return;
    }
    this.queued.push(text); // delivered when the turn ends (a resumed session, or the next user turn)
  }

  interruptTurn(): void {
    if (this.adapter.delivery === "stream" && this.adapter.interrupt) this.proc?.write(this.adapter.interrupt("")[0]!);
    else this.proc?.stop();
  }

  wrapUp(text: string): void {
    if (!this.phase.is(SESSION_STATES.open)) return; // wrapping up already, or stopping, or ended
    this.phase.fire(SESSION_EVENTS.wrapUp);
    this.queued.length = 0;
    // Stream agents get the wrap-up as a message in the current turn; resume agents finish the turn they are in (their last).
    if (this.adapter.delivery === "stream" && this.proc && this.adapter.steer) {
      for (const l of this.adapter.steer(text)) this.proc.write(l);
    }
    this.files.section("Wrap-up (budget used up)", text);
  }

  stop(kind: "cancelled" | "timeout", message: string): void {
    if (!this.phase.is(SESSION_STATES.open, SESSION_STATES.wrappingUp)) return; // stopping already, or ended
    this.phase.fire(SESSION_EVENTS.stop);
    this.stopped = { kind, message };
    this.proc?.stop();
  }

  /** The result of a stopped session (cancelled, or failed on its timeout); undefined while it is not stopping. */
  private stoppedResult(): StageResult | undefined {
    const stopped = this.stopped;
    if (!this.phase.is(SESSION_STATES.stopping) || !stopped) return undefined;
    return this.result(stopped.kind === "cancelled" ? "cancelled" : "failed", stopped.kind, stopped.message);
  }

  async run(): Promise<StageResult> {
    const req = this.request;
    const timer = req.timeoutMs && req.timeoutMs > 0 ? setTimeout(() => this.stop("timeout", `timed out after ${req.timeoutMs} ms`), req.timeoutMs) : undefined;
    try {
      const result = await this.loop();
      await this.keepSessionByCommands(result);
      return result;
    } catch (err) {
      // atomic's own sentence (a user's file the adapter could not use: gemini-home.ts) keeps its code and hint.
      if (err instanceof AtomicError) return this.result("failed", err.code, err.hint ? `${err.message}; ${err.hint}` : err.message);
      return this.result("failed", "runner_failed", (err as Error).message);
    } finally {
      if (timer) clearTimeout(timer);
      this.files.close();
    }
  }

  private async loop(): Promise<StageResult> {
    const req = this.request;
    const binary = req.agent?.binary;
    if (!binary) return this.result("failed", "runner_not_found", `no ${this.adapter.kind} binary was resolved for this stage`);
    // A session kept in a file: a missing one is said, never replaced by a new session that forgot the conversation.
    const sessionFile = this.adapter.sessionFile;
    if (sessionFile && req.continueFrom && !existsSync(join(req.artifactDir, sessionFile)) && !existsSync(join(req.continueFrom.artifactDir, sessionFile))) {
      const path = join(req.continueFrom.artifactDir, sessionFile);
      return this.result("failed", "bad_continue", `continueFrom: the earlier stage left no ${this.adapter.kind} session (${path} does not exist): continue a stage that the ${this.adapter.kind} runner ran`);
    }
    let schemaFile: string | undefined;
    const schema = req.agent?.schema;
    // Parked on the agent's ask_user (engine/steps/agent-asks.ts): the session resumes with the person's answer as its message.
    let message = firstPrompt(req.answer ? `The person answered your question: ${req.answer.text}` : (req.prompt ?? ""), req.initialMessages);
    if (schema) {
      this.files.ensureDir();
      schemaFile = join(req.artifactDir, "schema.json");
      writeFileSync(schemaFile, JSON.stringify(schema));
      if (!this.adapter.nativeSchema) {
        message += `\n\nReply with ONLY a JSON value (no prose, no code fence) matching this JSON Schema:\n${JSON.stringify(schema)}`;
      }
    }
    this.files.section(`${req.stageName} (${this.adapter.kind}${req.model ? `, ${req.model}` : ""})`);
    this.files.section("User", message);
    await this.restoreSession();
    // continueFrom: the first process resumes (or forks) the earlier stage's session; later ones resume this stage's own.
    let resume = req.continueFrom !== undefined;
    let fork = req.continueFrom?.fork === true;
    let starts = 0;
    for (;;) {
      await this.waitForRateLimit();
      const stoppedBefore = this.stoppedResult();
      if (stoppedBefore) return stoppedBefore;
      const end = await this.turn(binary, { message, sessionId: this.state.sessionId, resume, fork, schemaFile });
      const stopped = this.stoppedResult();
      if (stopped) return stopped;
      if (end.spawnError) return this.result("failed", "spawn_failed", `could not start ${binary}: ${end.spawnError}`);
      const lost = this.lostPrompt(end);
      if (lost && ++starts < LOST_PROMPT_STARTS) {
        this.files.section(`(${this.adapter.kind} read no prompt from its stdin: started again)`);
        if (!resume) this.forgetNewSession();
        continue;
      }
      if (lost) return this.result("failed", "agent_failed", `${this.adapter.kind} read no prompt from its stdin ${LOST_PROMPT_STARTS} times (${lost}): the machine is too busy for it to read the pipe in time; run the stage again when it is quieter`, end.code);
      starts = 0;
      fork = false;
      if (this.interruptWith !== undefined && this.state.sessionId) {
        message = this.interruptWith;
        this.interruptWith = undefined;
        this.files.section("(turn interrupted; resuming the session with the message)");
        resume = true;
        continue;
      }
      const final = this.state.final;
      if (!final) {
        const why = end.code !== null ? (this.adapter.explainExit?.(end.code) ?? `exited with code ${end.code}`) : `was killed by ${end.signal}`;
        return this.result("failed", "agent_failed", `${this.adapter.kind} ended without a final event: it ${why}`, end.code);
      }
      if (!final.ok) {
        if (final.code === "provider_rate_limit") this.rateLimit()?.limits.backOff(this.rateLimit()!.key, final.retryAfterMs);
        return this.result("failed", final.code, `${final.message} (${this.adapter.kind} ${end.code !== null ? `exited with status ${end.code}` : `was killed by ${end.signal}`})`, end.code);
      }
      // Messages that came after a stream agent's stdin was closed, or while a resume agent ran: the session resumed with them.
      if (this.queued.length && this.phase.is(SESSION_STATES.open) && this.state.sessionId) {
        message = this.queued.splice(0).join("\n\n");
        this.files.section(`(resuming session ${this.state.sessionId} with the message)`);
        resume = true;
        continue;
      }
      return this.completed(end.code);
    }
  }

  /**
   * The CLI makes its own calls, so the host's shared rate limits
   * (rate-limits.ts) are honoured around them: before the agent starts or
   * resumes, and recorded when it ends rate-limited. The key is the CLI and
   * the model (atomic does not see the CLI's base URL).
   */
  private rateLimit(): { limits: SharedRateLimits; key: string } | undefined {
    const limits = rateLimitsFor(this.request.artifactDir);
    return limits ? { limits, key: limits.key(`cli:${this.adapter.kind}`, this.request.model) } : undefined;
  }

  private async waitForRateLimit(): Promise<void> {
    const rl = this.rateLimit();
    if (!rl) return;
    for (let ms = rl.limits.waitMs(rl.key); ms > 0 && !this.phase.is(SESSION_STATES.stopping); ms = rl.limits.waitMs(rl.key)) {
      await new Promise((r) => setTimeout(r, Math.min(ms, 250)));
    }
  }

  /** The CLI's own words when its process lost the prompt written to its stdin (CliAdapter.lostPrompt), else undefined. */
  private lostPrompt(end: ProcessEnd): string | undefined {
    const lost = this.adapter.lostPrompt;
    if (!lost || !this.adapter.promptOnStdin || end.code !== lost.code || this.turnRecords > 0 || this.state.final) return undefined;
    return lost.stderr.exec(this.turnStderr)?.[0];
  }

  /**
   * The session a process that lost its prompt had already opened under the id we gave it (gemini writes its chats
   * file before it reads stdin, and refuses that id to the next process: "Session ID … already exists").
   */
  private forgetNewSession(): void {
    const store = this.adapter.sessionStore;
    const id = this.state.sessionId;
    if (!store || !id || !this.lastEnv) return;
    const root = store.root(this.request, this.lastEnv);
    const file = store.find(root, this.request, id);
    if (file) rmSync(join(root, file), { force: true });
  }

  /** One process: a turn (resume adapters) or the whole conversation (stream adapters). */
  private turn(binary: string, a: Parameters<CliAdapter["args"]>[1]): Promise<ProcessEnd> {
    const req = this.request;
    const args = [...this.adapter.args(req, a), ...(req.agent?.args ?? [])];
    this.files.diag(`$ ${binary} ${args.map((x) => (/^[\w@%+=:,./-]+$/.test(x) ? x : JSON.stringify(x))).join(" ")}`);
    delete this.state.final;
    this.state.text = "";
    this.state.process = {};
    this.turnStderr = "";
    this.turnRecords = 0;
    const ctx = this.context();
    const { base, env } = this.processEnv();
    this.lastEnv = env;
    // A sandboxed stage: the whole CLI process runs inside bubblewrap (runners/sandbox/launch.ts).
    const box = sandboxed(req, [binary, ...args], env, req.sandbox ? cliSandboxFiles(this.adapter.kind, req, env, base) : {}, (sentence) => this.files.diag(sentence));
    const proc = new AgentProcess(
      box.argv[0]!,
      box.argv.slice(1),
      { cwd: req.cwd, env: box.env, marker: stageMarker(req), sandboxed: req.sandbox !== undefined },
      (line) => {
        this.turnRecords++;
        this.files.raw(line);
        let rec: unknown;
        try {
          rec = JSON.parse(line);
        } catch {
          this.files.diag(`not JSON: ${line.slice(0, 200)}`);
          return;
        }
        if (typeof rec !== "object" || rec === null || Array.isArray(rec)) return;
        let turnEnded: boolean | void = false;
        try {
          turnEnded = this.adapter.onRecord(rec as Record<string, unknown>, ctx);
        } catch (err) {
          this.files.diag(`could not read a record: ${(err as Error).message}`);
        }
        if (turnEnded && this.adapter.delivery === "stream") this.onStreamTurnEnd();
      },
      (text) => {
        this.turnStderr = (this.turnStderr + text).slice(-4096);
        this.files.diag(text);
      },
    );
    this.proc = proc;
    this.onEvent({ type: "started", ...(proc.pid !== undefined ? { pid: proc.pid } : {}), ...(this.state.sessionId ? { sessionId: this.state.sessionId } : {}) });
    if (this.adapter.delivery === "stream") {
      for (const l of this.adapter.userTurn?.(a.message) ?? []) proc.write(l);
      this.pendingTurns = 1;
    } else {
      if (this.adapter.promptOnStdin) proc.writeRaw(a.message);
      proc.closeStdin();
    }
    if (this.phase.is(SESSION_STATES.stopping)) proc.stop();
    return proc.ended.finally(() => {
      this.proc = undefined;
      box.close();
    });
  }

  /** The agent process's environment: the stage's (`base`), and with the adapter's additions (`env`). */
  private processEnv(): { base: Record<string, string>; env: Record<string, string> } {
    const base = stageEnv(this.request, this.adapter.credentials);
    return { base, env: { ...base, ...this.adapter.env?.(this.request, base) } };
  }

  /** continueFrom with a CLI that keeps sessions by id: the earlier attempt's copy of the session, where the CLI looks (cli-session-copy.ts). */
  private async restoreSession(): Promise<void> {
    const { sessionStore, sessionCommands } = this.adapter;
    const earlier = this.request.continueFrom;
    const binary = this.request.agent?.binary;
    if (sessionCommands && earlier?.sessionId && binary) {
      try {
        const said = await sessionCommands.restore(binary, this.request, this.processEnv().env, earlier.sessionId, earlier.artifactDir);
        if (said) this.files.diag(said);
      } catch (err) {
        this.files.diag(`could not put back session ${earlier.sessionId} from the earlier attempt's copy: ${(err as Error).message}`);
      }
    }
    if (!sessionStore || !earlier?.sessionId) return;
    try {
      const put = restoreCliSession(this.adapter.kind, sessionStore, this.request, this.processEnv().env, earlier.sessionId, earlier.artifactDir);
      if (put) this.files.diag(`session ${earlier.sessionId} put back from the earlier attempt's copy: ${put}`);
    } catch (err) {
      this.files.diag(`could not put back session ${earlier.sessionId} from the earlier attempt's copy: ${(err as Error).message}`);
    }
  }

  /**
   * An attempt whose session travels, of a CLI whose session is not a file: its own export (opencode-sessions.ts).
   * A failed attempt's too: a later stage may continue it (failureMode "return"). A cancelled one is not continued
   * (its stage runs again, from what it continues).
   */
  private async keepSessionByCommands(result: StageResult): Promise<void> {
    const { sessionCommands } = this.adapter;
    const binary = this.request.agent?.binary;
    if (!sessionCommands || !binary || !this.request.sessionsTravel || result.status === "cancelled" || !this.lastEnv || !this.state.sessionId) return;
    try {
      this.files.diag(await sessionCommands.keep(binary, this.request, this.lastEnv, this.state.sessionId));
    } catch (err) {
      this.files.diag(`could not keep a copy of session ${this.state.sessionId}: ${(err as Error).message}`);
    }
  }

  /** A stream agent finished a turn: the next queued message is its next turn, else it may exit. */
  private onStreamTurnEnd(): void {
    const p = this.proc;
    if (!p) return;
    this.pendingTurns = Math.max(0, this.pendingTurns - 1);
    if (this.pendingTurns > 0) return; // an interrupted turn ended; the message written with the interrupt is next
    if (this.queued.length && this.phase.is(SESSION_STATES.open) && this.state.final?.ok !== false) {
      const text = this.queued.splice(0).join("\n\n");
      for (const l of this.adapter.userTurn?.(text) ?? []) p.write(l);
      this.pendingTurns = 1;
      return;
    }
    p.closeStdin();
  }

  private context(): AdapterContext {
    return {
      request: this.request,
      state: this.state,
      emit: (e) => this.onEvent(e),
      text: (delta) => {
        this.files.assistantText(delta);
        this.onEvent({ type: "text_delta", text: delta });
      },
      tool: (name, detail, ok) => {
        this.files.assistantTool(name, detail, ok === undefined ? "" : ok ? "ok" : "failed", ok !== false);
        const text = detail ? capToolText(detail) : undefined;
        this.onEvent(ok === undefined ? { type: "tool_start", name, ...(text ? { input: text } : {}) } : { type: "tool_end", name, ok, ...(text ? { output: text } : {}) });
      },
      usage: (delta) => {
        this.usage = addUsage(this.usage, delta);
        if (delta.model) this.state.model = delta.model;
        const n = (k: keyof Usage) => (typeof delta[k] === "number" ? (delta[k] as number) : 0);
        // One model call's usage (the adapters report it when the call ends): the transcript's turn closes with it.
        this.files.turnEnded({
          inputTokens: n("inputTokens"),
          outputTokens: n("outputTokens"),
          cacheReadTokens: n("cacheReadTokens"),
          cacheWriteTokens: n("cacheWriteTokens"),
          costMicroUsd: delta.unpriced ? null : n("costMicroUsd"),
          turns: n("turns"),
        });
        this.onEvent({ type: "usage", usage: delta });
      },
      warn: (message) => {
        if (this.warnings.includes(message)) return;
        this.warnings.push(message);
        this.files.warning(message);
      },
      write: (line) => {
        this.proc?.write(line);
      },
      stop: () => {
        this.proc?.stop();
      },
    };
  }

  private async completed(exitCode: number | null): Promise<StageResult> {
    const schema = this.request.agent?.schema;
    let structured = this.state.structured;
    if (schema) {
      if (structured === undefined) structured = parseJsonAnswer(this.state.text);
      let issues: string[];
      try {
        issues = structured === undefined ? ["the final answer is not JSON"] : (await schemaValidator(schema))(structured);
      } catch (err) {
        return this.result("failed", "invalid_schema", (err as Error).message, exitCode);
      }
      if (issues.length) return this.result("failed", "structured_output_invalid", `the agent's structured output does not match the schema: ${issues.slice(0, 3).join("; ")}`, exitCode);
    }
    let outputPath: string | undefined;
    try {
      outputPath = await writeOutputFile(this.request, this.state.text, structured);
    } catch (err) {
      return this.result("failed", "output_file", `could not write the output file: ${(err as Error).message}`, exitCode);
    }
    this.files.completed(this.state.text, structured);
    return { ...this.result("completed", undefined, undefined, exitCode), ...(structured !== undefined ? { structured } : {}), ...(outputPath ? { outputPath } : {}) };
  }

  /** The stage's result: built once, when the session ends (from here on a message is refused). */
  private result(status: StageResult["status"], code?: string, message?: string, exitCode: number | null = null): StageResult {
    this.phase.fire(SESSION_EVENTS.end);
    if (status !== "completed") this.files.section("Outcome", `${status}${message ? `: ${message}` : ""}`);
    const text = this.state.text.length > TEXT_LIMIT ? this.state.text.slice(0, TEXT_LIMIT) : this.state.text;
    try {
      writeTotals(this.request.artifactDir, this.state.session);
    } catch (err) {
      this.files.diag(`could not keep the session's usage totals: ${(err as Error).message}`);
    }
    const { sessionStore } = this.adapter;
    if (sessionStore && this.lastEnv && this.state.sessionId) {
      try {
        keepCliSession(this.adapter.kind, sessionStore, this.request, this.lastEnv, this.state.sessionId, this.request.artifactDir);
      } catch (err) {
        this.files.diag(`could not keep a copy of session ${this.state.sessionId}: ${(err as Error).message}`);
      }
    }
    return {
      status,
      text,
      exitCode,
      outputPath: this.files.transcriptPath,
      errorPath: this.files.errorPath,
      transcriptPath: this.files.transcriptPath,
      eventsPath: this.files.eventsPath,
      usage: this.usage,
      ...(this.warnings.length ? { warnings: [...this.warnings] } : {}),
      ...(this.state.sessionId ? { sessionId: this.state.sessionId } : {}),
      ...(code && status !== "completed" ? { error: { code, message: message ?? code } } : {}),
    };
  }
}

/** A JSON value from an answer that may be wrapped in a code fence or prose. */
export function parseJsonAnswer(text: string): unknown {
  const t = text.trim();
  const fenced = /```(?:json)?\s*\n([\s\S]*?)\n```/.exec(t);
  for (const candidate of [t, fenced?.[1], t.slice(Math.min(...["{", "["].map((c) => (t.indexOf(c) < 0 ? Infinity : t.indexOf(c)))))]) {
    if (!candidate) continue;
    try {
      return JSON.parse(candidate);
    } catch {
      // try the next reading
    }
  }
  return undefined;
}
