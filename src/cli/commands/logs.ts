/**
 * `atomic logs RUN [--stage NAME] [--follow]`: print stage output.
 *
 * Output lives in files under the run's artifact directory (one folder per
 * attempt); this reads the latest attempt of each stage. Without --stage
 * every stage's lines are printed with a `[stage]` prefix; with --follow it
 * keeps reading new lines (and new stages) until the run stops.
 */

import { redact } from "../../shared/secrets.ts";
import { openArtifactFile, stageLogPath } from "../../runners/stage-logs.ts";
import { defineCommand } from "citty";
import { closeSync, fstatSync, readSync } from "node:fs";
import { buildRunReport, flattenStages } from "../../engine/run-report.ts";
import type { Journal } from "../../journal/types.ts";
import type { RunId } from "../../shared/ids.ts";
import { UsageError } from "../../shared/errors.ts";
import { session, type CliSession } from "../session.ts";

const POLL_MS = 250;

class FileTail {
  private offset = 0;
  private partial = "";
  constructor(readonly path: string) {}

  /** New complete lines since the last read (the rest of the file at the end). */
  read(final: boolean): string[] {
    // Not by path: a link the stage planted in its artifact directory is refused (stage-logs.ts).
    const fd = openArtifactFile(this.path);
    if (fd !== undefined) {
      try {
        const size = fstatSync(fd).size;
        if (size > this.offset) {
          const buf = Buffer.alloc(size - this.offset);
          const n = readSync(fd, buf, 0, buf.length, this.offset);
          this.offset += n;
          this.partial += buf.subarray(0, n).toString("utf8");
        }
      } finally {
        closeSync(fd);
      }
    }
    const lines = this.partial.split("\n");
    this.partial = lines.pop() ?? "";
    if (final && this.partial) {
      lines.push(this.partial);
      this.partial = "";
    }
    return lines;
  }
}

export default defineCommand({
  meta: { name: "logs", description: "Print a run's stage output" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "string", description: "only this stage (name, path like child/stage, or position)" },
    follow: { type: "boolean", alias: ["f"], description: "keep printing new output until the run stops" },
    stderr: { type: "boolean", description: "include stderr (default true)", default: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    const tails = new Map<string, { label: string; stream: string; tail: FileTail }>();
    let matchedOnce = false;
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
        for (const stream of args.stderr ? (["stdout", "stderr"] as const) : (["stdout"] as const)) {
          const path = stageLogPath(st.artifactDir, stream);
          if (!tails.has(path)) tails.set(path, { label: st.path, stream, tail: new FileTail(path) });
        }
      }
      const prefix = args.stage === undefined;
      for (const { label, stream, tail } of tails.values()) printLines(s, label, stream, tail.read(!live), prefix);
      if (!args.follow || !live) break;
      await Bun.sleep(POLL_MS);
      if (!(await stillExists(journal, run.id))) break;
    }
  },
});

async function stillExists(journal: Journal, id: RunId): Promise<boolean> {
  return (await journal.getRun(id)) !== undefined;
}

/** Lines as the stage wrote them, but for known secret values (shared/secrets.ts): its files keep everything. */
function printLines(s: CliSession, label: string, stream: string, lines: string[], prefix: boolean): void {
  for (const written of lines) {
    const line = redact(written);
    if (s.globals.json) s.json({ stage: label, stream, line });
    else if (stream === "stderr") process.stdout.write(`${prefix ? `[${label}] ` : ""}${s.style.dim(line)}\n`);
    else process.stdout.write(`${prefix ? `[${label}] ` : ""}${line}\n`);
  }
}
