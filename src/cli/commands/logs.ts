/**
 * `atomic logs RUN [--stage NAME] [--follow]`: print stage output.
 *
 * Output lives in files under the run's artifact directory (one folder per
 * attempt); this reads the latest attempt of each stage. Without --stage
 * every stage's lines are printed with a `[stage]` prefix; with --follow it
 * keeps reading new lines (and new stages) until the run stops.
 *
 * The files are read where this machine finds them (artifacts/stage-files.ts):
 * the stage's artifact directory when it ran here, else the artifact store
 * (a worker host shipped them there; with --follow the store's copy is
 * followed as it grows, and after the run ended its last bytes are waited
 * for a few seconds). A stage whose files are in neither place is named in
 * one warning line, not passed over in silence; bytes the store's cap
 * dropped from a file's head are named in one too.
 */

import { lineRedactor } from "../../shared/secrets.ts";
import { defineCommand } from "citty";
import { buildRunReport, flattenStages } from "../../engine/run-report.ts";
import type { Journal } from "../../journal/journal.ts";
import type { RunId } from "../../shared/ids.ts";
import { UsageError } from "../../shared/errors.ts";
import { loadConfig } from "../../shared/config/load.ts";
import { formatBytes } from "../../shared/format-bytes.ts";
import { artifactStoreFor } from "../../artifacts/select.ts";
import { logNameOf, openStageFiles, type StageFiles } from "../../artifacts/stage-files.ts";
import { session, type CliSession } from "../session.ts";
import { stdoutClosed, writeAsync } from "../output.ts";

const POLL_MS = 250;
/** How much of a log file is held at once: a 70 MB log streams through this, never read whole. */
const CHUNK_BYTES = 64 * 1024;
/**
 * With --follow, after the run ended: how long to wait for the artifact
 * store's copies of remote stages' files to be marked complete (their
 * host ships the last bytes when the stage ends) before printing the rest.
 */
const SETTLE_MS = 5_000;

/** A piece of a log: a whole line, or (`partial`) the start of one longer than a chunk or the file's unfinished end. */
interface Piece {
  text: string;
  partial: boolean;
}

class FileTail {
  private offset = 0;
  private rest = "";
  private readonly decoder = new TextDecoder();
  /** The writer said it is done (a store's file), or there is no such file: nothing to wait for. */
  settled = false;
  /** The store's cap cut the file inside a line: its rest is skipped. */
  private headless = false;
  constructor(
    readonly files: StageFiles,
    readonly name: string,
  ) {}

  /**
   * Calls `emit` for the lines written since the last call, a chunk at a
   * time (awaiting it, so output keeps pace with a slow reader); `final`
   * also emits an unfinished last line. `dropped` is told of bytes the
   * store's cap dropped before this reader got to them.
   */
  async drain(final: boolean, emit: (pieces: Piece[]) => Promise<void>, dropped: (bytes: number) => void): Promise<void> {
    for (;;) {
      // Local files are opened without following links (artifacts/stage-logs.ts openArtifactFile).
      const chunk = await this.files.read(this.name, this.offset, CHUNK_BYTES);
      this.settled = chunk === undefined || chunk.complete;
      if (!chunk) break;
      if (chunk.offset > this.offset) {
        dropped(chunk.offset - this.offset);
        this.offset = chunk.offset;
        // The line under way at the cut lost its head: printing starts at the next whole line.
        this.rest = "";
        this.headless = true;
      }
      if (chunk.data.length === 0) break;
      this.offset += chunk.data.length;
      let text = this.decoder.decode(chunk.data, { stream: true });
      if (this.headless) {
        const nl = text.indexOf("\n");
        this.headless = nl < 0;
        text = nl < 0 ? "" : text.slice(nl + 1);
      }
      this.rest += text;
      const lines = this.rest.split("\n");
      this.rest = lines.pop() ?? "";
      const pieces: Piece[] = lines.map((text) => ({ text, partial: false }));
      // A line longer than a chunk goes out in pieces rather than pile up in memory.
      if (this.rest.length > CHUNK_BYTES) {
        pieces.push({ text: this.rest, partial: true });
        this.rest = "";
      }
      await emit(pieces);
      // What was there when this drain began (or a little more): a file that grows fast does not hold it forever.
      if (this.offset >= chunk.size) break;
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
    // Stages that ran on another host: their files in the artifact store, when this process has one (artifacts/select.ts).
    const store = artifactStoreFor(journal, loadConfig({ home: s.globals.home }).config);
    const tails = new Map<string, { label: string; stream: string; tail: FileTail; redact: ReturnType<typeof lineRedactor> }>();
    const sources = new Map<string, StageFiles>();
    let matchedOnce = false;
    let settleUntil: number | undefined;
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
        const files = sources.get(st.artifactDir) ?? (await openStageFiles(st.artifactDir, run.rootId, store));
        if (!files) {
          elsewhere.set(st.path, st.artifactDir);
          continue;
        }
        sources.set(st.artifactDir, files);
        elsewhere.delete(st.path);
        for (const stream of args.stderr ? (["stdout", "stderr"] as const) : (["stdout"] as const)) {
          const name = await logNameOf(files, stream);
          const key = `${st.artifactDir}\0${name}`;
          if (!tails.has(key)) tails.set(key, { label: st.path, stream, tail: new FileTail(files, name), redact: lineRedactor() });
        }
      }
      // Following a run that ended: remote stages' last bytes may still be on their way to the store.
      if (args.follow && !live) settleUntil ??= Date.now() + SETTLE_MS;
      const settling = settleUntil !== undefined && Date.now() < settleUntil && [...tails.values()].some((t) => t.tail.files.where === "store" && !t.tail.settled);
      const final = !live && !settling;
      const prefix = args.stage === undefined;
      for (const { label, stream, tail, redact } of tails.values()) {
        await tail.drain(final, (pieces) => printPieces(s, label, stream, pieces, prefix, redact), (bytes) => {
          s.warn(`the first ${formatBytes(bytes)} of the ${stream} of stage ${label} are not kept: the artifact store keeps the last ${formatBytes(store?.maxFileBytes ?? 0)} of a file (artifacts.maxFileBytes); printing from the next whole line`);
        });
        if (stdoutClosed()) return;
      }
      if (!args.follow || final) break;
      await Bun.sleep(POLL_MS);
      if (!(await stillExists(journal, run.id))) break;
    }
    if (elsewhere.size > 0) {
      const [first, dir] = [...elsewhere][0]!;
      const others = elsewhere.size > 1 ? ` (and ${elsewhere.size - 1} more stage${elsewhere.size > 2 ? "s" : ""})` : "";
      const where = store ? ` nor in the artifact store (${store.location})` : "";
      s.warn(`the output of stage ${first}${others} is not on this machine (${dir})${where}: it stays on the machine that ran the stage, unless it was removed; run atomic logs there`);
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
async function printPieces(s: CliSession, label: string, stream: string, pieces: Piece[], prefix: boolean, redact: ReturnType<typeof lineRedactor>): Promise<void> {
  let text = "";
  for (const { text: written, partial } of pieces) {
    const line = redact(written); // the stage's files keep everything (shared/secrets.ts); a key's body spans lines
    if (line === undefined) continue;
    if (s.globals.json) text += `${JSON.stringify({ stage: label, stream, line, ...(partial ? { partial: true } : {}) })}\n`;
    else {
      const shown = stream === "stderr" ? s.style.dim(line) : line;
      text += `${prefix ? `[${label}] ` : ""}${shown}${partial && !prefix ? "" : "\n"}`;
    }
  }
  await writeAsync(text);
}
