/**
 * The commands a user types, through the real binary: run (text, --json,
 * --quiet), runs, show, logs (one stage, --follow on a live run),
 * workflows, version and help, NO_COLOR in a real terminal, run-id
 * prefixes, and workflow files anywhere on disk.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ROOT, lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import {
  ANSI,
  HAS_SCRIPT,
  SGR,
  cleanupNow,
  cleanupWhenIdle,
  e2eTest,
  fixture,
  listRuns,
  makeTempDir,
  parseNdjson,
  runInPty,
  startedRunId,
} from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const TYPED = fixture("typed.ts");
const GOOD_INPUTS = ["--input", "count=3", "--input", "level=high", "--input", "label=hi"];
const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;

/** A small directory for examples/review.ts to look at: 3 files, one .ts file of 2 lines. */
function reviewTarget(): string {
  const dir = makeTempDir();
  writeFileSync(join(dir, "a.txt"), "a\n");
  mkdirSync(join(dir, "sub"));
  writeFileSync(join(dir, "sub", "b.txt"), "b\n");
  writeFileSync(join(dir, "code.ts"), "export const x = 1;\nexport const y = 2;\n");
  return dir;
}

e2eTest("run examples/review.ts end to end, then runs, show, logs and id prefixes", async () => {
  const home = makeTempDir();
  const target = reviewTarget();
  const run = await runAtomic(["run", "examples/review.ts", "--input", `dir=${target}`], { home });
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  const id = startedRunId(run.stdout);
  expect(run.stdout).toContain(`run ${id} completed`);
  expect(run.stdout).toContain('"files": 3');
  expect(run.stdout).toContain('"summary": "files=3 lines=2"');
  for (const stage of ["list", "count-lines", "disk", "report"]) expect(run.stdout).toMatch(new RegExp(`stage ${stage} completed`));
  expect(run.stdout).not.toMatch(ANSI);

  // runs: text and --json list the root run only
  const runs = await runAtomic(["runs"], { home });
  expect(runs.code).toBe(0);
  expect(runs.stdout).toMatch(/^RUN\s+STATUS\s+WORKFLOW\s+ORIGIN\s+STARTED\s+DURATION/);
  expect(runs.stdout).toMatch(new RegExp(`^${id}\\s+completed\\s+review\\s`, "m"));
  const listed = await listRuns(home);
  expect(listed).toHaveLength(1);
  expect(listed[0]).toMatchObject({ id, status: "completed", workflowName: "review", outputs: { files: 3, summary: "files=3 lines=2" } });

  // show: text
  const show = await runAtomic(["show", id], { home });
  expect(show.code).toBe(0);
  expect(show.stdout).toMatch(new RegExp(`^review ${id}$`, "m"));
  expect(show.stdout).toMatch(/^status\s+completed$/m);
  expect(show.stdout).toMatch(/^outputs\s+\{"files":3,"summary":"files=3 lines=2"\}$/m);
  for (const stage of ["list", "count-lines", "disk"]) expect(show.stdout).toMatch(new RegExp(`completed ${stage} #\\S+ exit 0 \\S+`));
  expect(show.stdout).toMatch(/completed child summarize/);
  expect(show.stdout).toMatch(/completed report #0 exit 0/);

  // show --json: stages with status, timings and outputs
  const showJson = await runAtomic(["show", id, "--json"], { home });
  expect(showJson.code).toBe(0);
  const report = JSON.parse(showJson.stdout) as {
    status: string;
    run: { outputs: unknown };
    steps: { kind: string; name: string; status: string; startedAt: number; endedAt: number; exitCode?: number; child?: { steps: { name: string; status: string }[] } }[];
  };
  expect(report.status).toBe("completed");
  expect(report.run.outputs).toEqual({ files: 3, summary: "files=3 lines=2" });
  const stages = report.steps.filter((s) => s.kind === "stage");
  expect(stages.map((s) => s.name).sort()).toEqual(["count-lines", "disk", "list"]);
  for (const s of report.steps) {
    expect(s.status).toBe("completed");
    expect(typeof s.startedAt).toBe("number");
    expect(s.endedAt).toBeGreaterThanOrEqual(s.startedAt);
  }
  for (const s of stages) expect(s.exitCode).toBe(0);
  expect(report.steps.find((s) => s.kind === "child")?.child?.steps).toMatchObject([{ name: "report", status: "completed" }]);

  // logs: every stage with a [stage] prefix; --stage: that stage's stdout, unprefixed
  const logs = await runAtomic(["logs", id], { home });
  expect(logs.code).toBe(0);
  expect(logs.stdout).toContain(`[list] ${target}/a.txt`);
  expect(logs.stdout).toContain("[count-lines] 2");
  expect(logs.stdout).toContain("[summarize/report] files=3 lines=2");
  const list = await runAtomic(["logs", id, "--stage", "list"], { home });
  expect(list.code).toBe(0);
  expect(list.stdout.trim().split("\n").sort()).toEqual([`${target}/a.txt`, `${target}/code.ts`, `${target}/sub/b.txt`]);
  const report2 = await runAtomic(["logs", id, "--stage", "summarize/report"], { home });
  expect(report2.stdout).toBe("files=3 lines=2\n");
  const logsJson = await runAtomic(["logs", id, "--stage", "count-lines", "--json"], { home });
  expect(parseNdjson(logsJson.stdout)).toEqual([{ stage: "count-lines", stream: "stdout", line: "2" }]);

  // a unique prefix of the id works (any case); a prefix shared only with its own child run means the root
  const prefix = id.slice(0, 12);
  const byPrefix = await runAtomic(["show", prefix.toUpperCase()], { home });
  expect(byPrefix.code).toBe(0);
  expect(byPrefix.stdout).toContain(`review ${id}`);
  const logsByPrefix = await runAtomic(["logs", prefix, "--stage", "count-lines"], { home });
  expect(logsByPrefix.stdout).toBe("2\n");
  const shared = await runAtomic(["show", id.slice(0, 1)], { home });
  expect(shared.code).toBe(0);
  expect(shared.stdout).toContain(`review ${id}`);
});

e2eTest("run --json prints NDJSON events and a final result line", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", TYPED, ...GOOD_INPUTS, "--json"], { home });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const lines = r.stdout.split("\n").filter(Boolean);
  const events = lines.map((l) => JSON.parse(l) as Record<string, unknown>); // every line parses
  const types = events.map((e) => e.type);
  expect(types[0]).toBe("run_started");
  expect(types).toContain("step_started");
  expect(types).toContain("step_ended");
  expect(types).toContain("run_ended");
  expect(events.find((e) => e.type === "step_ended")).toMatchObject({ kind: "stage", name: "say", status: "completed" });
  const result = events.at(-1)!;
  expect(result).toMatchObject({
    type: "result",
    status: "completed",
    exitCode: 0,
    outputs: { count: 3, level: "high", label: "hi", loud: false, said: "hi x3" },
  });
  expect(result.runId).toBe(events[0]!.runId);
});

e2eTest("run --quiet prints only the outputs", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", TYPED, ...GOOD_INPUTS, "--input", "loud=yes", "--quiet"], { home });
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout)).toEqual({ count: 3, level: "high", label: "hi", loud: true, said: "hi x3" });
});

e2eTest("logs --follow prints a live stage's lines as they come and ends with the run", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const env = { E2E_DIR: dir };
  const run = spawnAtomic(["run", fixture("talks.ts")], { home, env });
  const runOut = lineWatcher(run.stdout);
  const id = startedRunId(await runOut.waitFor(/^started run /));

  const follow = spawnAtomic(["logs", id, "--follow"], { home });
  const followOut = lineWatcher(follow.stdout);
  await followOut.waitFor(/^\[talk\] line-1$/);
  // the stage is still waiting for us: line-2 cannot have been printed
  expect(followOut.lines).not.toContain("[talk] line-2");
  expect(follow.exitCode).toBeNull();

  writeFileSync(join(dir, "go"), "");
  await followOut.waitFor(/^\[talk\] line-2$/);
  expect(await follow.exited).toBe(0);
  expect(await run.exited).toBe(0);
  expect(followOut.lines.filter((l) => l.startsWith("[talk]"))).toEqual(["[talk] line-1", "[talk] line-2"]);
  expect(await new Response(follow.stderr).text()).toBe("");
});

e2eTest("workflows lists .atomic/workflows/ of the cwd; --inputs lists a file's inputs; run by name", async () => {
  const home = makeTempDir();
  const cwd = makeTempDir();
  const wfDir = join(cwd, ".atomic", "workflows");
  mkdirSync(wfDir, { recursive: true });
  cpSync(TYPED, join(wfDir, "typed.ts"));
  cpSync(fixture("fails.ts"), join(wfDir, "fails.ts"));
  cpSync(fixture("no-default.ts"), join(wfDir, "broken.ts"));
  writeFileSync(join(wfDir, "notes.txt"), "not a workflow\n");

  const text = await runAtomic(["workflows"], { home, cwd });
  expect(text.code).toBe(0);
  const rows = text.stdout.trim().split("\n");
  // the local files, then the builtins
  expect(rows[3]).toMatch(/^builtin workflows/);
  expect(rows.slice(4).map((r) => r.trim().split(/\s+/)[0])).toEqual(["adversarial-verification", "best-of-n", "classify-and-act", "fan-out-and-synthesize", "generate-and-filter", "goal", "loop-until-done", "open-claude-design", "ralph", "tournament"]);
  expect(rows[0]).toMatch(/^\.atomic\/workflows\/broken\.ts\s+cannot load: .*does not export a workflow/);
  expect(rows[1]).toMatch(/^\.atomic\/workflows\/fails\.ts\s+fails$/);
  expect(rows[2]).toMatch(/^\.atomic\/workflows\/typed\.ts\s+typed\s+Echo typed inputs$/);

  const json = await runAtomic(["workflows", "--json"], { home, cwd });
  expect(parseNdjson(json.stdout).filter((w) => !w.builtin)).toMatchObject([
    { file: ".atomic/workflows/broken.ts", name: null, error: expect.stringMatching(/default export/) },
    { file: ".atomic/workflows/fails.ts", name: "fails", error: null },
    { file: ".atomic/workflows/typed.ts", name: "typed", description: "Echo typed inputs", error: null },
  ]);

  const inputs = await runAtomic(["workflows", "--inputs", ".atomic/workflows/typed.ts"], { home, cwd });
  expect(inputs.code).toBe(0);
  expect(inputs.stdout).toBe(
    ["typed: Echo typed inputs", "  count: number", '  level: "low" | "high"', "  label: string", "  loud: boolean optional (default false)", ""].join("\n"),
  );
  const inputsJson = await runAtomic(["workflows", "--inputs", join(wfDir, "typed.ts"), "--json"], { home });
  expect(JSON.parse(inputsJson.stdout)).toEqual({
    name: "typed",
    description: "Echo typed inputs",
    inputs: [
      { name: "count", type: "number", required: true },
      { name: "level", type: '"low" | "high"', required: true },
      { name: "label", type: "string", required: true },
      { name: "loud", type: "boolean", required: false, default: false },
    ],
  });

  // a directory without .atomic/workflows says how to add some
  const empty = await runAtomic(["workflows"], { home, cwd: makeTempDir() });
  expect(empty.code).toBe(0);
  expect(empty.stdout).toMatch(/^no workflows in \.atomic\/workflows/);

  // `atomic run NAME` finds .atomic/workflows/NAME.ts
  const byName = await runAtomic(["run", "typed", ...GOOD_INPUTS, "--quiet"], { home, cwd });
  expect(byName.stderr).toBe("");
  expect(byName.code).toBe(0);
  expect(JSON.parse(byName.stdout)).toMatchObject({ said: "hi x3" });
});

e2eTest("version, --version, --help and a command's --help", async () => {
  const home = makeTempDir();
  const [version, dashVersion, versionJson, help, helpWord, runHelp] = await Promise.all([
    runAtomic(["version"], { home }),
    runAtomic(["--version"], { home }),
    runAtomic(["version", "--json"], { home }),
    runAtomic(["--help"], { home }),
    runAtomic([], { home }),
    runAtomic(["run", "--help"], { home }),
  ]);
  expect(version).toEqual({ code: 0, stdout: `${VERSION}\n`, stderr: "" });
  expect(dashVersion).toEqual({ code: 0, stdout: `${VERSION}\n`, stderr: "" });
  expect(JSON.parse(versionJson.stdout)).toMatchObject({ version: VERSION });
  for (const h of [help, helpWord]) {
    expect(h.code).toBe(0);
    expect(h.stdout).toContain("USAGE\n  atomic <command> [options]");
    for (const cmd of ["run", "resume", "runs", "show", "logs", "cancel", "workflows", "version"]) {
      expect(h.stdout).toMatch(new RegExp(`^  ${cmd}\\s+\\S`, "m"));
    }
    expect(h.stdout).toContain("Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked, 4 cancelled, 5 skipped, 130 interrupted.");
    expect(h.stdout).not.toContain("--internal");
  }
  expect(runHelp.code).toBe(0);
  expect(runHelp.stdout).toContain("--input");
  expect(runHelp.stdout).toContain("--inputs-json");
  expect(runHelp.stdout).toContain("--lease-ms");
  expect(runHelp.stdout).not.toContain("inputsJson"); // the help names the flags the parser accepts
  expect(runHelp.stdout).toContain("GLOBAL OPTIONS");
  expect(runHelp.stdout).not.toMatch(ANSI);
  // none of these touched the home
  expect(existsSync(join(home, "atomic.db"))).toBe(false);
});

e2eTest("a workflow file anywhere on disk imports atomic and a relative helper", async () => {
  const home = makeTempDir();
  const dir = makeTempDir("atomic-user-wf-");
  cpSync(fixture("anywhere"), dir, { recursive: true });
  for (let d = dir; d !== dirname(d); d = dirname(d)) expect(existsSync(join(d, "node_modules"))).toBe(false);

  const r = await runAtomic(["run", join(dir, "main.ts"), "--input", "who=ada"], { home, cwd: "/" });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(r.stdout).toContain('"greeting": "hello ada"');
  expect(r.stdout).toContain('"viaV": true');
  const inputs = await runAtomic(["workflows", "--inputs", "main.ts"], { home, cwd: dir });
  expect(inputs.stdout).toBe("anywhere\n  who: string\n");
});

if (HAS_SCRIPT) {
  e2eTest("in a terminal: colours by default, none with NO_COLOR or --no-color, no escapes with TERM=dumb", async () => {
    const home = makeTempDir();
    const seeded = await runAtomic(["run", TYPED, ...GOOD_INPUTS], { home });
    expect(seeded.code).toBe(0);
    const id = startedRunId(seeded.stdout);

    // the terminal is real: without NO_COLOR the same commands are coloured
    const coloured = await runInPty(["runs"], { home });
    expect(coloured.code).toBe(0);
    expect(coloured.stdout).toMatch(SGR);

    const noColor = { NO_COLOR: "1" };
    const results = await Promise.all([
      runInPty(["runs"], { home, env: noColor }),
      runInPty(["show", id], { home, env: noColor }),
      runInPty(["run", TYPED, ...GOOD_INPUTS], { home, env: noColor }),
      runInPty(["run", fixture("fails.ts")], { home, env: noColor }),
      runInPty(["show", "nosuchrun"], { home, env: noColor }),
      runInPty(["--help"], { home, env: noColor }),
      runInPty(["run", "--help"], { home, env: noColor }),
      runInPty(["runs", "--no-color"], { home }),
      runInPty(["show", id, "--no-color"], { home }),
    ]);
    for (const r of results) {
      expect(r.stdout).toMatch(/\S/);
      expect(r.stdout).not.toMatch(SGR);
    }
    expect(results[2]!.code).toBe(0);
    expect(results[3]!.code).toBe(1);
    expect(results[4]!.code).toBe(2);

    // a dumb terminal gets plain lines, not the redrawn tree: no colours and no cursor movement
    // (review.ts sleeps 200 ms, long enough for the tree to have been redrawn)
    const dumb = await runInPty(["run", join(ROOT, "examples", "review.ts"), "--input", `dir=${reviewTarget()}`], { home, env: { TERM: "dumb" } });
    expect(dumb.code).toBe(0);
    expect(dumb.stdout).toMatch(/started run \S+ \(review\)/);
    expect(dumb.stdout).not.toMatch(ANSI);
  });
}

e2eTest("help reads like a CLI: USAGE atomic <command>, aligned options, defaults once, an example per command; --version --json", async () => {
  const home = makeTempDir();
  const top = await runAtomic(["--help"], { home });
  // The Postgres journal is offered, with where its password comes from.
  expect(top.stdout).toMatch(/^  --journal URL +a shared Postgres journal, postgres:\/\/user@host:5432\/db/m);
  const versionJson = await runAtomic(["--version", "--json"], { home });
  expect(versionJson.code).toBe(0);
  expect(JSON.parse(versionJson.stdout)).toMatchObject({ version: VERSION });
  const commands = [...top.stdout.matchAll(/^ {2}([a-z]+) {2,}\S/gm)].map((m) => m[1]!).filter((c) => !c.startsWith("-"));
  expect(commands).toContain("run");
  expect(commands.length).toBeGreaterThanOrEqual(16);
  for (const name of commands) {
    const r = await runAtomic([name, "--help"], { home });
    expect({ name, code: r.code, stderr: r.stderr }).toEqual({ name, code: 0, stderr: "" });
    const text = r.stdout;
    expect(text).toMatch(new RegExp(`^USAGE\\n {2}atomic ${name}( [A-Z\\[][A-Z|\\]…]*)*( \\[options\\])?$`, "m"));
    expect(text).toMatch(/^EXAMPLES\n {2}atomic \S/m);
    for (const example of text.split("EXAMPLES\n")[1]!.split("\n").filter(Boolean)) expect(example).toMatch(new RegExp(`^ {2}(atomic (--version|${name}\\b|\\S+ .*--${name}\\b)|\\S+ .*-- atomic ${name}\\b)`)); // or another command's flag named for it (run --tui), or a program that starts it (claude mcp add … -- atomic mcp)
    expect(text).not.toContain("(Default:"); // citty's second copy of a default
    expect(text).toContain("  --journal URL ");
    expect(text).not.toMatch(/--[a-z]+[A-Z]/); // flags in kebab case, as the parser takes them
    expect(text).not.toMatch(/^\s+--no-\S+\s*$/m); // no bare --no-x line without a description
    // Options and global options: one column of flags, descriptions starting at one column.
    const rows = text.split("\n").filter((l) => /^ {2}-\S*( \S+)* {2,}\S/.test(l));
    expect(rows.length).toBeGreaterThan(3);
    const starts = new Set(rows.map((l) => /^ {2}-\S*( \S+)* {2,}/.exec(l)![0].length));
    expect({ name, starts: [...starts] }).toEqual({ name, starts: [...starts].slice(0, 1) });
  }
  const run = await runAtomic(["run", "--help"], { home });
  expect(run.stdout).toMatch(/^ {2}--lease-ms MS +lease timeout in ms \(default 30000\)$/m);
  expect(run.stdout.match(/default 30000/g)).toHaveLength(2); // --lease-ms and --work-lease-ms, each once
  const logs = await runAtomic(["logs", "--help"], { home });
  expect(logs.stdout).toMatch(/^ {2}--no-stderr +leave stderr out/m);
  expect(logs.stdout).toMatch(/^ {2}-f, --follow +keep printing/m);
});
