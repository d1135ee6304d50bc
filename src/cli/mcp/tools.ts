/**
 * The tools of `atomic mcp`: what a coding agent operating atomic may do,
 * each a thin mapping onto one action of the Operator
 * (src/service/operator.ts), the code the page and the API use too.
 *
 * Every tool has a valibot schema for its arguments (sent to the client as
 * JSON Schema, checked on each call) and the MCP annotations a client uses
 * to decide what needs a person's approval: the reading tools are
 * `readOnlyHint`, `cancel_run` is `destructiveHint` (it stops running
 * stages and cannot be undone), the others change state without destroying
 * anything. A refused call answers `isError` with the CLI's sentence and
 * hint, never a stack trace.
 */

import * as v from "valibot";
import type { Operator } from "../../service/operator.ts";
import { RUN_ORIGINS } from "../../journal/run-origin.ts";

export interface ToolAnnotations {
  title: string;
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

export interface Tool<S extends v.GenericSchema = v.GenericSchema> {
  name: string;
  description: string;
  schema: S;
  annotations: ToolAnnotations;
  call(op: Operator, args: v.InferOutput<S>): Promise<unknown>;
}

const RUN = v.pipe(v.string(), v.minLength(1), v.description("run id, or a unique prefix of one"));
const run = v.object({ run: RUN });

function tool<S extends v.GenericSchema>(t: Tool<S>): Tool {
  return t as unknown as Tool;
}

const read = (title: string): ToolAnnotations => ({ title, readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false });
const change = (title: string, idempotent: boolean): ToolAnnotations => ({ title, readOnlyHint: false, destructiveHint: false, idempotentHint: idempotent, openWorldHint: false });

export const TOOLS: Tool[] = [
  tool({
    name: "list_runs",
    description: "List root runs, newest first, with status, stage counts, duration, cost and tags. Filter by status, origin and tags (every tag must match); page with limit and offset.",
    schema: v.object({
      status: v.optional(v.pipe(v.string(), v.description("running, completed, failed, cancelled, blocked, interrupted or awaiting_input"))),
      origin: v.optional(v.pipe(v.string(), v.description(`how runs came to be: ${RUN_ORIGINS.join(", ")}`))),
      tags: v.optional(v.pipe(v.record(v.string(), v.string()), v.description('runs with every one of these tags, e.g. {"team": "search"}'))),
      limit: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(500))),
      offset: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0))),
    }),
    annotations: read("List runs"),
    call: (op, a) => op.list(a),
  }),
  tool({
    name: "show_run",
    description: "One run: its status, inputs, outputs, error, totals (stages, attempts, tokens, cost) and every step with its status, attempts and position (child runs nested).",
    schema: run,
    annotations: read("Show a run"),
    call: (op, a) => op.show(a.run),
  }),
  tool({
    name: "read_transcript",
    description:
      "A stage's output: an agent's conversation (transcript.md) or a shell stage's stdout, and stderr, from byte offsets (at most 256 KiB each per call; ask again from `next` while `more` or `live`). `stage` is a name, a position (2.0.1) or a path through child runs (review/security).",
    schema: v.object({
      run: RUN,
      stage: v.pipe(v.string(), v.minLength(1), v.description("stage name, position or path")),
      attempt: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1))),
      stdout: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0), v.description("byte offset into stdout"))),
      stderr: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0), v.description("byte offset into stderr"))),
    }),
    annotations: read("Read a stage's transcript"),
    call: (op, a) => op.transcript(a.run, a.stage, a),
  }),
  tool({
    name: "list_workflows",
    description:
      "The workflows start_run can start by name, each with its inputs (name, type, required, default, range, description): the builtins and the files in .atomic/workflows/ of the directory atomic mcp runs in (a local file wins over a builtin of its name).",
    schema: v.object({}),
    annotations: read("List workflows"),
    call: async (op) => ({ workflows: await op.workflows() }),
  }),
  tool({
    name: "start_run",
    description:
      "Start a run of a builtin or registered workflow (or a file under a directory allowed by service.workflowDirs) with its inputs. Driven by the local service (atomic serve) when one runs, else by a detached process. With `id`, starting again with the same id and inputs returns the same run.",
    schema: v.object({
      workflow: v.pipe(v.string(), v.minLength(1), v.description("builtin or registered name, or an allowed path")),
      inputs: v.optional(v.record(v.string(), v.unknown())),
      id: v.optional(v.pipe(v.string(), v.description("your own run id (idempotent start)"))),
    }),
    annotations: change("Start a run", false),
    call: (op, a) => op.start({ workflow: a.workflow.trim(), inputs: a.inputs ?? {}, ...(a.id !== undefined ? { id: a.id } : {}) }),
  }),
  tool({
    name: "send_message",
    description:
      "Send a message to a stage of a run, as atomic send: `steer` (default) reaches the agent in its current turn, `followUp` after it, `interrupt` stops the turn; a shell stage gets it on stdin. Sticky messages also reach later attempts and stages of that name.",
    schema: v.object({
      run: RUN,
      stage: v.pipe(v.string(), v.minLength(1), v.description("stage name, path or pattern")),
      text: v.pipe(v.string(), v.minLength(1)),
      mode: v.optional(v.picklist(["steer", "followUp", "interrupt"])),
      sticky: v.optional(v.boolean()),
    }),
    annotations: change("Send a message to a stage", false),
    call: (op, a) => op.send(a.run, a),
  }),
  tool({
    name: "answer_question",
    description: "Answer a question a run asked (ctx.ask); the question ids are in show_run's steps and in atomic inbox. The first answer wins.",
    schema: v.object({ run: RUN, question: v.pipe(v.string(), v.minLength(1)), answer: v.string() }),
    annotations: change("Answer a question", true),
    call: (op, a) => op.answer(a.run, a),
  }),
  tool({
    name: "pause_run",
    description:
      "Pause a live run: no new step starts; running stages go on. With `stage` (a stage's path from the root run), that stage only: it starts no attempt, and an openai agent running it stops after its current turn (a CLI agent or shell attempt runs to its end; a retry waits). unpause_run lets it go on.",
    schema: v.object({ run: RUN, stage: v.optional(v.pipe(v.string(), v.minLength(1), v.description("a stage's path from the root run: pause that stage only"))) }),
    annotations: change("Pause a run or one stage", true),
    call: (op, a) => op.setControl(a.run, "pause", a.stage),
  }),
  tool({
    name: "unpause_run",
    description: "Let a paused run go on; with `stage`, let that paused stage go on.",
    schema: v.object({ run: RUN, stage: v.optional(v.pipe(v.string(), v.minLength(1), v.description("a paused stage's path from the root run"))) }),
    annotations: change("Unpause a run or one stage", true),
    call: (op, a) => op.setControl(a.run, "unpause", a.stage),
  }),
  tool({
    name: "cancel_run",
    description: "Cancel a run: its running stages are stopped and it cannot be resumed. Destructive.",
    schema: run,
    annotations: { ...change("Cancel a run", true), destructiveHint: true },
    call: (op, a) => op.setControl(a.run, "cancel"),
  }),
  tool({
    name: "resume_run",
    description: "Continue a crashed, interrupted, failed or blocked run, as atomic resume: recorded steps replay from the journal. Driven by the local service when one runs, else by a detached process.",
    schema: run,
    annotations: change("Resume a run", false),
    call: (op, a) => op.resume(a.run),
  }),
  tool({
    name: "rerun_run",
    description: "Start a new run of a run's workflow with its inputs, `inputs` changing some, as atomic rerun. The new run records which run it reruns.",
    schema: v.object({ run: RUN, inputs: v.optional(v.record(v.string(), v.unknown())) }),
    annotations: change("Rerun a run", false),
    call: (op, a) => op.rerun(a.run, a.inputs),
  }),
  tool({
    name: "fork_run",
    description:
      "Start a new run that reuses a run's recorded results before step `at` and goes live there, as atomic fork --at: `at` is a step's name or its position as show_run gives it (#3, #4.1.0).",
    schema: v.object({ run: RUN, at: v.pipe(v.string(), v.minLength(1), v.description("the step to go live at")) }),
    annotations: change("Fork a run from a step", false),
    call: (op, a) => op.fork(a.run, a.at),
  }),
];

/** Why arguments do not fit a tool's schema, in one sentence. */
export function argumentProblem(t: Tool, issues: readonly v.BaseIssue<unknown>[]): string {
  const first = issues[0]!;
  const path = first.path?.map((p) => String(p.key)).join(".");
  return `${t.name}: ${path ? `"${path}" ` : ""}${first.message.replace(/^Invalid /, "invalid ")}`;
}
