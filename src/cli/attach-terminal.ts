/**
 * `atomic attach` on a terminal: renders the attach model
 * (view/attach-model.ts) as a scrolling conversation above one input line,
 * and turns what the person types into messages and commands.
 *
 * The screen's last rows are a small live region: the model's text line
 * still being streamed (no newline yet), then the prompt with what is being
 * typed (node:readline edits it). Anything new is printed by erasing that
 * region, writing the new lines, and drawing the region again, so streamed
 * text shows as it arrives without breaking the line being typed. Without
 * a terminal (stdout not a TTY) the text is written as it comes, no prompt.
 *
 * Keys: Enter sends the line (a steer, or a /command); Tab follows the next
 * active stage; Ctrl-C and Ctrl-D detach (the stage goes on).
 */

import { createInterface, type Interface } from "node:readline";
import type { AttachFeed } from "./attach-feed.ts";
import type { Style } from "./style.ts";
import type { AttachItem, StageRef } from "./view/attach-model.ts";
import { renderItem } from "./view/attach-lines.ts";

export const ATTACH_HELP = [
  "type a line and Enter: steer the current turn",
  "/followup TEXT      a message for after the current turn",
  "/interrupt [TEXT]   end the current turn, then deliver TEXT",
  "/answer ID TEXT     answer a question of the run",
  "/detach             leave (Ctrl-C, Ctrl-D too); the stage goes on",
  "Tab                 follow the next active stage",
];

/** What one typed line asks for; a string: what is wrong with it. */
export type AttachCommand =
  | { kind: "send"; mode: "steer" | "followUp" | "interrupt"; text: string }
  | { kind: "answer"; question: string; text: string }
  | { kind: "detach" }
  | { kind: "help" }
  | { kind: "none" };

export const DEFAULT_INTERRUPT_TEXT = "(interrupted by the person attached; wait for their next message)";

export function parseAttachLine(line: string): AttachCommand | string {
  const text = line.trim();
  if (!text) return { kind: "none" };
  if (!text.startsWith("/")) return { kind: "send", mode: "steer", text };
  const [cmd, ...rest] = text.split(/\s+/);
  const arg = text.slice(cmd!.length).trim();
  switch (cmd) {
    case "/followup":
      return arg ? { kind: "send", mode: "followUp", text: arg } : "/followup needs a text: /followup TEXT";
    case "/interrupt":
      return { kind: "send", mode: "interrupt", text: arg || DEFAULT_INTERRUPT_TEXT };
    case "/answer":
      return rest.length >= 2 ? { kind: "answer", question: rest[0]!, text: arg.slice(rest[0]!.length).trim() } : "/answer needs a question id and a text: /answer ID TEXT";
    case "/detach":
      return { kind: "detach" };
    case "/help":
      return { kind: "help" };
    default:
      return `unknown command ${cmd}; /help lists them (a line starting with // is sent as a steer without its first /)`;
  }
}

export class AttachTerminal {
  private rl: Interface | undefined;
  private partial = "";
  private readonly tty: boolean;
  private readonly out = process.stdout;
  private drawn = false;
  private done!: () => void;
  readonly finished = new Promise<void>((r) => (this.done = r));

  constructor(
    private readonly feed: AttachFeed,
    private readonly style: Style,
  ) {
    this.tty = process.stdout.isTTY === true;
  }

  start(): void {
    const model = this.feed.model;
    const focus = model.focus;
    if (focus) for (const item of model.items(focus)) this.render(focus, item);
    model.on((ref, item) => {
      const f = model.focus;
      if (f && f.runId === ref.runId && f.position === ref.position) this.render(ref, item);
    });
    this.rl = createInterface({
      input: process.stdin,
      output: this.tty ? this.out : undefined,
      terminal: this.tty && process.stdin.isTTY === true,
      prompt: this.tty ? "> " : "",
      // Tab is not completion here: it follows the next active stage.
      completer: (line: string) => {
        setImmediate(() => this.switchStage());
        return [[], line];
      },
    });
    this.rl.on("line", (line) => void this.onLine(line));
    this.rl.on("SIGINT", () => this.detach());
    this.rl.on("close", () => this.detach());
    process.on("SIGINT", () => this.detach());
    this.redraw();
  }

  /** Prints what the model holds of the focused stage, with no prompt (a stage that ended). */
  printAll(): void {
    const f = this.feed.model.focus;
    if (f) for (const item of this.feed.model.items(f)) this.render(f, item);
    this.flushPartial();
    this.erase();
  }

  /** Leaves: the region is cleared, the stage is not touched. */
  detach(message = "detached; the stage goes on"): void {
    if (!this.rl) return;
    const rl = this.rl;
    this.rl = undefined;
    this.print([this.style.dim(message)]);
    rl.close();
    this.done();
  }

  /** The stage (or run) ended: says so and leaves. */
  ended(): void {
    if (!this.rl) return;
    const rl = this.rl;
    this.rl = undefined;
    this.flushPartial();
    this.erase();
    rl.close();
    this.done();
  }

  private async onLine(line: string): Promise<void> {
    const cmd = parseAttachLine(line.startsWith("//") ? line.slice(1) : line);
    if (typeof cmd === "string") return this.print([this.style.yellow(cmd)]);
    try {
      switch (cmd.kind) {
        case "none":
          return this.redraw();
        case "help":
          return this.print(ATTACH_HELP.map((l) => this.style.dim(l)));
        case "detach":
          return this.detach();
        case "send":
          return await this.feed.send(cmd.text, cmd.mode);
        case "answer":
          return await this.feed.answer(cmd.question, cmd.text);
      }
    } catch (err) {
      const e = err as { message?: string; hint?: string };
      this.print([this.style.red(`${e.message ?? String(err)}`), ...(e.hint ? [this.style.dim(e.hint)] : [])]);
    }
  }

  private switchStage(): void {
    const model = this.feed.model;
    const next = model.nextActive();
    const focus = model.focus;
    if (!next || (focus && next.runId === focus.runId && next.position === focus.position)) {
      return this.print([this.style.dim("no other active stage to follow")]);
    }
    model.setFocus(next);
    this.flushPartial();
    this.print([this.style.bold(`── following ${next.path} (stage ${next.position} of run ${next.runId}) ──`)]);
    for (const item of model.items(next)) this.render(next, item);
  }

  /** One model item, as lines (text deltas go to the streaming line). */
  private render(ref: StageRef, item: AttachItem): void {
    const r = renderItem(ref, item, this.style);
    if ("stream" in r) this.stream(r.stream);
    else this.print(r.lines);
  }

  // ---------------------------------------------------------------- the live region

  private rowsOf(text: string): number {
    const cols = this.out.columns || 80;
    // eslint-disable-next-line no-control-regex -- the style's colour escapes take no columns
    const width = Bun.stringWidth(text.replace(/\x1b\[[0-9;]*m/g, ""));
    return Math.max(1, Math.ceil(width / cols));
  }

  private erase(): void {
    if (!this.tty || !this.drawn) return;
    let up = this.partial ? this.rowsOf(this.partial) : 0;
    let seq = "\r\x1b[K";
    while (up-- > 0) seq += "\x1b[1A\r\x1b[K";
    this.out.write(seq);
    this.drawn = false;
  }

  private redraw(): void {
    if (!this.tty) return;
    if (this.partial) this.out.write(`${this.partial}\n`);
    this.drawn = true;
    if (this.rl) this.rl.prompt(true);
  }

  private print(lines: string[]): void {
    if (!this.tty) {
      if (this.partial) {
        this.out.write("\n");
        this.partial = "";
      }
      this.out.write(lines.map((l) => `${l}\n`).join(""));
      return;
    }
    this.erase();
    if (this.partial) {
      this.out.write(`${this.partial}\n`);
      this.partial = "";
    }
    this.out.write(lines.map((l) => `${l}\n`).join(""));
    this.redraw();
  }

  private stream(text: string): void {
    if (!this.tty) {
      this.out.write(text);
      this.partial = text.endsWith("\n") ? "" : "x";
      return;
    }
    this.erase();
    const all = this.partial + text;
    const cut = all.lastIndexOf("\n");
    if (cut >= 0) this.out.write(all.slice(0, cut + 1));
    this.partial = all.slice(cut + 1);
    this.redraw();
  }

  private flushPartial(): void {
    if (!this.partial) return;
    if (this.tty) {
      this.erase();
      this.out.write(`${this.partial}\n`);
      this.partial = "";
      this.redraw();
    } else {
      this.out.write("\n");
      this.partial = "";
    }
  }
}
