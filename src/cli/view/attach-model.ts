/**
 * The model of `atomic attach`: what a person sees of the stages of a run,
 * without any terminal in it, so that the terminal view
 * (cli/attach-terminal.ts), the NDJSON output and the tui's stage pane
 * render the same thing.
 *
 * The model holds, per stage it follows, the items shown so far (the
 * conversation as the transcript had it when attaching, then live model
 * text, tool calls, usage, the stage's attempts and end, the messages a
 * person sent with their delivery state as the journal records it), and
 * which stage has the focus. Every change is one `AttachItem` handed to the
 * listeners with its stage; a renderer that switches focus redraws from
 * `items(stage)`.
 */

export interface StageRef {
  /** The stage's own run (a child run for a stage of a child workflow). */
  runId: string;
  /** Its position in that run (the journal's key, the live events' `stage`). */
  position: string;
  /** Its path of names from the root ("review/security"): how messages address it. */
  path: string;
  name: string;
}

export type AttachItem =
  | { kind: "attached"; status: string; attempt: number; live: boolean }
  /**
   * The conversation so far, as the stage's transcript had it; `more`: what it wrote after that read, up to
   * the point from which live events follow (cli/attach-join.ts).
   */
  | { kind: "transcript"; text: string; attempt: number; more?: true }
  /**
   * The conversation so far ends here: what follows came live (cli/attach-join.ts joined the transcript and the
   * live events). Not said for a stage that had ended when attaching.
   */
  | { kind: "live"; attempt: number }
  | { kind: "text"; text: string; attempt: number; at: number }
  | { kind: "tool"; state: "started" | "ended"; name: string; id?: string; input?: string; output?: string; ok?: boolean; attempt: number; at: number }
  | { kind: "usage"; inputTokens: number; outputTokens: number; costMicroUsd: number; attempt: number; at: number }
  | { kind: "output"; stream: "stdout" | "stderr"; text: string; attempt: number; at: number }
  /** An attempt started, the worker running it was lost, the stage ended. */
  | { kind: "state"; state: "attempt_started" | "attempt_failed" | "worker_lost" | "ended"; attempt: number; text: string; status?: string }
  /** A message to the stage (sent from here or elsewhere) and its delivery state as the journal has it. */
  | { kind: "message"; id: string; mode: string; text: string; state: string; reason?: string; mine: boolean }
  | { kind: "answer"; question: string; status: string; text: string }
  | { kind: "notice"; text: string };

export type AttachListener = (stage: StageRef, item: AttachItem) => void;

interface StageView {
  ref: StageRef;
  items: AttachItem[];
  /** Delivery state by message id (a change is a new `message` item). */
  messages: Map<string, string>;
  ended: boolean;
  /** Attempts whose runner started (a second start of one: its worker was lost and the pool runs it again). */
  started: Set<number>;
}

/** Items kept per stage for redraws (the oldest go first; the transcript item stays). */
const MAX_ITEMS = 5_000;

export class AttachModel {
  private readonly stages = new Map<string, StageView>();
  private readonly listeners = new Set<AttachListener>();
  private focusKey: string | undefined;
  /** Ids of the messages sent from this attach. */
  readonly sent = new Set<string>();

  static key(ref: Pick<StageRef, "runId" | "position">): string {
    return `${ref.runId}\u0000${ref.position}`;
  }

  on(listener: AttachListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Starts following a stage (no-op when followed already); the first one followed has the focus. */
  follow(ref: StageRef): boolean {
    const key = AttachModel.key(ref);
    if (this.stages.has(key)) return false;
    this.stages.set(key, { ref, items: [], messages: new Map(), ended: false, started: new Set() });
    this.focusKey ??= key;
    return true;
  }

  has(ref: Pick<StageRef, "runId" | "position">): boolean {
    return this.stages.has(AttachModel.key(ref));
  }

  get followed(): StageRef[] {
    return [...this.stages.values()].map((s) => s.ref);
  }

  /** The stages followed that have not ended. */
  get active(): StageRef[] {
    return [...this.stages.values()].filter((s) => !s.ended).map((s) => s.ref);
  }

  get focus(): StageRef | undefined {
    return this.focusKey ? this.stages.get(this.focusKey)?.ref : undefined;
  }

  setFocus(ref: StageRef): void {
    if (this.stages.has(AttachModel.key(ref))) this.focusKey = AttachModel.key(ref);
  }

  /** The next active stage after the focused one (Tab), or the focused one when it is the only one. */
  nextActive(): StageRef | undefined {
    const active = this.active;
    if (active.length === 0) return this.focus;
    const i = active.findIndex((r) => AttachModel.key(r) === this.focusKey);
    return active[(i + 1) % active.length];
  }

  items(ref: StageRef): readonly AttachItem[] {
    return this.stages.get(AttachModel.key(ref))?.items ?? [];
  }

  ended(ref: StageRef): boolean {
    return this.stages.get(AttachModel.key(ref))?.ended ?? false;
  }

  /** Adds an item to a followed stage and tells the listeners. */
  add(ref: Pick<StageRef, "runId" | "position">, item: AttachItem): void {
    const view = this.stages.get(AttachModel.key(ref));
    if (!view) return;
    if (item.kind === "message") {
      if (view.messages.get(item.id) === item.state) return;
      view.messages.set(item.id, item.state);
    }
    if (item.kind === "state" && item.state === "ended") view.ended = true;
    if (item.kind === "state" && item.state === "attempt_started") view.ended = false;
    const last = view.items.at(-1);
    if (item.kind === "text" && last?.kind === "text" && last.attempt === item.attempt) {
      last.text += item.text; // one text item per run of deltas (the listeners still get each delta)
    } else {
      view.items.push(item.kind === "text" ? { ...item } : item);
      if (view.items.length > MAX_ITEMS) view.items.splice(1, view.items.length - MAX_ITEMS);
    }
    for (const l of this.listeners) l(view.ref, item);
  }

  /** The attempt's runner had started when attaching. */
  markStarted(ref: Pick<StageRef, "runId" | "position">, attempt: number): void {
    this.stages.get(AttachModel.key(ref))?.started.add(attempt);
  }

  /** A runner's live event (intercom/live.ts) as items of its stage. */
  addLive(ref: Pick<StageRef, "runId" | "position">, attempt: number, e: { type: string; at: number; [k: string]: unknown }): void {
    const str = (v: unknown) => (typeof v === "string" ? v : undefined);
    const num = (v: unknown) => (typeof v === "number" ? v : 0);
    switch (e.type) {
      case "started": {
        const view = this.stages.get(AttachModel.key(ref));
        if (!view) return;
        if (view.started.has(attempt)) {
          this.add(ref, { kind: "state", state: "worker_lost", attempt, text: `worker lost: attempt ${attempt} started again on another worker` });
        }
        view.started.add(attempt);
        return;
      }
      case "text_delta":
        if (str(e.text)) this.add(ref, { kind: "text", text: e.text as string, attempt, at: e.at });
        return;
      case "output":
        if (str(e.text)) this.add(ref, { kind: "output", stream: e.stream === "stderr" ? "stderr" : "stdout", text: e.text as string, attempt, at: e.at });
        return;
      case "tool_start":
      case "tool_end": {
        const item: AttachItem = { kind: "tool", state: e.type === "tool_start" ? "started" : "ended", name: str(e.name) ?? "tool", attempt, at: e.at };
        if (str(e.id)) item.id = e.id as string;
        if (str(e.input)) item.input = e.input as string;
        if (str(e.output)) item.output = e.output as string;
        if (typeof e.ok === "boolean") item.ok = e.ok;
        this.add(ref, item);
        return;
      }
      case "usage": {
        const u = (e.usage ?? {}) as Record<string, unknown>;
        this.add(ref, { kind: "usage", inputTokens: num(u.inputTokens), outputTokens: num(u.outputTokens), costMicroUsd: num(u.costMicroUsd), attempt, at: e.at });
        return;
      }
    }
  }
}
