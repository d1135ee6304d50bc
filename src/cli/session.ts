/**
 * What every command shares in one invocation: the global options, the
 * journal (opened on first use, closed at exit), output helpers honouring
 * --json / --quiet / NO_COLOR, and the exit code.
 */

import { parseRunRef } from "../shared/ids.ts";
import { openJournal } from "../journal/open.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import type { GlobalOptions } from "./globals.ts";
import { makeStyle, type Style } from "./style.ts";
import { out, err } from "./output.ts";

export class CliSession {
  exitCode = 0;
  readonly style: Style;
  private journalPromise: Promise<Journal> | undefined;
  /** Work to do before the process exits (close the journal, stop timers). */
  readonly cleanups: (() => Promise<void> | void)[] = [];

  constructor(
    readonly globals: GlobalOptions,
    readonly rawArgs: string[],
  ) {
    this.style = makeStyle(globals.color && !globals.json && process.stdout.isTTY === true);
  }

  journal(): Promise<Journal> {
    this.journalPromise ??= openJournal({
      home: this.globals.home,
      durability: this.globals.durability,
      ...(this.globals.journal ? { journalUrl: this.globals.journal } : {}),
    }).then(async (j) => {
      this.cleanups.push(() => j.close());
      await this.debug(`journal: ${j.location} (durability ${this.globals.durability})`);
      return j;
    });
    return this.journalPromise;
  }

  /** A run by full id or unique prefix; a clear error otherwise. */
  async findRun(idOrPrefix: string | undefined): Promise<RunRecord> {
    const text = (idOrPrefix ?? "").trim().toLowerCase();
    if (!text) throw new UsageError("missing_run_id", "a run id is required", { hint: "list runs with: atomic runs" });
    const journal = await this.journal();
    // The exact id first (a generated id, or a caller's key, which is never a generated id's prefix: shared/ids.ts).
    const ref = parseRunRef(text);
    const exact = ref ? await journal.getRun(ref) : undefined;
    if (exact) return exact;
    const found = await journal.findRuns(text, 50);
    if (found.length === 0) {
      throw new UsageError("unknown_run", `no run with id ${text}`, { hint: "list runs with: atomic runs" });
    }
    // A root run and its children share a time prefix: the root wins when it is the only root.
    const roots = found.filter((r) => r.parentId === null);
    if (roots.length === 1 && found.length < 50 && found.every((r) => r.rootId === roots[0]!.id)) return roots[0]!;
    if (found.length > 1) {
      const ids = found.filter((r) => r.parentId === null).map((r) => r.id);
      const listed = (ids.length ? ids : found.map((r) => r.id)).slice(0, 5);
      throw new UsageError("ambiguous_run", `more than one run id starts with ${text}`, {
        hint: `did you mean ${listed.join(", ")}${found.length > listed.length ? ", …" : ""}? type more of the id`,
      });
    }
    return found[0]!;
  }

  /** A line for people (suppressed by --quiet and --json). */
  info(line: string): void {
    if (!this.globals.quiet && !this.globals.json) out(`${line}\n`);
  }

  /** A line that is the command's result (suppressed by --json only). */
  result(line: string): void {
    if (!this.globals.json) out(`${line}\n`);
  }

  /** One JSON value per line (with --json). */
  json(value: unknown): void {
    out(`${JSON.stringify(value)}\n`);
  }

  /**
   * A diagnostic line, only with --verbose. consola is loaded on first use:
   * it costs ~30 ms of start-up that ordinary invocations should not pay.
   */
  async debug(message: string): Promise<void> {
    if (!this.globals.verbose) return;
    const { createConsola } = await import("consola");
    this.logger ??= createConsola({ level: 4, stdout: process.stderr, stderr: process.stderr, formatOptions: { colors: this.style.enabled, date: true } });
    this.logger.debug(message);
  }

  private logger: { debug(message: string): void } | undefined;

  warn(line: string): void {
    if (!this.globals.json) err(`${this.style.yellow("warning:")} ${line}\n`);
  }

  async close(): Promise<void> {
    for (const fn of this.cleanups.splice(0).reverse()) {
      try {
        await fn();
      } catch {
        // best effort at exit
      }
    }
  }
}

let current: CliSession | undefined;

export function session(): CliSession {
  if (!current) throw new Error("internal: CLI session not started");
  return current;
}

export function startSession(globals: GlobalOptions, rawArgs: string[]): CliSession {
  current = new CliSession(globals, rawArgs);
  return current;
}
