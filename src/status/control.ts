/**
 * POST /api/runs/:id/control: pause, unpause or cancel a run from the page,
 * through the same code as `atomic pause|unpause|cancel` (the run's control
 * row, which its driver polls). POST /api/runs/:id/messages and /answers:
 * a message to a stage (with attachments as contents, copied into the
 * run's artifacts as `--attach` does: engine/attachments.ts) and an answer
 * to a ctx.ask question, through the
 * same code as `atomic send` and `atomic answer` (recorded in the journal;
 * a live driver is told through intercom when the home is known). POST
 * /api/runs/:id/stages/:stage/review: the verdict on a stage's diff, as
 * `atomic review` (engine/stage-review.ts). These
 * are the status server's only writes; everything else it does is reading.
 */

import { cancelRun } from "../engine/cancel.ts";
import { join } from "node:path";
import { attachmentContents, sendAttached } from "../engine/attachments.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";
import { loadConfig } from "../shared/config/load.ts";
import { newId } from "../shared/ids.ts";
import { answerPrompt, isDriven, notifyDriver, settledStates, type DeliveryView, type SendResult } from "../engine/messaging.ts";
import { setRunPaused, setStagePaused } from "../engine/pause.ts";
import { builtinSource } from "../engine/builtins.ts";
import { answerReview, type Verdict } from "../engine/stage-review.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";

export const CONTROL_ACTIONS = ["pause", "unpause", "cancel"] as const;
export type ControlAction = (typeof CONTROL_ACTIONS)[number];

export function isControlAction(value: unknown): value is ControlAction {
  return typeof value === "string" && (CONTROL_ACTIONS as readonly string[]).includes(value);
}

export interface ControlOutcome {
  runId: string;
  action: ControlAction;
  stage?: string;
  /** "requested": the driver will act on it; "cancelled": done here (nobody drove the run). */
  result: "requested" | "cancelled" | "ended_otherwise";
}

export interface AnswerOutcome {
  runId: string;
  question: string;
  status: "answered" | "exists";
  answer: string | null;
}

export interface StatusControl {
  /** `stage`: pause or unpause that stage only (its path from the root run), as `atomic pause RUN STAGE`. */
  control(run: RunRecord, action: ControlAction, stage?: string): Promise<ControlOutcome>;
  /**
   * Body `{ stage, text, mode?, sticky?, id?, attachments? }` (`attachments: [{ name, data }]`, data base64: copied
   * into the run's artifacts and delivered as `atomic send --attach` does). UsageErrors for bad input (httpStatusOf
   * maps their codes).
   */
  message(run: RunRecord, body: unknown): Promise<SendResult & { attachmentsDir?: string }>;
  /** The most bytes one attached file may have (`artifacts.maxAttachmentBytes`): the messages route's body may hold it. */
  readonly maxAttachmentBytes: number;
  /** Body `{ question, answer }`. */
  answer(run: RunRecord, body: unknown): Promise<AnswerOutcome>;
  /** The verdict on a stage's open review (ctx.review), as `atomic review`: body `{ approve: true }` or `{ comments: [{ file?, line?, text }] }`. */
  review(run: RunRecord, stage: string, body: unknown): Promise<AnswerOutcome>;
}

/** The HTTP status of a refused control, message or answer: 404 nothing to address, 409 not now, 400 bad input. */
export function httpStatusOf(code: string): 400 | 403 | 404 | 409 {
  // a home this server may only read (a viewer without write rights, a read-only mount)
  if (code === "storage_readonly") return 403;
  if (["no_such_stage", "no_match", "not_a_stage", "unknown_prompt", "unknown_run", "unknown_stage"].includes(code)) return 404;
  const notNow = ["stage_finished", "run_ended", "queue_full", "sticky_limit", "message_id_conflict", "already_answered", "prompt_closed", "no_review"];
  // pause, unpause and cancel (engine/pause.ts, engine/cancel.ts)
  if ([...notNow, "not_running", "not_root", "already_ended", "stage_ended", "not_paused"].includes(code)) return 409;
  return 400;
}

function field(body: unknown, key: string, type: "string" | "boolean", required: boolean): unknown {
  const value = body && typeof body === "object" && !Array.isArray(body) ? (body as Record<string, unknown>)[key] : undefined;
  if (value === undefined && !required) return undefined;
  if (typeof value !== type) {
    throw new UsageError("bad_body", `the body needs "${key}" as a ${type}${required ? "" : " (or leave it out)"}`, {
      hint: key === "question" || key === "answer" ? 'send {"question": "<id>", "answer": "..."}' : 'send {"stage": "review/security", "text": "...", "mode": "steer"}',
    });
  }
  return value;
}

/** A review's body read: `{ approve: true }`, or `{ comments: [{ file?, line?, text }] }`; anything else is one sentence. */
function verdictOf(body: unknown): Verdict {
  const b = body && typeof body === "object" && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
  const hint = 'send {"approve": true}, or {"comments": [{"file": "src/app.ts", "line": 12, "text": "handle the empty list"}]}';
  if (b.approve === true && b.comments === undefined) return { approve: true };
  if (b.approve === undefined && Array.isArray(b.comments)) {
    const comments = b.comments.map((c: unknown) => {
      const x = c && typeof c === "object" && !Array.isArray(c) ? (c as Record<string, unknown>) : undefined;
      const ok = x && typeof x.text === "string" && (x.file === undefined || (typeof x.file === "string" && x.file !== "")) && (x.line === undefined || (x.file !== undefined && Number.isSafeInteger(x.line) && (x.line as number) > 0));
      if (!ok) throw new UsageError("bad_body", "each comment is { text } or { file, line?, text } with a positive whole line number", { hint });
      return { ...(x.file !== undefined ? { file: x.file as string } : {}), ...(x.line !== undefined ? { line: x.line as number } : {}), text: x.text as string };
    });
    return { comments };
  }
  throw new UsageError("bad_body", "a review is an approval or a request for changes with comments", { hint });
}

/**
 * Control through the journal, as `opts.by` ("status-page" unless said: "tui"). Errors are UsageErrors (not_root,
 * not_running, already_ended, and those of messages and answers), and the journal's storage_readonly refusal first
 * on a home this process may only read. Attachments need `opts.home` (their copies go
 * under its artifacts).
 */
export function journalControl(journal: Journal, opts: { home?: string; by?: string } = {}): StatusControl {
  // The home's config.json sets the cap for every door (the page, the API, the tui, MCP), as for `atomic send`.
  const configured = opts.home !== undefined ? loadConfig({ home: opts.home }).config.artifacts?.maxAttachmentBytes : undefined;
  const maxAttachmentBytes = configured ?? CONFIG_DEFAULTS.artifacts.maxAttachmentBytes;
  return {
    maxAttachmentBytes,
    async message(run, body) {
      journal.assertWritable?.();
      const target = field(body, "stage", "string", true) as string;
      const text = field(body, "text", "string", true) as string;
      const files = attachmentContents(body && typeof body === "object" ? (body as Record<string, unknown>).attachments : undefined, maxAttachmentBytes);
      if (files.length && !opts.home) throw new UsageError("bad_attachment", "this server cannot keep attachments (it has no atomic home)", { hint: "send the message without attachments, or with atomic send --attach" });
      const id = (field(body, "id", "string", false) as string | undefined) ?? newId("msg");
      const request = {
        run,
        target,
        text,
        mode: field(body, "mode", "string", false) as string | undefined,
        sticky: field(body, "sticky", "boolean", false) === true,
        id,
        sender: opts.by ?? "status-page",
        warnUnknown: true,
        // a name no path of the workflow can reach is refused with close matches, as `atomic send` does
        checkNames: true,
        builtinSource,
      };
      const { sent, attached } = await sendAttached(journal, request, files, opts.home ? join(opts.home, "artifacts") : "", run.rootId);
      const withFiles = attached ? { ...sent, attachmentsDir: attached.dir } : sent;
      if (!opts.home || !sent.deliveries.some((d) => d.state === "queued" && d.started) || !(await isDriven(journal, sent.runId))) return withFiles;
      const reply = await notifyDriver(opts.home, sent.runId, { type: "mail", messageId: sent.messageId, waitMs: 2_000 }, 4_000);
      const told = reply?.deliveries as DeliveryView[] | undefined;
      return { ...withFiles, deliveries: told ?? (await settledStates(journal, sent.runId, sent.messageId, 2_000)) };
    },
    async answer(run, body) {
      journal.assertWritable?.();
      const result = await answerPrompt(journal, run, field(body, "question", "string", true) as string, field(body, "answer", "string", true) as string, opts.by ?? "status-page");
      if (opts.home && result.status === "answered" && (await isDriven(journal, result.runId))) await notifyDriver(opts.home, result.runId, { type: "poke" }, 1_000);
      return { runId: result.runId, question: result.promptId, status: result.status, answer: result.prompt.answer };
    },
    async review(run, stage, body) {
      journal.assertWritable?.();
      const result = await answerReview(journal, run, stage, verdictOf(body), opts.by ?? "status-page");
      if (opts.home && result.status === "answered" && (await isDriven(journal, result.runId))) await notifyDriver(opts.home, result.runId, { type: "poke" }, 1_000);
      return { runId: result.runId, question: result.promptId, status: result.status, answer: result.prompt.answer };
    },
    async control(run, action, stage) {
      journal.assertWritable?.();
      if (stage !== undefined) {
        if (action === "cancel") throw new UsageError("bad_body", "cancel stops the whole run; it takes no stage", { hint: 'send {"action": "cancel"} without "stage", or pause the stage: {"action": "pause", "stage": "..."}' });
        await setStagePaused(journal, run, stage, action === "pause", builtinSource, { home: opts.home });
        return { runId: run.id, action, stage, result: "requested" };
      }
      if (action === "cancel") {
        const { result } = await cancelRun(journal, run, 0, opts.home);
        return { runId: run.id, action, result };
      }
      await setRunPaused(journal, run, action === "pause", { home: opts.home });
      return { runId: run.id, action, result: "requested" };
    },
  };
}
