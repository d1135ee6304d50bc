/**
 * `atomic send RUN STAGE "text" [--mode steer|followUp|interrupt] [--sticky] [--id ID] [--attach FILE]…`:
 * a message to a stage (a path through child workflows, or a glob pattern),
 * with files attached (engine/attachments.ts: copied into the run's
 * artifacts first, delivered in the message as a stage's reads are).
 *
 * The message is recorded in the journal first (durable from then on);
 * then, if a process drives the run, it is told through intercom and the
 * command waits briefly for live deliveries, so what it prints is what
 * happened: delivered, queued (the stage has not started: it receives the
 * message before its first turn), or refused with the reason.
 */

import { defineCommand } from "citty";
import { checkMessageId, isDriven, notifyDriver, settledStates, type DeliveryView } from "../../engine/messaging.ts";
import { builtinSource } from "../../engine/builtins.ts";
import { session } from "../session.ts";
import { join } from "node:path";
import { checkAttachments, sendAttached } from "../../engine/attachments.ts";
import { repeatedFlag } from "../globals.ts";
import { loadConfig } from "../../shared/config/load.ts";
import { CONFIG_DEFAULTS } from "../../shared/config/schema.ts";
import { newId } from "../../shared/ids.ts";

const LIVE_WAIT_MS = 2_000;

export default defineCommand({
  meta: { name: "send", description: "Send a message to a stage (live now, or before it starts)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: 'stage path ("review/security") or pattern ("review/*")', required: true },
    text: { type: "positional", description: "the message", required: true },
    mode: { type: "string", description: "steer (default): into the current turn; followUp: after it; interrupt: end the turn first" },
    sticky: { type: "boolean", description: "also deliver to every matching stage that starts later" },
    id: { type: "string", description: "message id (resending the same id and text is a no-op)" },
    attach: { type: "string", valueHint: "FILE", description: "attach a file (copied into the run's artifacts, delivered with the message); repeat the flag for more" },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    // Attachments: every file checked before anything is copied; the copies go with a refused message.
    const files = repeatedFlag(s.rawArgs, "attach");
    const cap = loadConfig({ home: s.globals.home }).config.artifacts?.maxAttachmentBytes ?? CONFIG_DEFAULTS.artifacts.maxAttachmentBytes;
    const checked = checkAttachments(files, process.cwd(), cap);
    const id = checkMessageId(args.id ?? newId("msg"));
    const request = {
      run,
      target: args.stage,
      text: args.text,
      ...(args.mode !== undefined ? { mode: args.mode } : {}),
      sticky: args.sticky === true,
      id,
      sender: "cli",
      warnUnknown: true,
      checkNames: true,
      builtinSource,
    };
    const { sent, attached } = await sendAttached(journal, request, checked, join(s.globals.home, "artifacts"), run.rootId);
    let deliveries = sent.deliveries;
    const waiting = deliveries.some((d) => d.state === "queued" && d.started);
    if (waiting && (await isDriven(journal, sent.runId))) {
      // The driver answers once the deliveries settled (or at LIVE_WAIT_MS); one it cannot reach is waited for in the journal.
      const reply = await notifyDriver(s.globals.home, sent.runId, { type: "mail", messageId: sent.messageId, waitMs: LIVE_WAIT_MS }, LIVE_WAIT_MS + 2_000);
      const told = reply?.deliveries as DeliveryView[] | undefined;
      deliveries = told ?? (await settledStates(journal, sent.runId, sent.messageId, LIVE_WAIT_MS));
    }
    // Possibly a typo: said on stderr, with the close matches (also in --json, as `warning`).
    if (sent.warning) s.warn(sent.warning);
    if (s.globals.json) return s.json({ ...sent, deliveries, ...(attached ? { attachments: checked.map((f) => f.given), attachmentsDir: attached.dir } : {}) });
    const head = `message ${sent.messageId} to run ${sent.runId}${sent.status === "exists" ? " (sent before; nothing new)" : ""}`;
    s.result(head);
    if (attached) s.result(`  attached ${checked.map((f) => f.given).join(", ")} (copies in ${attached.dir})`);
    const width = Math.max(8, ...deliveries.map((d) => d.stage.length));
    for (const d of deliveries) s.result(`  ${d.stage.padEnd(width)}  ${describe(d)}`);
    if (sent.sticky) s.result(`  ${"".padEnd(width)}  sticky: also every stage matching ${sent.target} that starts later`);
  },
});

function describe(d: DeliveryView): string {
  if (d.state === "queued") return d.started ? "queued (the stage's driver delivers it shortly)" : "queued (the stage has not started; it gets the message before its first turn)";
  return `${d.state}${d.reason ? `: ${d.reason}` : ""}`;
}
