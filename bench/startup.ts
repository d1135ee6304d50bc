/**
 * Startup: `dist/atomic --help` against a bare `bun -e 0`
 * (node_modules/.bin/bun), alternating, spawn to exit.
 * Target: median at most 10x the bare runtime's median.
 */

import { BUN, atomicBin, median, runTimed, settle, spread, type Bench, type Result } from "./lib.ts";

const REPS = 15;
const TARGET = 10;

const bench: Bench = {
  name: "startup",
  title: "dist/atomic --help vs bun -e 0",
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const env: Record<string, string> = { ...(process.env as Record<string, string>), NO_COLOR: "1" };
    delete env.NODE_ENV;
    await runTimed([bin, "--help"], { env });
    await runTimed([BUN, "-e", "0"], { env });
    const help: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < REPS; i++) {
      settle();
      bare.push((await runTimed([BUN, "-e", "0"], { env })).ms);
      settle();
      const r = await runTimed([bin, "--help"], { env });
      if (r.code !== 0) throw new Error(`dist/atomic --help exited ${r.code}`);
      help.push(r.ms);
    }
    const ratio = median(help) / median(bare);
    return [
      {
        bench: "startup",
        label: "startup of dist/atomic --help",
        value: median(help),
        unit: "ms",
        baseline: { label: "bun -e 0 (node_modules/.bin/bun)", value: median(bare), unit: "ms" },
        ratio: { value: ratio, meaning: "--help ÷ bun -e 0" },
        target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
        notes: [`--help: ${spread(help)}`, `bun -e 0: ${spread(bare)}`],
      },
    ];
  },
};

export default bench;
