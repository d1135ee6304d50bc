/**
 * Budgets: limits on what a run tree may spend, and the ledger that
 * enforces them (docs/design/engine.md).
 *
 * Limits: cost (integer micro-dollars), tokens (input + output + cache
 * reads + cache writes), and duration (wall time of this drive of the run:
 * a resume starts a fresh window). A root run's limits come from its
 * workflow, config and `--max-*` flags; they are recorded in the run's
 * `run_started` (or `run_resumed`) payload, so a resume keeps them unless
 * it overrides them. A child run spends against its own limits (from its
 * workflow) and every ancestor's: a ledger is a node in a tree. A run of a
 * chain (ctx.continueAsNew) starts its ledger with what the runs before it
 * spent (`chainSpent` in its `run_started`; driver.ts handOver).
 *
 * Spending: a stage's final usage is recorded in the journal with its
 * result (checkpoint, or step_failed for a failed attempt) and settled
 * into its run's ledger and every ancestor. While it runs, its `usage`
 * events count as live spending, so a budget can run out mid-stage.
 * Totals shown by `show` are sums of the recorded per-stage usage; the
 * live figures only decide when to stop.
 *
 * Exhausted (any limit reached, here or above): no new stage starts (the
 * stage step throws BudgetExceededError, and the run ends `blocked` with
 * `budget_exceeded`); every live agent stage under the exhausted ledger
 * is wrapped up (docs/design/budgets.md: for a cost or token cap the model
 * call in flight finishes and no new one starts; the time limit aborts it
 * and gives one wrap-up turn). A warning is emitted once per limit when
 * `warnAtPercent` of it is used.
 *
 * The time budget also ends what is running (`timeUp`, `graceOver`): at
 * the limit, running shell stages are cancelled (their process group gets
 * SIGTERM, then SIGKILL after the shell runner's grace), a running
 * `ctx.tool` sees its signal abort, a `ctx.sleep` stops waiting, and no
 * step starts any more; agent stages get their wrap-up turn and are
 * cancelled if they have not finished AGENT_GRACE_MS later (30 s, or the
 * limit itself when that is shorter). Each raises BudgetExceededError, so
 * the run ends `blocked` and `atomic resume --max-duration` continues it.
 * Time is measured with the monotonic clock: a wall-clock jump neither
 * ends the window early nor extends it.
 */

import type { BudgetOptions, Usage } from "../sdk/types.ts";
import { AtomicError } from "../shared/errors.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { EVENT } from "./journal-events.ts";

export interface BudgetLimits {
  maxCostMicroUsd?: number;
  maxTokens?: number;
  maxDurationMs?: number;
  warnAtPercent: number;
}

export interface Spent {
  costMicroUsd: number;
  tokens: number;
}

/** How long an agent stage may take over its wrap-up turn once the time budget is used up. */
export function agentGraceMs(maxDurationMs: number): number {
  return Math.min(30_000, Math.max(0, maxDurationMs));
}

export const WRAP_UP_TEXT =
  "The run's budget is used up. Stop working now: do not call tools; reply with your final answer based on what you have done so far.";

export class BudgetExceededError extends AtomicError {
  override name = "BudgetExceeded";
  constructor(message: string, runId: string) {
    super("budget_exceeded", message, "terminal", { hint: resumeHint(runId, message) });
  }
}

/** How to continue a run blocked by `why`: the flag of the limit that ran out first. */
export function resumeHint(runId: string, why: string): string {
  if (why.includes("the time budget")) return `resume it with a fresh time budget: atomic resume ${runId} --max-duration D (for example 30m)`;
  return `resume it with a higher budget: atomic resume ${runId} --max-cost N (or --max-tokens, --max-duration)`;
}

/** Limits from budget options (USD → micro-dollars); undefined when nothing is limited. */
export function limitsOf(opts: BudgetOptions | undefined): BudgetLimits | undefined {
  if (!opts) return undefined;
  const limits: BudgetLimits = { warnAtPercent: opts.warnAtPercent ?? CONFIG_DEFAULTS.budget.warnAtPercent };
  if (opts.maxCostUsd !== undefined) limits.maxCostMicroUsd = Math.round(opts.maxCostUsd * 1_000_000);
  if (opts.maxTokens !== undefined) limits.maxTokens = Math.floor(opts.maxTokens);
  if (opts.maxDurationMs !== undefined) limits.maxDurationMs = Math.floor(opts.maxDurationMs);
  return limits.maxCostMicroUsd === undefined && limits.maxTokens === undefined && limits.maxDurationMs === undefined ? undefined : limits;
}

/** Budget options merged left to right (later sources win per field). */
export function mergeBudgets(...sources: (BudgetOptions | undefined)[]): BudgetOptions | undefined {
  const out: BudgetOptions = {};
  for (const s of sources) if (s) for (const [k, v] of Object.entries(s)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return Object.keys(out).length ? out : undefined;
}

type Warn = (runId: string, message: string) => void;

export class BudgetLedger {
  /** Recorded (final) spending of this ledger's subtree, including what earlier drives recorded. */
  private readonly spent: Spent = { costMicroUsd: 0, tokens: 0 };
  /** Live spending of running stages (by stage id), not yet settled. */
  private readonly live = new Map<string, Spent>();
  private readonly children = new Set<BudgetLedger>();
  private readonly warned = new Set<string>();
  private readonly startedAt = performance.now();
  private durationTimer: ReturnType<typeof setTimeout> | undefined;
  private warnTimer: ReturnType<typeof setTimeout> | undefined;
  private graceTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly timeUpOwn = new AbortController();
  private readonly graceOverOwn = new AbortController();
  /** Aborts (with a BudgetExceededError) when this ledger's or an ancestor's time budget is used up. */
  readonly timeUp: AbortSignal;
  /** Aborts an agent grace after `timeUp`: agent stages still running are cancelled. */
  readonly graceOver: AbortSignal;
  /** Whether this ledger or an ancestor has a time budget (steps watch the signals above only then). */
  readonly timed: boolean;
  private exhaustedNotified = false;
  private readonly exhaustedListeners = new Set<() => void>();
  /** Called once when this ledger (or an ancestor) becomes exhausted. */
  onExhausted: (() => void) | undefined;

  constructor(
    readonly runId: string,
    readonly limits: BudgetLimits | undefined,
    private readonly parent: BudgetLedger | undefined,
    private readonly warn: Warn,
    initial?: Spent,
  ) {
    if (initial) {
      this.spent.costMicroUsd = initial.costMicroUsd;
      this.spent.tokens = initial.tokens;
    }
    parent?.children.add(this);
    this.timed = limits?.maxDurationMs !== undefined || (parent?.timed ?? false);
    this.timeUp = parent?.timed ? AbortSignal.any([this.timeUpOwn.signal, parent.timeUp]) : this.timeUpOwn.signal;
    this.graceOver = parent?.timed ? AbortSignal.any([this.graceOverOwn.signal, parent.graceOver]) : this.graceOverOwn.signal;
    if (limits?.maxDurationMs !== undefined) {
      const limit = Math.max(0, limits.maxDurationMs);
      this.durationTimer = setTimeout(() => this.timeRanOut(limit), limit);
      this.durationTimer.unref?.();
      if (limits.warnAtPercent < 100 && limit > 0) {
        this.warnTimer = setTimeout(
          () => this.warn(this.runId, `run ${this.runId} has used ${limits.warnAtPercent}% of its time budget of ${seconds(limit)} s`),
          (limit * Math.max(0, limits.warnAtPercent)) / 100,
        );
        this.warnTimer.unref?.();
      }
    }
  }

  private timeRanOut(limit: number): void {
    const why = timeBudgetUsedUp(limit);
    const spentFirst = this.exhaustedNotified;
    this.timeUpOwn.abort(new BudgetExceededError(`run ${this.runId}: ${why}; running steps were stopped`, this.rootRunId()));
    this.check();
    // A spending cap ran out first: told again, so the agents it wrapped up have their call in flight aborted now.
    if (spentFirst) this.notifyDown();
    this.graceTimer = setTimeout(() => this.graceOverOwn.abort(this.timeUp.reason), agentGraceMs(limit));
    this.graceTimer.unref?.();
  }

  /**
   * The signal a running step watches: `base` (its branch), and with a time
   * budget also `timeUp` (agent stages: `graceOver`, after their wrap-up).
   */
  stepSignal(base: AbortSignal, agent = false): AbortSignal {
    if (!this.timed) return base;
    return AbortSignal.any([base, agent ? this.graceOver : this.timeUp]);
  }

  /** The BudgetExceededError of a used-up time budget (here or above), or undefined. */
  timeUpError(): BudgetExceededError | undefined {
    return this.timeUp.aborted ? (this.timeUp.reason as BudgetExceededError) : undefined;
  }

  /** A child run's ledger: its own limits (if any) under this one's. `initial`: what it recorded before (a resumed child). */
  child(runId: string, opts: BudgetOptions | undefined, initial?: Spent): BudgetLedger {
    const ledger = new BudgetLedger(runId, limitsOf(opts), this, this.warn, initial);
    // Its own limit running out wraps up the agents under it too (the callback checks each agent's ledger).
    ledger.onExhausted = this.onExhausted;
    return ledger;
  }

  get limited(): boolean {
    return this.limits !== undefined || (this.parent?.limited ?? false);
  }

  /** Whether spending (cost or tokens) is limited here or above: a stage's result may use the budget up. */
  get spendingLimited(): boolean {
    const l = this.limits;
    return (l !== undefined && (l.maxCostMicroUsd !== undefined || l.maxTokens !== undefined)) || (this.parent?.spendingLimited ?? false);
  }

  /** Calls `fn` once, when this ledger or an ancestor is used up (at once if it is); returns the way to stop listening. */
  whenExhausted(fn: () => void): () => void {
    if (this.exhausted()) {
      fn();
      return () => {};
    }
    this.exhaustedListeners.add(fn);
    return () => this.exhaustedListeners.delete(fn);
  }

  /** Spending of this subtree, recorded and live. */
  total(): Spent {
    const live = this.liveOnly();
    return { costMicroUsd: this.spent.costMicroUsd + live.costMicroUsd, tokens: this.spent.tokens + live.tokens };
  }

  /** Live spending of this subtree (recorded spending already reached every ancestor when it was settled). */
  private liveOnly(): Spent {
    let cost = 0;
    let tokens = 0;
    for (const s of this.live.values()) {
      cost += s.costMicroUsd;
      tokens += s.tokens;
    }
    for (const c of this.children) {
      const t = c.liveOnly();
      cost += t.costMicroUsd;
      tokens += t.tokens;
    }
    return { costMicroUsd: cost, tokens };
  }

  /** Why no new stage may start here (this ledger or an ancestor is used up), or undefined. */
  exhausted(): string | undefined {
    const own = this.ownExhaustion();
    return own ?? this.parent?.exhausted();
  }

  private ownExhaustion(): string | undefined {
    const l = this.limits;
    if (!l) return undefined;
    const t = this.total();
    if (l.maxCostMicroUsd !== undefined && t.costMicroUsd >= l.maxCostMicroUsd) {
      return `the cost budget of ${usd(l.maxCostMicroUsd)} is used up (${usd(t.costMicroUsd)} spent)`;
    }
    if (l.maxTokens !== undefined && t.tokens >= l.maxTokens) {
      return `the token budget of ${l.maxTokens.toLocaleString("en-US")} is used up (${t.tokens.toLocaleString("en-US")} tokens)`;
    }
    if (l.maxDurationMs !== undefined && (this.timeUpOwn.signal.aborted || performance.now() - this.startedAt >= l.maxDurationMs)) {
      return timeBudgetUsedUp(l.maxDurationMs);
    }
    return undefined;
  }

  assertMayStart(): void {
    const why = this.exhausted();
    if (why) throw new BudgetExceededError(`run ${this.runId}: ${why}; no new stage starts`, this.rootRunId());
  }

  private rootRunId(): string {
    return this.parent ? this.parent.rootRunId() : this.runId;
  }

  /** A running stage reported usage (a delta). */
  addLive(stageId: string, delta: Partial<Usage>): void {
    const s = this.live.get(stageId) ?? { costMicroUsd: 0, tokens: 0 };
    s.costMicroUsd += int(delta.costMicroUsd);
    s.tokens += tokensOf(delta);
    this.live.set(stageId, s);
    this.check();
  }

  /** A stage attempt ended: its live figures are replaced by its recorded usage, here and in every ancestor. */
  settle(stageId: string, usage: Partial<Usage> | undefined): void {
    this.live.delete(stageId);
    if (usage) {
      for (let l: BudgetLedger | undefined = this; l; l = l.parent) {
        l.spent.costMicroUsd += int(usage.costMicroUsd);
        l.spent.tokens += tokensOf(usage);
      }
    }
    this.check();
  }

  /** Warnings and exhaustion callbacks, for this ledger and every ancestor. */
  private check(): void {
    for (let l: BudgetLedger | undefined = this; l; l = l.parent) l.checkOwn();
  }

  private checkOwn(): void {
    const l = this.limits;
    if (!l) return;
    const t = this.total();
    const pct = l.warnAtPercent;
    const warnOnce = (key: string, used: number, limit: number, what: string) => {
      if (limit <= 0 || this.warned.has(key) || used * 100 < limit * pct) return;
      this.warned.add(key);
      this.warn(this.runId, `run ${this.runId} has used ${Math.floor((used * 100) / limit)}% of its ${what} budget`);
    };
    if (l.maxCostMicroUsd !== undefined) warnOnce("cost", t.costMicroUsd, l.maxCostMicroUsd, "cost");
    if (l.maxTokens !== undefined) warnOnce("tokens", t.tokens, l.maxTokens, "token");
    if (!this.exhaustedNotified && this.ownExhaustion()) {
      this.exhaustedNotified = true;
      this.notifyDown();
    }
  }

  private notifyDown(): void {
    this.onExhausted?.();
    for (const fn of [...this.exhaustedListeners]) fn();
    this.exhaustedListeners.clear();
    for (const c of this.children) c.notifyDown();
  }

  /** The run ended: no timers left behind. */
  close(): void {
    clearTimeout(this.durationTimer);
    clearTimeout(this.warnTimer);
    clearTimeout(this.graceTimer);
    this.durationTimer = undefined;
    this.graceTimer = undefined;
    this.parent?.children.delete(this);
  }
}

function timeBudgetUsedUp(limitMs: number): string {
  return `the time budget of ${seconds(limitMs)} s is used up`;
}

function seconds(ms: number): string {
  return (ms / 1000).toFixed(ms < 10_000 ? 1 : 0);
}

function usd(micro: number): string {
  return `$${(micro / 1_000_000).toFixed(micro % 10_000 === 0 ? 2 : 6).replace(/(\.\d\d\d*?)0+$/, "$1")}`;
}

function int(n: number | undefined): number {
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.round(n) : 0;
}

export function tokensOf(u: Partial<Usage>): number {
  return int(u.inputTokens) + int(u.outputTokens) + int(u.cacheReadTokens) + int(u.cacheWriteTokens);
}

/** Usage recorded in a run's events: stage results (checkpoints) and failed attempts; child run ids found on the way. */
export function foldRecordedUsage(events: readonly JournalEvent[]): { spent: Spent; children: RunId[] } {
  const spent: Spent = { costMicroUsd: 0, tokens: 0 };
  const children = new Set<RunId>();
  for (const e of events) {
    if (e.type === EVENT.usageRecorded) {
      const u = (e.payload as { usage?: Usage }).usage;
      if (u) {
        spent.costMicroUsd += int(u.costMicroUsd);
        spent.tokens += tokensOf(u);
      }
      continue;
    }
    if (e.type !== EVENT.checkpoint && e.type !== EVENT.stepFailed && e.type !== EVENT.stepStarted) continue;
    const p = e.payload as { kind?: string; childRunId?: string; usage?: Usage; result?: { usage?: Usage } };
    if (p.childRunId) children.add(p.childRunId as RunId);
    if (p.kind !== "stage") continue;
    const u = e.type === EVENT.checkpoint ? p.result?.usage : e.type === EVENT.stepFailed ? p.usage : undefined;
    if (u) {
      spent.costMicroUsd += int(u.costMicroUsd);
      spent.tokens += tokensOf(u);
    }
  }
  return { spent, children: [...children] };
}

/** What a run and all its child runs recorded as spent (for a resumed run's ledger). */
export async function recordedSpending(journal: Journal, runId: RunId, events?: readonly JournalEvent[]): Promise<Spent> {
  const { spent, children } = foldRecordedUsage(events ?? (await journal.readEvents(runId)));
  for (const child of children) {
    const s = await recordedSpending(journal, child);
    spent.costMicroUsd += s.costMicroUsd;
    spent.tokens += s.tokens;
  }
  return spent;
}
