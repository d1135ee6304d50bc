/**
 * A real terminal for tests of full-screen and interactive commands: a
 * private tmux server (its own socket in a temp dir, never the user's
 * server) running one command in a window of a given size. Tests type with
 * `keys`/`type` and read the screen with `screen()`; `waitFor` reads the
 * screen again each time the pane printed something, until it shows what is
 * awaited (no fixed sleeps). The pane's output is piped to a file
 * (`pipe-pane`) watched with fs.watch, so a wait costs nothing while the
 * program prints nothing: reading the screen is a tmux client, about 11
 * CPU-ms, and read every 50 ms it took a sixth of a core for as long as a
 * test waited. tmux updates the screen before it writes the output to the
 * pipe; a read at least once a second, output or not, stays as a backstop
 * (a redraw tmux makes itself, e.g. after a resize). The pane stays
 * after its command exits (remain-on-exit), so the last screen can still be
 * read, under a last line `[exit N]` with the command's exit status. `killTmux()` (afterEach) ends every server
 * a test started, whether it passed or not.
 */

import { watch, writeFileSync, type FSWatcher } from "node:fs";
import { join } from "node:path";
import { environment, atomicBin, type AtomicOptions } from "./atomic.ts";
import { makeTempDir } from "./temp.ts";

const servers = new Set<Tmux>();

/** A backstop: the screen is read at least this often while a wait lasts, whether the pane printed or not. */
const BACKSTOP_MS = 1_000;
/** At most one read of the screen per this many ms while the pane keeps printing (the old polling pace). */
const MIN_READ_GAP_MS = 50;

export class Tmux {
  /** How many times the pane printed (a change of its output file); a wait reads the screen again when it moved. */
  private printed = 0;
  /** The waits asleep until the pane prints. */
  private readonly wakers = new Set<() => void>();
  private watcher: FSWatcher | undefined;

  private constructor(
    private readonly socket: string,
    readonly cols: number,
    readonly rows: number,
  ) {}

  /** Starts `atomic ARGS` (dist/atomic, with the test environment of `opts`) in a COLSxROWS terminal. */
  static atomic(args: string[], opts: AtomicOptions & { cols: number; rows: number }): Tmux {
    return Tmux.start([atomicBin(), ...args], { env: environment(opts), cwd: opts.cwd ?? process.cwd(), cols: opts.cols, rows: opts.rows });
  }

  static start(command: string[], opts: { env: Record<string, string>; cwd: string; cols: number; rows: number }): Tmux {
    const dir = makeTempDir("atomic-tmux-");
    const conf = join(dir, "tmux.conf");
    writeFileSync(conf, "set -g remain-on-exit on\nset -g status off\nset -g default-terminal xterm-256color\n");
    const t = new Tmux(join(dir, "sock"), opts.cols, opts.rows);
    servers.add(t);
    const env = { ...opts.env, TERM: "xterm-256color" };
    delete (env as Record<string, string | undefined>).TMUX;
    t.run(["-f", conf, "new-session", "-d", "-s", "t", "-x", String(opts.cols), "-y", String(opts.rows), "-c", opts.cwd, "--", "sh", "-c", '"$@"; echo "[exit $?]"', "sh", ...command], env);
    // What the command printed before the pipe was there is on the screen already when a wait first reads it.
    const output = join(dir, "output");
    writeFileSync(output, "");
    t.watcher = watch(output, () => {
      t.printed++;
      for (const wake of t.wakers) wake();
    });
    t.run(["pipe-pane", "-t", "t", `cat >> '${output}'`]);
    return t;
  }

  private run(args: string[], env?: Record<string, string>): string {
    const r = Bun.spawnSync(["tmux", "-S", this.socket, ...args], { stdout: "pipe", stderr: "pipe", ...(env ? { env } : {}) });
    if (r.exitCode !== 0) throw new Error(`tmux ${args.join(" ")}: ${r.stderr.toString().trim()}`);
    return r.stdout.toString();
  }

  /** The screen as text (`escapes`: with its colour and style escapes). */
  screen(escapes = false): string {
    return this.run(["capture-pane", "-p", ...(escapes ? ["-e"] : []), "-t", "t"]);
  }

  /** Everything the terminal printed outside the alternate screen, the scrollback included. */
  history(): string {
    return this.run(["capture-pane", "-p", "-S", "-", "-t", "t"]);
  }

  /** Keys by tmux name (Enter, Down, C-c, …) or literal words. */
  keys(...keys: string[]): void {
    this.run(["send-keys", "-t", "t", ...keys]);
  }

  /** Literal text, typed. */
  type(text: string): void {
    this.run(["send-keys", "-t", "t", "-l", text]);
  }

  /** A tmux format of the pane, e.g. `#{mouse_sgr_flag}` (whether the program asked for SGR mouse reports). */
  format(fmt: string): string {
    return this.run(["display-message", "-p", "-t", "t", fmt]).trim();
  }

  resize(cols: number, rows: number): void {
    this.run(["resize-window", "-t", "t", "-x", String(cols), "-y", String(rows)]);
  }

  /** Reads the screen until `want` matches it; the error shows the last screen. */
  async waitFor(want: RegExp | string | ((screen: string) => boolean), timeoutMs = 30_000): Promise<string> {
    const test = typeof want === "function" ? want : typeof want === "string" ? (s: string) => s.includes(want) : (s: string) => want.test(s);
    let last = "";
    await this.until(() => test((last = this.screen())), timeoutMs, () => `timed out waiting for ${String(want)} on the terminal; it shows:\n${last}`);
    return last;
  }

  /** Waits for the command to end; its exit status (its last line may have scrolled off the screen). */
  async exited(timeoutMs = 30_000): Promise<number> {
    let m: RegExpExecArray | null = null;
    await this.until(() => (m = /\[exit (\d+)\]/.exec(this.history())) !== null, timeoutMs, () => `the command did not end in ${timeoutMs / 1000} s; the terminal shows:\n${this.screen()}`);
    return Number(m![1]);
  }

  /** Checks `done` now and again each time the pane printed (at most every MIN_READ_GAP_MS) or BACKSTOP_MS passed. */
  private async until(done: () => boolean, timeoutMs: number, failure: () => string): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const seen = this.printed;
      const checked = Date.now();
      if (done()) return;
      if (checked > deadline) throw new Error(failure());
      if (this.printed === seen) {
        await new Promise<void>((resolve) => {
          const wake = () => (clearTimeout(timer), this.wakers.delete(wake), resolve());
          const timer = setTimeout(wake, Math.min(BACKSTOP_MS, Math.max(0, deadline - checked) + 1));
          this.wakers.add(wake);
        });
      }
      const gap = MIN_READ_GAP_MS - (Date.now() - checked);
      if (gap > 0) await Bun.sleep(gap);
    }
  }

  kill(): void {
    servers.delete(this);
    this.watcher?.close();
    for (const wake of this.wakers) wake();
    Bun.spawnSync(["tmux", "-S", this.socket, "kill-server"], { stdout: "ignore", stderr: "ignore" });
  }
}

/** Ends every tmux server a test started (afterEach). */
export function killTmux(): void {
  for (const t of [...servers]) t.kill();
}
