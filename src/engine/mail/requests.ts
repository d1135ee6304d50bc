/**
 * What a run's driver accepts over intercom (protocol only): the bodies of
 * messages routed to its sessions, validated here, at the edge, before
 * anything acts on them.
 *
 * To `<root id>` (the run tree's session), a request with a `type`:
 * - `{ type: "mail", messageId?, waitMs? }`: messages were queued in the
 *   journal; deliver now. The reply carries that message's delivery states,
 *   after up to `waitMs` more of delivery passes while some of them are
 *   still queued for a stage that has started.
 * - `{ type: "answer", promptId, answer, by? }`: answer a ctx.ask question
 *   (recorded in the journal first, like `atomic answer`).
 * - `{ type: "poke" }`: look at the journal now (an answer was recorded by
 *   another process).
 * - `{ type: "control" }`: apply the run's control row now (a pause or
 *   unpause was requested there); the reply, once it is applied, carries
 *   the control revision applied (`applied`), which `atomic pause` waits for.
 * - `{ type: "stage_tool", token, tool, args }`: a stage's agent calls a run
 *   tool (message, ask_agent, reply) with its attempt's credential; the
 *   reply is the tool's result `{ ok, output }` (stage-tools.ts).
 *
 * To `<root id>:<stage path>` (a running stage's session): a message to that
 * stage, either plain text or `{ text, mode?, id? }`; it is recorded, then
 * delivered like `atomic send`.
 *
 * Replies (to an ask): `{ ok: true, ... }` or `{ ok: false, error: { name,
 * code, message } }`. A body that matches none of these is refused with
 * code `bad_request` (and logged); it never reaches the journal.
 */

import * as v from "valibot";
import { MESSAGE_MODES } from "../../journal/messages.ts";

export const RootRequestSchema = v.variant("type", [
  v.object({ type: v.literal("mail"), messageId: v.optional(v.string()), waitMs: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(60_000))) }),
  v.object({ type: v.literal("answer"), promptId: v.string(), answer: v.string(), by: v.optional(v.string()) }),
  v.object({ type: v.literal("poke") }),
  v.object({ type: v.literal("control") }),
  v.object({ type: v.literal("stage_tool"), token: v.string(), tool: v.string(), args: v.record(v.string(), v.unknown()) }),
]);
export type RootRequest = v.InferOutput<typeof RootRequestSchema>;

export const StageMessageSchema = v.union([
  v.string(),
  v.object({ text: v.string(), mode: v.optional(v.picklist(MESSAGE_MODES)), id: v.optional(v.string()) }),
]);
export type StageMessageBody = v.InferOutput<typeof StageMessageSchema>;

/** A request to the driver, as the broker link hands it over after validation. */
export type DriverRequest =
  | { to: "root"; request: RootRequest; from: string | undefined }
  | { to: "stage"; target: string; message: { text: string; mode?: string; id?: string }; from: string | undefined };

/** Where in a body validation failed and why, in one line (for the refusal and the log). */
export function describeIssue(issues: readonly v.BaseIssue<unknown>[]): string {
  const issue = issues[0]!;
  const path = issue.path?.map((p) => String(p.key)).join(".");
  return `${path ? `at ${path}: ` : ""}${issue.message}`;
}
