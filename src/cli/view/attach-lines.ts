/**
 * One attach item (view/attach-model.ts) as what a person reads: whole
 * lines, or a piece of text that streams into the current line (model text
 * deltas, a shell stage's output). `atomic attach` on a terminal
 * (cli/attach-terminal.ts) prints these, and the tui's stage pane
 * (tui/console.ts) keeps them as its conversation (AttachPaneText), so both
 * say the same thing in the same words.
 */

import type { Style } from "../style.ts";
import type { AttachItem, AttachModel, StageRef } from "./attach-model.ts";

export type Rendered = { lines: string[] } | { stream: string };

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

export function renderItem(ref: StageRef, item: AttachItem, st: Style): Rendered {
  switch (item.kind) {
    case "attached":
      return { lines: [st.bold(`attached to ${ref.path} (stage ${ref.position} of run ${ref.runId}, attempt ${item.attempt}, ${item.status})`) + st.dim(item.live ? " — type to steer, /help" : "")] };
    case "transcript":
      if (item.more) return { stream: item.text }; // the rest of the conversation so far, which live text goes on from
      return { lines: [st.dim("── the conversation so far ──"), ...item.text.replace(/\n+$/, "").split("\n")] };
    case "live":
      return { lines: [st.dim("── live ──")] };
    case "text":
      return { stream: item.text };
    case "output":
      return { stream: item.stream === "stderr" ? st.red(item.text) : item.text };
    case "tool":
      if (item.state === "started") return { lines: [st.blue(`⚙ ${item.name}`) + (item.input ? ` ${oneLine(item.input, 200)}` : "")] };
      return { lines: [st.dim(`  ↳ ${item.ok === false ? st.red("failed") : "ok"}${item.output ? `: ${oneLine(item.output, 200)}` : ""}`)] };
    case "usage": {
      const cost = item.costMicroUsd ? `, $${(item.costMicroUsd / 1e6).toFixed(6)}` : "";
      return { lines: [st.dim(`· turn: ${item.inputTokens} in, ${item.outputTokens} out${cost}`)] };
    }
    case "state":
      return { lines: [item.state === "worker_lost" || item.state === "attempt_failed" ? st.yellow(`── ${item.text} ──`) : st.bold(`── ${item.text} ──`)] };
    case "message": {
      const who = item.mine ? "you" : "message";
      const state = `[${item.state}${item.reason ? `: ${item.reason}` : ""}]`;
      return { lines: [`${st.green(`→ ${who} (${item.mode})`)} ${oneLine(item.text, 200)} ${st.dim(`${item.id} ${state}`)}`] };
    }
    case "answer":
      return { lines: [st.green(`→ answer to ${item.question}: ${item.text}`) + st.dim(` [${item.status}]`)] };
    case "notice":
      return { lines: [st.yellow(item.text)] };
  }
}

/** Characters of a stage's conversation the pane keeps (its end). */
const KEEP_CHARS = 64 * 1024;

/**
 * The conversation of one followed stage as one text, kept up to date from the model's items as they come
 * (a delta appends to the last line). The tui's pane draws its end.
 */
export class AttachPaneText {
  private text = "";
  /** Bumped on every change (the pane redraws when it moved). */
  version = 0;
  private readonly off: () => void;

  constructor(
    model: AttachModel,
    readonly ref: StageRef,
    private readonly st: Style,
    /** Called after each change. */
    onChange: () => void,
  ) {
    for (const item of model.items(ref)) this.add(item);
    this.off = model.on((r, item) => {
      if (r.runId !== ref.runId || r.position !== ref.position) return;
      this.add(item);
      onChange();
    });
  }

  private add(item: AttachItem): void {
    if (item.kind === "attached") return; // the pane's title says which stage and how it stands
    const r = renderItem(this.ref, item, this.st);
    if ("stream" in r) this.text += r.stream;
    else this.text += (this.text && !this.text.endsWith("\n") ? "\n" : "") + r.lines.map((l) => `${l}\n`).join("");
    if (this.text.length > 2 * KEEP_CHARS) this.text = this.text.slice(-KEEP_CHARS);
    this.version++;
  }

  get value(): string {
    return this.text.length > KEEP_CHARS ? this.text.slice(-KEEP_CHARS) : this.text;
  }

  close(): void {
    this.off();
  }
}
