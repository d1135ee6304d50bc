/**
 * `atomic mcp` driven by the MCP SDK's own client over stdio, spawning
 * dist/atomic (issue 28): every tool once, against real runs of a
 * registered workflow (test/status/fixtures/interact.ts: two questions, a
 * shell stage reading a message on stdin, a stage waiting for a gate file)
 * driven by detached processes, as with no service running:
 *
 * - tools/list names every tool with its annotations (cancel_run is the
 *   destructive one, the reading tools are read-only);
 * - list_workflows, start_run (registered name, inputs), list_runs,
 *   show_run (questions), answer_question, send_message (reaches the shell
 *   stage's stdin), read_transcript, pause_run, unpause_run, cancel_run;
 * - resume_run continues a run whose driver was killed (SIGKILL), and the
 *   run completes;
 * - refusals are the CLI's sentences and hints (isError): an unknown run,
 *   an unknown workflow, resuming a completed run, arguments of the wrong
 *   type.
 */

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, atomicBin, environment, processesWithHome, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const home = makeTempDir();
const cwd = makeTempDir();
const gate = join(makeTempDir(), "gate");
let client: Client;

interface ToolResult {
  isError?: boolean;
  content: { type: string; text: string }[];
  structuredContent?: unknown;
}

async function call(name: string, args: Record<string, unknown> = {}): Promise<ToolResult> {
  return (await client.callTool({ name, arguments: args })) as ToolResult;
}

/** A tool's structured answer; the call must have succeeded. */
async function ok<T = Record<string, unknown>>(name: string, args: Record<string, unknown> = {}): Promise<T> {
  const r = await call(name, args);
  expect(r.isError ? r.content[0]!.text : "").toBe("");
  return r.structuredContent as T;
}

async function refused(name: string, args: Record<string, unknown>): Promise<string> {
  const r = await call(name, args);
  expect(r.isError).toBe(true);
  return r.content[0]!.text;
}

interface Shown {
  run: { id: string; status: string; outputs: unknown; holder?: { pid: number } };
  report: { questions?: { id: string; question: string }[]; steps: { name: string; status: string }[] };
}
const show = (run: string) => ok<Shown>("show_run", { run });
const stepStatus = async (run: string, name: string) => (await show(run)).report.steps.find((s) => s.name === name)?.status;

beforeAll(async () => {
  mkdirSync(join(cwd, ".atomic", "workflows"), { recursive: true });
  // Copied into the project's workflows folder; its gate helper's import is made absolute (the copy is elsewhere).
  const fixture = readFileSync(join(ROOT, "test", "status", "fixtures", "interact.ts"), "utf8").replace("../../helpers/gate.ts", join(ROOT, "test", "helpers", "gate.ts"));
  writeFileSync(join(cwd, ".atomic", "workflows", "interact.ts"), fixture);
  client = new Client({ name: "atomic-test", version: "1.0.0" });
  await client.connect(new StdioClientTransport({ command: atomicBin(), args: ["mcp"], cwd, env: environment({ home }), stderr: "inherit" }));
});

afterAll(async () => {
  writeFileSync(gate, "");
  await client?.close();
  // The detached drivers end with their runs (the gate is open, the rest completed or cancelled).
  await waitUntil(() => processesWithHome(home).length === 0, 30_000, "the runs' processes to end");
  removeTempDirs();
});

describe("atomic mcp", () => {
  test("tools/list: every tool, annotated", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      ["answer_question", "cancel_run", "fork_run", "list_runs", "list_workflows", "pause_run", "read_transcript", "rerun_run", "resume_run", "send_message", "show_run", "start_run", "unpause_run"].sort(),
    );
    const by = Object.fromEntries(tools.map((t) => [t.name, t]));
    expect(tools.filter((t) => t.annotations?.destructiveHint).map((t) => t.name)).toEqual(["cancel_run"]);
    for (const name of ["list_runs", "show_run", "read_transcript", "list_workflows"]) expect(by[name]!.annotations?.readOnlyHint).toBe(true);
    for (const name of ["start_run", "resume_run", "rerun_run", "fork_run", "cancel_run", "send_message"]) expect(by[name]!.annotations?.readOnlyHint).toBe(false);
    expect(by.show_run!.inputSchema.required).toEqual(["run"]);
  });

  test("start a registered workflow, answer its questions, message its shell stage, pause, unpause, cancel", async () => {
    const { workflows } = await ok<{ workflows: { name: string; source: string; inputs: { name: string; type: string; required: boolean }[] }[] }>("list_workflows");
    expect(workflows.filter((w) => w.source === "registered").map((w) => w.name)).toEqual(["interact"]);
    expect(workflows.find((w) => w.name === "interact")!.inputs.map((i) => [i.name, i.type, i.required])).toEqual([["gate", "string", false], ["skip", "boolean", false]]);
    expect(workflows.filter((w) => w.source === "builtin").length).toBeGreaterThan(0);

    const started = await ok<{ runId: string; created: boolean }>("start_run", { workflow: "interact", inputs: { gate } });
    expect(started.created).toBe(true);
    const id = started.runId;
    const listed = await ok<{ runs: { id: string; workflow: string }[] }>("list_runs", {});
    expect(listed.runs.map((r) => [r.id, r.workflow])).toContainEqual([id, "interact"]);
    expect((await ok<{ runs: unknown[] }>("list_runs", { tags: { team: "nobody" } })).runs).toEqual([]);
    expect((await ok<{ runs: { id: string }[] }>("list_runs", { origin: "api" })).runs.map((r) => r.id)).toContain(id);
    expect((await ok<{ runs: unknown[] }>("list_runs", { origin: "schedule" })).runs).toEqual([]);
    expect(await refused("list_runs", { origin: "page" })).toStartWith('error: origin must be one of schedule, api, cli, rerun, fork, recovery, got "page"');
    expect(await refused("list_runs", { tags: { "bad key": "x" } })).toStartWith('error: tag "bad key=x": tag key "bad key" must be');

    const question = async (text: string) =>
      waitUntil(async () => (await show(id)).report.questions?.find((q) => q.question === text), 30_000, `question ${text}`);
    expect((await ok("answer_question", { run: id, question: (await question("ship it?"))!.id, answer: "yes" })).status).toBe("answered");
    await ok("answer_question", { run: id.slice(0, 12), question: (await question("why?"))!.id, answer: "the tests pass" });

    await waitUntil(async () => (await stepStatus(id, "listen")) === "running", 30_000, "listen running");
    await ok("send_message", { run: id, stage: "listen", text: "hello over mcp" });
    await waitUntil(async () => (await stepStatus(id, "wait")) === "running", 30_000, "wait running");
    const t = await ok<{ stdout: { text: string }; live: boolean }>("read_transcript", { run: id, stage: "listen" });
    expect(t.stdout.text).toBe("listening\nheard: hello over mcp\n");

    // One stage only (atomic pause RUN STAGE): the run stays running, the report names the paused stage.
    expect(await ok("pause_run", { run: id, stage: "wait" })).toMatchObject({ runId: id, action: "pause", stage: "wait", result: "requested" });
    const pausedOnly = await ok<Shown & { report: { pausedStages?: string[] } }>("show_run", { run: id });
    expect([pausedOnly.run.status, pausedOnly.report.pausedStages]).toEqual(["running", ["wait"]]);
    expect(await refused("pause_run", { run: id, stage: "wiat" })).toBe(`error: run ${id} has no stage wiat: no stage of its workflow is named wiat\nhint: did you mean: wait`);
    await ok("unpause_run", { run: id, stage: "wait" });
    expect((await ok<Shown & { report: { pausedStages?: string[] } }>("show_run", { run: id })).report.pausedStages).toBeUndefined();
    expect(await refused("unpause_run", { run: id, stage: "wait" })).toBe(`error: stage wait of run ${id} is not paused\nhint: pause it with: atomic pause ${id} wait`);

    await ok("pause_run", { run: id });
    await waitUntil(async () => (await show(id)).run.status === "paused", 30_000, "paused");
    await ok("unpause_run", { run: id });
    await waitUntil(async () => (await show(id)).run.status === "running", 30_000, "running again");
    await ok("cancel_run", { run: id });
    await waitUntil(async () => (await show(id)).run.status === "cancelled", 30_000, "cancelled");
    expect(await refused("resume_run", { run: id })).toBe(`error: run ${id} was cancelled and cannot be resumed\nhint: start a new run with: atomic run <workflow file>`);
  }, 120_000);

  test("resume_run continues a run whose driver was killed; refusals are the CLI's", async () => {
    const { runId: id } = await ok<{ runId: string }>("start_run", { workflow: "interact", inputs: { gate, skip: true } });
    await waitUntil(async () => (await stepStatus(id, "wait")) === "running", 30_000, "wait running");
    const pid = (await show(id)).run.holder!.pid;
    process.kill(pid, "SIGKILL");
    await waitUntil(async () => (await show(id)).run.status === "crashed", 30_000, "crashed");
    const resumed = await ok<{ runId: string; drivenBy: string }>("resume_run", { run: id });
    expect(resumed).toMatchObject({ runId: id, drivenBy: "process" });
    writeFileSync(gate, "");
    await waitUntil(async () => (await show(id)).run.status === "completed", 30_000, "completed");
    expect(await refused("resume_run", { run: id })).toBe(`error: run ${id} already completed; there is nothing to resume\nhint: see its outputs with: atomic show ${id}`);

    // rerun (an input changed) and fork (live at a step): new runs that name where they came from
    const rerun = await ok<{ runId: string; from: string }>("rerun_run", { run: id, inputs: { skip: true } });
    expect(rerun.from).toBe(id);
    await waitUntil(async () => (await show(rerun.runId)).run.status === "completed", 30_000, "rerun completed");
    const fork = await ok<{ runId: string }>("fork_run", { run: rerun.runId, at: "wait" });
    await waitUntil(async () => (await show(fork.runId)).run.status === "completed", 30_000, "fork completed");
    expect((await show(fork.runId)).run).toMatchObject({ origin: { kind: "fork", runId: rerun.runId } });
    expect(await refused("fork_run", { run: id, at: "nope" })).toStartWith(`error: run ${id} has no step "nope"`);
    expect(await refused("rerun_run", { run: id, inputs: { skip: "maybe" } })).toStartWith('error: input "skip" ');

    expect(await refused("show_run", { run: "zzzzzzzzzz" })).toStartWith("error: no run with id zzzzzzzzzz");
    expect(await refused("start_run", { workflow: "nope" })).toStartWith('error: there is no builtin or registered workflow named "nope"');
    expect(await refused("list_runs", { limit: "ten" })).toStartWith('error: list_runs: "limit" ');
    expect(await refused("no_such_tool", {})).toStartWith('error: there is no tool "no_such_tool"');
  }, 120_000);
});
