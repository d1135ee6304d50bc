/**
 * Opening the terminal console (cli/tui/console.ts, loaded as the tui
 * bundle: src/shared/entry-points.ts): `atomic tui`, and `atomic run --tui`
 * / `atomic resume --tui`, which drive the run in this process as usual
 * (cli/drive.ts) with the console open on it instead of the live tree.
 * Quitting the console while the run goes on stops it as Ctrl-C does (it
 * stays resumable); the run's result is printed once the console is
 * closed.
 */

import type { RootRun } from "../engine/driver.ts";
import { setEnv, readEnv } from "../shared/config/environment.ts";
import { importEntry } from "../shared/entry-points.ts";
import { UsageError } from "../shared/errors.ts";
import { driveRun } from "./drive.ts";
import type { CliSession } from "./session.ts";
import type { RunView } from "./view/run-view.ts";
import type * as Tui from "./tui/entry.ts";

export const TUI_ARGS = {
  tui: { type: "boolean", description: "drive the run with the full-screen console (atomic tui) open on it" },
} as const;

/** The console needs a terminal to read keys from and draw on. */
export function requireTerminal(s: CliSession, what: string): void {
  if (s.globals.json) throw new UsageError("bad_flag", `${what} is a full-screen console and does not go with --json`, { hint: "for programs: atomic runs --json, atomic show RUN --json" });
  if (!process.stdin.isTTY || !process.stdout.isTTY || readEnv("TERM") === "dumb") {
    throw new UsageError("not_a_terminal", `${what} needs a terminal on its standard input and output`, {
      hint: "in a pipe or a script use atomic runs, atomic show RUN or atomic runs --watch",
    });
  }
}

async function loadTui(s: CliSession): Promise<typeof Tui> {
  if (!s.style.enabled) setEnv("FORCE_COLOR", "0"); // ink's colours follow NO_COLOR / --no-color
  return (await importEntry("cli/tui/entry.ts")) as typeof Tui;
}

export async function openConsole(s: CliSession, opts: Omit<Tui.ConsoleOptions, "data" | "color">, onQuit?: () => void): Promise<void> {
  const tui = await loadTui(s);
  const data = new tui.ConsoleData(await s.journal(), s.globals.home);
  try {
    await tui.runConsole({ ...opts, data, color: s.style.enabled, ...(onQuit ? { onQuit } : {}) });
  } finally {
    await data.close();
  }
}

/** A view that draws nothing: the console shows the run. */
export const CONSOLE_VIEW: RunView = { observer() {}, close() {}, note() {} };

/** Drives `root` (started with CONSOLE_VIEW's observer) with the console open on it. */
export async function driveInConsole(s: CliSession, root: RootRun): Promise<void> {
  let ended = false;
  let closed!: () => void;
  const consoleClosed = new Promise<void>((resolve) => (closed = resolve));
  const driving = driveRun(s, root, CONSOLE_VIEW, { beforeResult: () => consoleClosed }).finally(() => (ended = true));
  try {
    await openConsole(s, { runId: root.runId, note: `driving run ${root.runId} here; q stops it (resumable) and quits` }, () => {
      if (!ended) root.stop("interrupted");
    });
  } finally {
    closed();
  }
  await driving;
}
