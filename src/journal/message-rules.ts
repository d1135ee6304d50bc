/**
 * The rules of the message store that do not depend on the backend
 * (MessageStore in ./messages.ts): what makes a reused message id the same
 * message, the limits an enqueue is refused by, and how a second answer
 * to a prompt is judged. Each backend reads its rows in its own
 * transaction and asks these functions, so both refuse with the same
 * codes and sentences.
 */

import { UsageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { MAX_QUEUED_PER_STAGE, MAX_STICKY_PER_RUN, type NewMessage, type PlannedDelivery } from "./messages.ts";
import type { PromptRecord } from "./prompts.ts";

/** What makes a message the same message: a reused id must carry exactly this again. */
export function messageDigest(m: NewMessage): string {
  return Bun.hash(JSON.stringify([m.target, m.text, m.mode, m.sticky])).toString(36);
}

/** A message id seen before with `seenDigest`: refused unless it is the same message. */
export function refuseReusedId(message: NewMessage, seenDigest: string, digest: string): void {
  if (seenDigest === digest) return;
  throw new UsageError("message_id_conflict", `message id ${message.id} was already used for another message to run ${message.rootId}`, {
    hint: "use a new message id, or resend exactly the same message",
  });
}

/**
 * The limits of one enqueue: `stickyCount()` sticky messages the root has,
 * `queuedAt(path)` queued deliveries a path has (read in the enqueue's
 * transaction, under whatever keeps concurrent enqueues of the root apart).
 * Synchronous, so an embedded backend can call it between BEGIN and COMMIT.
 */
export function refuseOverLimits(
  message: NewMessage,
  planned: readonly PlannedDelivery[],
  stickyCount: () => number,
  queuedAt: (path: string) => number,
): void {
  if (message.sticky && stickyCount() >= MAX_STICKY_PER_RUN) {
    throw new UsageError("sticky_limit", `run ${message.rootId} already has ${MAX_STICKY_PER_RUN} sticky messages; the limit is ${MAX_STICKY_PER_RUN}`, {
      hint: "send to the stages by path instead",
    });
  }
  const perPath = new Map<string, number>();
  for (const d of planned) perPath.set(d.stagePath, (perPath.get(d.stagePath) ?? 0) + 1);
  for (const [path, adding] of perPath) {
    const queued = queuedAt(path);
    if (queued + adding > MAX_QUEUED_PER_STAGE) {
      throw new UsageError(
        "queue_full",
        `stage ${path} of run ${message.rootId} already has ${queued} queued messages; the limit is ${MAX_QUEUED_PER_STAGE} per stage`,
        { hint: `see them with: atomic inbox ${message.rootId}` },
      );
    }
  }
}

/** An answer that did not open-answer the prompt: the same answer again is "exists"; anything else is refused. */
export function judgeLateAnswer(rootId: RunId, promptId: string, prompt: PromptRecord | undefined, answer: string): { status: "exists"; prompt: PromptRecord } {
  if (!prompt) {
    throw new UsageError("unknown_prompt", `run ${rootId} has no question ${promptId}`, { hint: `see its questions with: atomic inbox ${rootId}` });
  }
  if (prompt.state === "answered" && prompt.answer === answer) return { status: "exists", prompt };
  if (prompt.state === "answered") {
    throw new UsageError("already_answered", `question ${promptId} of run ${rootId} was already answered with ${JSON.stringify(prompt.answer)}`, {
      hint: "an answer cannot be changed",
    });
  }
  throw new UsageError("prompt_closed", `question ${promptId} of run ${rootId} timed out before it was answered`, {
    hint: `a resumed run asks again: atomic resume ${rootId}`,
  });
}
