/**
 * `atomic logs RUN [--stage NAME] [--follow]`: print stage output.
 *
 * Output lives in files under the run's artifact directory (one folder per
 * attempt); this reads the latest attempt of each stage. Without --stage
 * every stage's lines are printed with a `[stage]` prefix; with --follow it
 * keeps reading new lines (and new stages) until the run stops.
 *
 * The files stay on the machine that ran the stage (with a shared Postgres
 * journal another machine sees the run but not them): a stage whose
 * artifact directory is not here is named in one warning line, not passed
 * over in silence.
 */

import { redact } from "../../shared/secrets.ts";
import { openArtifactFile, stageLogPath } from "../../runners/stage-logs.ts";
import { defineCommand } from "citty";
import { closeSync, existsSync, fstatSync, readSync } from "node:fs";
import { buildRunReport, flattenStages } from "../../engine/run-report.ts";
import type { Journal } from "../../journal/types.ts";
import type { RunId } from "../../shared/ids.ts";
import { UsageError } from "../../shared/errors.ts";
import { session, type CliSession } from "../session.ts";
import { stdoutClosed, writeAsync } from "../output.ts";

const POLL_MS = 250;
/** How much of a log file is held at once: a 70 MB log streams through this, never read whole. */
const CHUNK_BYTES = 64 * 1024;

/** A piece of a log: a whole line, or (`partial`) the start of one longer than a chunk or the file's unfinished end. */
interface Piece {
  text: string;
  partial: boolean;
}

class FileTail {
  private offset = 0;
  private rest = "";
  private readonly decoder = new TextDecoder();
  constructor(readonly path: string) {}

  /**
   * Calls `emit` for the lines written since the last call, a chunk at a
   * time (awaiting it, so output keeps pace with a slow reader); `final`
   * also emits an unfinished last line.
   */
  async drain(final: boolean, emit: (pieces: Piece[]) => Promise<void>): Promise<void> {
    // Not by path: a link the stage planted in its artifact directory is refused (stage-logs.ts).
    const fd = openArtifactFile(this.path);
    if (fd !== undefined) {
      try {
        const size = fstatSync(fd).size;
        if (size > this.offset) {
          const buf = Buffer.alloc(Math.min(CHUNK_BYTES, size - this.offset));
          while (this.offset < size) {
            const n = readSync(fd, buf, 0, Math.min(buf.length, size - this.offset), this.offset);
            if (n === 0) break;
            this.offset += n;
            this.rest += this.decoder.decode(buf.subarray(0, n), { stream: true });
            const lines = this.rest.split("\n");
            this.rest = lines.pop() ?? "";
            const pieces: Piece[] = lines.map((text) => ({ text, partial: false }));
            // A line longer than a chunk goes out in pieces rather than pile up in memory.
            if (this.rest.length > CHUNK_BYTES) {
              pieces.push({ text: this.rest, partial: true });
              this.rest = "";
            }
            await emit(pieces);
          }
        }
      } finally {
        closeSync(fd);
      }
    }
    if (final && this.rest) {
      const text = this.rest;
      this.rest = "";
      await emit([{ text, partial: false }]);
    }
  }
}

export default defineCommand({
  meta: { name: "logs", description: "Print a run's stage output" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "string", description: "only this stage (name, path like child/stage, or position)" },
    follow: { type: "boolean", alias: ["f"], description: "keep printing new output until the run stops" },
    stderr: { type: "boolean", description: "leave stderr out (it is printed by default)", default: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    const tails = new Map<string, { label: string; stream: string; tail: FileTail }>();
    let matchedOnce = false;
    const elsewhere = new Map<string, string>();
    for (;;) {
      const report = (await buildRunReport(journal, run.id))!;
      const live = report.status === "running";
      let stages = flattenStages(report);
      if (args.stage !== undefined) {
        const want = args.stage;
        stages = stages.filter((x) => x.name === want || x.path === want || x.position === want);
        if (stages.length === 0 && !(args.follow && live)) {
          if (matchedOnce) break;
          throw new UsageError("unknown_stage", `run ${run.id} has no stage named ${JSON.stringify(want)}`, {
            hint: `list its stages with: atomic show ${run.id}`,
          });
        }
      }
      matchedOnce ||= stages.length > 0;
      for (const st of stages) {
        if (!st.artifactDir) continue;
        if (!existsSync(st.artifactDir)) {
          elsewhere.set(st.path, st.artifactDir);
          continue;
        }
        elsewhere.delete(st.path);
        for (const stream of args.stderr ? (["stdout", "stderr"] as const) : (["stdout"] as const)) {
          const path = stageLogPath(st.artifactDir, stream);
          if (!tails.has(path)) tails.set(path, { label: st.path, stream, tail: new FileTail(path) });
        }
      }
      const prefix = args.stage === undefined;
      for (const { label, stream, tail } of tails.values()) {
        await tail.drain(!live, (pieces) => printPieces(s, label, stream, pieces, prefix));
        if (stdoutClosed()) return;
      }
      if (!args.follow || !live) break;
      await Bun.sleep(POLL_MS);
      if (!(await stillExists(journal, run.id))) break;
    }
    if (elsewhere.size > 0) {
      const [first, dir] = [...elsewhere][0]!;
      const others = elsewhere.size > 1 ? ` (and ${elsewhere.size - 1} more stage${elsewhere.size > 2 ? "s" : ""})` : "";
      s.warn(`the output of stage ${first}${others} is not on this machine (${dir}): it stays on the machine that ran the stage, unless it was removed; run atomic logs there`);
    }
  },
});

async function stillExists(journal: Journal, id: RunId): Promise<boolean> {
  return (await journal.getRun(id)) !== undefined;
}

/**
 * Writes one chunk's lines and waits until stdout takes more. Without a
 * prefix or --json the bytes go out as they are (a piece of an overlong
 * line without a newline); otherwise each piece is a line of its own.
 */
async function printPieces(s: CliSession, label: string, stream: string, pieces: Piece[], prefix: boolean): Promise<void> {
  let text = "";
  for (const { text: written, partial } of pieces) {
    const line = redact(written); // the stage's files keep everything (shared/secrets.ts)
    if (s.globals.json) text += `${JSON.stringify({ stage: label, stream, line, ...(partial ? { partial: true } : {}) })}\n`;
    else {
      const shown = stream === "stderr" ? s.style.dim(line) : line;
      text += `${prefix ? `[${label}] ` : ""}${shown}${partial && !prefix ? "" : "\n"}`;
    }
  }
  await writeAsync(text);
}
