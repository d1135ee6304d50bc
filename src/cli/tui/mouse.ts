/**
 * The mouse in `atomic tui`: xterm's mouse reporting, in its SGR form.
 *
 * The protocol: the console writes `ESC [ ? 1000 h` (report button presses
 * and releases, the wheel included) and `ESC [ ? 1006 h` (as SGR sequences,
 * which carry any column and row) when it opens, and the same with `l` when
 * it closes, so the terminal is never left reporting. The terminal then
 * sends `ESC [ < B ; X ; Y M` for a press and `… m` for a release, X and Y
 * counted from 1 at the top left; B's low two bits are the button (0 left,
 * 1 middle, 2 right), 64 and 65 the wheel up and down; 4, 8 and 16 add
 * Shift, Meta and Ctrl. Most terminals still select text with Shift held.
 *
 * ink (8) reads stdin itself and drops these sequences as keys it has no
 * name for, so they are read here from the same stream's `data` events
 * (emitted for each chunk ink reads), with no second reader. Only presses
 * and the wheel are reported; a sequence cut between two chunks waits for
 * the rest.
 */

export const MOUSE_ON = "\x1b[?1000h\x1b[?1006h";
export const MOUSE_OFF = "\x1b[?1006l\x1b[?1000l";

export type MouseEvent = { kind: "click" | "wheel-up" | "wheel-down"; x: number; y: number };

const SGR = /\x1b\[<(\d+);(\d+);(\d+)([Mm])/g;
/** The start of a sequence at the end of a chunk, its rest in the next one. */
const PARTIAL = /\x1b(\[(<[\d;]*)?)?$/;

/** Reads the mouse events out of stdin's chunks as they come. */
export class MouseReader {
  private rest = "";

  constructor(private readonly on: (e: MouseEvent) => void) {}

  push(chunk: string | Buffer): void {
    const text = this.rest + (typeof chunk === "string" ? chunk : chunk.toString("utf8"));
    let end = 0;
    for (const m of text.matchAll(SGR)) {
      end = m.index + m[0].length;
      const b = Number(m[1]);
      if (m[4] === "m") continue; // a release
      const at = { x: Number(m[2]), y: Number(m[3]) };
      if ((b & 64) !== 0) this.on({ kind: (b & 1) === 0 ? "wheel-up" : "wheel-down", ...at });
      else if ((b & 3) === 0 && (b & 32) === 0) this.on({ kind: "click", ...at }); // the left button, not a drag
    }
    const partial = PARTIAL.exec(text.slice(end));
    this.rest = partial ? partial[0] : "";
  }
}
