/**
 * The CPU a test file costs, exactly and whatever else the machine runs:
 * `bun scripts/test-cpu.ts FILE...` runs `bun test FILE` once per file in a
 * cgroup v1 cpuacct group of its own (root only; /sys/fs/cgroup/cpuacct),
 * which counts every process the test starts, also the daemonized and
 * detached ones (`atomic serve`, Chromium, the agent CLIs, Postgres), and
 * prints its CPU-seconds and wall-seconds.
 *
 * It also splits the CPU by process kind (bun test itself, dist/atomic,
 * Chromium, the agent CLIs, Postgres, tmux and shells, other) by reading
 * /proc/PID/stat of the group's processes every 100 ms: a process's last
 * reading before it exits is what it is counted for, so a process shorter
 * than a reading (or its last 100 ms) is missed; the rest of the group's
 * total is printed as "unseen". `ATOMIC_CPU_CGROUP` names the group's
 * prefix (default `atomic-test-cpu`); the group is removed afterwards.
 *
 * docs/design/testing.md "Where the suite's time goes" holds the figures.
 */

import { mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const CPUACCT = "/sys/fs/cgroup/cpuacct";
const TICK = 100; // clock ticks a second on Linux (USER_HZ)

/** The kind a process is counted under, from its command line. */
function kind(cmdline: string): string {
  if (/chrom/.test(cmdline)) return `chromium${/--type=([a-z-]+)/.exec(cmdline)?.[1]?.replace(/^/, " ") ?? ""}`;
  if (/(^|\/)atomic(\0|$)|dist\/atomic/.test(cmdline)) return "atomic";
  // bun test before postgres: a test file's name may hold "postgres" (test/recovery/postgres-outage.test.ts).
  if (/(^|\/)bun(\.exe)?\0test/.test(cmdline)) return "bun test";
  if (/postgres|initdb|pg_ctl/.test(cmdline)) return "postgres";
  if (/test\/agents|opencode|\bpi\b|claude|codex|gemini/.test(cmdline)) return "agent CLIs";
  if (/(^|\/)bun(\.exe)?\0/.test(cmdline)) return "bun (helpers)";
  if (/tmux|(^|\/)(ba|da|z)?sh\0|bwrap|flock|cat\0/.test(cmdline)) return "tmux, shells";
  return "other";
}

function readTicks(pid: string): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]); // utime, stime
  } catch {
    return undefined;
  }
}

async function measure(file: string, prefix: string): Promise<void> {
  const group = join(CPUACCT, `${prefix}-${process.pid}-${Date.now()}`);
  mkdirSync(group);
  const seen = new Map<string, { kind: string; ticks: number; cmdline: string }>();
  const started = performance.now();
  try {
    const proc = Bun.spawn(["sh", "-c", 'echo $$ > "$0/tasks" && exec "$1" test --timeout 120000 "$2"', group, process.execPath, file], {
      stdout: "pipe",
      stderr: "pipe",
      env: process.env,
    });
    const output = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
    let done = false;
    void proc.exited.then(() => (done = true));
    while (!done) {
      for (const pid of readFileSync(join(group, "cgroup.procs"), "utf8").split("\n").filter(Boolean)) {
        const ticks = readTicks(pid);
        if (ticks === undefined) continue;
        const known = seen.get(pid);
        if (known) known.ticks = Math.max(known.ticks, ticks);
        else {
          let cmdline = "";
          try {
            cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
          } catch {}
          seen.set(pid, { kind: kind(cmdline), ticks, cmdline });
        }
      }
      await Promise.race([Bun.sleep(TICK), proc.exited]); // a sampling interval, not a wait on another process
    }
    const wall = (performance.now() - started) / 1000;
    // Processes that outlive the test (a browser's watcher, a detached server) are counted until they exit, 15 s at most.
    for (let i = 0; i < 150 && readFileSync(join(group, "cgroup.procs"), "utf8").trim() !== ""; i++) await Bun.sleep(TICK);
    const left = readFileSync(join(group, "cgroup.procs"), "utf8").trim().split("\n").filter(Boolean);
    if (left.length > 0) console.log(`${file}: ${left.length} process(es) still running 15 s after the test: ${left.join(" ")}`);
    const total = Number(readFileSync(join(group, "cpuacct.usage"), "utf8")) / 1e9;
    const [out, err] = await output;
    const summary = (out + err).split("\n").filter((l) => /^\s*\d+ (pass|fail)$/.test(l)).map((l) => l.trim()).join(", ");
    const byKind = new Map<string, number>();
    for (const { kind: k, ticks } of seen.values()) byKind.set(k, (byKind.get(k) ?? 0) + ticks / TICK);
    const counted = [...byKind.values()].reduce((a, b) => a + b, 0);
    const parts = [...byKind.entries()].sort((a, b) => b[1] - a[1]).map(([k, s]) => `${k} ${s.toFixed(1)}`);
    console.log(`${file}: ${total.toFixed(1)} CPU-s, ${wall.toFixed(1)} s wall (${summary}); ${parts.join(", ")}, unseen ${Math.max(0, total - counted).toFixed(1)}`);
    if (process.env.ATOMIC_CPU_DETAIL) {
      // every process of more than 0.3 CPU-s, by command line
      for (const p of [...seen.values()].filter((p) => p.ticks > 30).sort((a, b) => b.ticks - a.ticks))
        console.log(`  ${(p.ticks / TICK).toFixed(1)}  ${p.kind}  ${p.cmdline.replaceAll("\0", " ").slice(0, 160)}`);
    }
    if (/\d+ fail/.test(summary) && !/ 0 fail/.test(summary)) console.log((out + err).split("\n").filter((l) => /^\(fail\)/.test(l)).join("\n"));
  } finally {
    // A process the test left behind is moved out so the group can go.
    for (const pid of readFileSync(join(group, "cgroup.procs"), "utf8").split("\n").filter(Boolean)) {
      try {
        writeFileSync(join(CPUACCT, "cgroup.procs"), pid);
      } catch {}
    }
    rmdirSync(group);
  }
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: bun scripts/test-cpu.ts TEST-FILE... (as root: it makes a cpuacct cgroup per file)");
  process.exit(2);
}
if (readdirSync(CPUACCT).length === 0) {
  console.error(`no cgroup v1 cpuacct hierarchy at ${CPUACCT}: this script needs one (and root)`);
  process.exit(2);
}
for (const file of files) await measure(file, process.env.ATOMIC_CPU_CGROUP || "atomic-test-cpu");
