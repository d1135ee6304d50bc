/**
 * ctx.send: a message to a stage, from workflow code.
 *
 * A step like the others: the send is checkpointed with its outcome, so a
 * resumed run does not send again. Its message id is `<run id>:<position>`
 * unless given, so a crash between the send and its checkpoint, and the
 * send running again, records the message once (the store deduplicates by
 * id). Addresses are stage paths of this run's root run (`review/security`,
 * patterns, `sticky`), or `<run id>:<path>` for another run.
 *
 * A refused message (no such stage, queue full, empty text, ...) fails the
 * step (not checkpointed): the run fails and `atomic resume` tries again.
 */

import { AtomicError, StepFailedError } from "../../shared/errors.ts";
import { parseRunRef } from "../../shared/ids.ts";
import { splitAddress } from "../../intercom/addresses.ts";
import { IntercomClient } from "../../intercom/client.ts";
import type { SendOptions, SendReceipt } from "../../sdk/types.ts";
import type { StepRun } from "../step-run.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { sendMessage } from "../messaging.ts";
import { digestArgs } from "../values.ts";

export async function runSend(exec: StepRun, address: string, text: string, opts: SendOptions): Promise<SendReceipt> {
  const scope = exec.scope();
  const position = scope.nextPosition();
  const mode = opts.mode ?? "steer";
  const step: StepIdentity = {
    kind: "send",
    name: opts.name ?? String(address).slice(0, 200),
    args: digestArgs({ address, text, mode, sticky: opts.sticky === true, id: opts.id }),
  };
  const recorded = exec.cursor.claim(position, step);
  const { tree } = exec;
  if (recorded?.checkpoint) {
    tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "send", name: step.name, status: "completed", replayed: true, at: Date.now() });
    return recorded.checkpoint.result as SendReceipt;
  }
  await exec.startGate(scope);
  if (typeof address !== "string") {
    throw new StepFailedError(step.name, `ctx.send needs a stage path as its first argument, got ${typeof address}`, { code: "bad_step" });
  }
  const startedAt = Date.now();
  const { run: runText, path } = splitAddress(address);
  let receipt: SendReceipt;
  try {
    let run = await tree.journal.getRun(tree.lease.rootId);
    if (runText !== undefined) {
      const id = parseRunRef(runText);
      run = id ? await tree.journal.getRun(id) : undefined;
      if (!run) throw new AtomicError("unknown_run", `no run with id ${runText}`, "usage", { hint: "address another run's stage as <run id>:<stage path>" });
    }
    const sent = await sendMessage(tree.journal, {
      run: run!,
      target: path,
      text,
      mode,
      sticky: opts.sticky === true,
      id: opts.id ?? `${exec.runId}:${position}`,
      sender: exec.runId,
    });
    receipt = { messageId: sent.messageId, runId: sent.runId, target: sent.target, deliveries: sent.deliveries.map((d) => ({ stage: d.stage, state: d.state })) };
    if (sent.runId === tree.lease.rootId) {
      await tree.mail.pump();
    } else {
      void notifyOtherRun(tree.mail.home, sent.runId, sent.messageId);
    }
  } catch (err) {
    if (!(err instanceof AtomicError) || err.disposition !== "usage") throw err;
    throw new StepFailedError(step.name, `ctx.send to ${address}: ${err.message}`, { code: err.code, ...(err.hint ? { hint: err.hint } : {}) });
  }
  await tree.append({ runId: exec.runId, type: EVENT.checkpoint, key: position, payload: { ...step, result: receipt, startedAt } });
  tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "send", name: step.name, status: "completed", replayed: false, at: Date.now() });
  return receipt;
}

/** Best effort: tell another run's driver to look now (it polls the journal anyway). Never starts a broker. */
async function notifyOtherRun(home: string, rootId: string, messageId: string): Promise<void> {
  let client: IntercomClient | undefined;
  try {
    client = await IntercomClient.connect({ home, role: "root", spawn: false });
    await client.send(rootId, { type: "mail", messageId });
  } catch {
    // no broker or no such session: the other driver's poll finds the message
  } finally {
    client?.close();
  }
}
