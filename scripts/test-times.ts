/**
 * The end of scripts/test.sh: how long each pass's test files took (wall
 * time, from bun's JUnit report of that pass), the slowest first. These are
 * the figures the lanes are balanced with (docs/design/testing.md "The
 * project's suite: lanes"): a file's wall time in the run itself, on the
 * machine that ran it, beside whatever ran in the other lane.
 *
 * Usage: bun scripts/test-times.ts REPORT.xml ... (test.sh names each
 * report for its pass: main, lane, postgres, postgres-browser; a pass that
 * did not finish wrote none). The reports stay where test.sh put them
 * (test-artifacts/times/) for a closer look: every file's and every test's
 * time.
 */

import { readFileSync } from "node:fs";
import { basename } from "node:path";

const SHOWN = 12;

/** Each test file of a JUnit report with its wall time in seconds (bun writes one top-level testsuite per file). */
async function fileTimes(report: string): Promise<{ file: string; seconds: number }[]> {
  const rows: { file: string; seconds: number }[] = [];
  const rewriter = new HTMLRewriter().on("testsuites > testsuite", {
    element(e) {
      rows.push({ file: e.getAttribute("file") ?? e.getAttribute("name") ?? "?", seconds: Number(e.getAttribute("time") ?? 0) });
    },
  });
  await rewriter.transform(new Response(readFileSync(report, "utf8"))).text();
  return rows.sort((a, b) => b.seconds - a.seconds);
}

for (const report of process.argv.slice(2)) {
  const pass = basename(report, ".xml");
  const rows = await fileTimes(report);
  const total = rows.reduce((sum, r) => sum + r.seconds, 0);
  console.log(`${pass}: ${rows.length} files, ${total.toFixed(0)} s; the slowest:`);
  for (const r of rows.slice(0, SHOWN)) console.log(`  ${r.seconds.toFixed(1).padStart(7)} s  ${r.file}`);
}
