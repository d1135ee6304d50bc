/**
 * A long agent loop (issue 25, benchmark b): `dist/atomic run` of a
 * workflow whose 100 turns are agent stages one after another
 * (bench/workflows/agents.ts, sequential), each calling the `bash` tool for
 * 200 KB of output (the fake provider asks for it, then answers), then a
 * closed gate, so the run ends "failed" with every turn checkpointed.
 *
 * - Resume: `dist/atomic resume` of that run (the gate still closed), which
 *   replays the 100 recorded turns and meets the gate again: the whole
 *   process, spawn to exit. Target: at most 1 s. Baseline: the same resume
 *   of a 10-turn run, alternating (what a resume costs before it replays).
 * - Journal growth: the journal's bytes per turn (the run's rows: sum of
 *   their payloads; and the database files on disk, atomic.db + WAL),
 *   from the 10-turn run to the 100-turn run. The tool output lives in the
 *   stage's artifacts (transcript, conversation), never in rows: target at
 *   most 5 % of the tool output per turn (10 KB).
 */

import { Database } from "bun:sqlite";
import { existsSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  WORKFLOWS,
  atomicBin,
  binaryEnv,
  fmt,
  loadAverage,
  median,
  readNdjson,
  removeTempDir,
  runTimed,
  spawnTracked,
  spread,
  startFakeProvider,
  tempDir,
  type Bench,
  type Result,
} from "./lib.ts";

const TURNS = 100;
const FEW = 10;
const OUTPUT_BYTES = 200 * 1024;
const REPS = 5;
const RESUME_TARGET_MS = 1_000;
const GROWTH_TARGET = 0.05;
const COMMAND = `head -c ${OUTPUT_BYTES} /dev/zero | tr '\\0' x`;

interface Recorded {
  runId: string;
  /** Bytes of the run's event payloads in the journal. */
  rowBytes: number;
  /** atomic.db and its WAL, in bytes, after the run. */
  fileBytes: number;
  /** The home's artifacts (transcripts, conversations, raw events), in bytes. */
  artifactBytes: number;
}

async function record(bin: string, env: Record<string, string>, home: string, turns: number): Promise<Recorded> {
  const proc = spawnTracked(
    [bin, "run", join(WORKFLOWS, "agents.ts"), "--input", `n=${turns}`, "--input", `prompt=bash:${COMMAND}`, "--input", "same=true", "--input", "mode=sequential", "--input", "gate=true", "--workers", "1", "--json"],
    { env, stdout: "pipe", stderr: "pipe" },
  );
  let runId = "";
  let status = "";
  const stderr = new Response(proc.stderr as ReadableStream).text();
  await readNdjson(proc.stdout as ReadableStream<Uint8Array>, (e) => {
    if (e.type === "run_started" && e.parentId === null) runId = String(e.runId);
    if (e.type === "run_ended" && e.runId === runId) status = String(e.status);
  });
  await proc.exited;
  if (status !== "failed" || !runId) throw new Error(`the ${turns}-turn run ended ${status || "without a run_ended"}, expected failed at its gate: ${(await stderr).slice(-800)}`);
  const db = new Database(join(home, "atomic.db"), { readonly: true });
  try {
    const row = db.query("select coalesce(sum(length(payload)), 0) as bytes from events where run_id = ?").get(runId) as { bytes: number };
    return { runId, rowBytes: row.bytes, fileBytes: journalFileBytes(home), artifactBytes: treeBytes(join(home, "artifacts")) };
  } finally {
    db.close();
  }
}

function journalFileBytes(home: string): number {
  return ["atomic.db", "atomic.db-wal"].reduce((sum, f) => sum + (existsSync(join(home, f)) ? statSync(join(home, f)).size : 0), 0);
}

function treeBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  let sum = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) if (e.isFile()) sum += statSync(join(e.parentPath, e.name)).size;
  return sum;
}

async function resume(bin: string, env: Record<string, string>, runId: string): Promise<number> {
  const r = await runTimed([bin, "resume", runId, "--quiet"], { env, capture: true });
  if (r.code !== 1 || !/gate is closed/.test(r.stderr)) throw new Error(`atomic resume ${runId} exited ${r.code}, expected to fail at its gate: ${r.stderr.slice(-500)}`);
  return r.ms;
}

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const server = await startFakeProvider();
  // One home per run, so each journal's files hold one run.
  const homes = { few: tempDir("atomic-bench-loop-few-"), many: tempDir("atomic-bench-loop-many-") };
  try {
    const envs = {
      few: binaryEnv(homes.few, { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-bench", ATOMIC_BENCH_GATE: "closed" }),
      many: binaryEnv(homes.many, { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-bench", ATOMIC_BENCH_GATE: "closed" }),
    };
    for (const home of Object.values(homes)) writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
    const load = loadAverage();
    const few = await record(bin, envs.few, homes.few, FEW);
    const many = await record(bin, envs.many, homes.many, TURNS);
    await resume(bin, envs.few, few.runId); // warm-up: the binary's pages in the page cache
    const samples = { few: [] as number[], many: [] as number[] };
    for (let i = 0; i < REPS; i++) {
      samples.few.push(await resume(bin, envs.few, few.runId));
      samples.many.push(await resume(bin, envs.many, many.runId));
    }
    const ms = median(samples.many);
    const rowsPerTurn = (many.rowBytes - few.rowBytes) / (TURNS - FEW);
    const filesPerTurn = (many.fileBytes - few.fileBytes) / (TURNS - FEW);
    const growth = Math.max(rowsPerTurn, filesPerTurn) / OUTPUT_BYTES;
    return [
      {
        bench: "agent-loop",
        label: `resume of a ${TURNS}-turn agent loop (${fmt(OUTPUT_BYTES / 1024, 0)} KB of tool output per turn), whole \`atomic resume\``,
        value: ms,
        unit: "ms",
        baseline: { label: `the same resume of a ${FEW}-turn loop`, value: median(samples.few), unit: "ms" },
        ratio: { value: ms / RESUME_TARGET_MS, meaning: `resume ÷ ${fmt(RESUME_TARGET_MS, 0)} ms` },
        target: { text: `resume <= ${fmt(RESUME_TARGET_MS, 0)} ms (ratio <= 1)`, ok: ms <= RESUME_TARGET_MS },
        notes: [`${TURNS} turns: ${spread(samples.many)}`, `${FEW} turns: ${spread(samples.few)}`, `load average before ${load}, after ${loadAverage()} (2 CPUs, shared)`],
      },
      {
        bench: "agent-loop",
        label: "journal growth per agent turn (largest of the run's rows and the database files)",
        value: Math.max(rowsPerTurn, filesPerTurn),
        unit: "bytes",
        baseline: { label: "tool output per turn (in the stage's artifacts)", value: OUTPUT_BYTES, unit: "bytes" },
        ratio: { value: growth, meaning: "journal bytes per turn ÷ tool output per turn" },
        target: { text: `ratio <= ${GROWTH_TARGET}`, ok: growth <= GROWTH_TARGET },
        notes: [
          `event payloads: ${fmt(rowsPerTurn, 0)} bytes per turn (${fmt(few.rowBytes / 1024, 1)} KiB for ${FEW} turns, ${fmt(many.rowBytes / 1024, 1)} KiB for ${TURNS})`,
          `artifacts: ${fmt((many.artifactBytes - few.artifactBytes) / (TURNS - FEW) / 1024, 1)} KiB per turn (the model sees at most 32 KiB of a tool's output)`,
          `atomic.db + WAL: ${fmt(filesPerTurn, 0)} bytes per turn (${fmt(few.fileBytes / 1024, 0)} KiB, ${fmt(many.fileBytes / 1024, 0)} KiB; pages, indexes and the WAL's slack included)`,
        ],
      },
    ];
  } finally {
    server.stop();
    removeTempDir(homes.few);
    removeTempDir(homes.many);
  }
}

const bench: Bench = {
  name: "agent-loop",
  title: `a ${TURNS}-turn agent loop with ${OUTPUT_BYTES / 1024} KB of tool output per turn: resume time, journal bytes per turn`,
  run,
};

export default bench;
