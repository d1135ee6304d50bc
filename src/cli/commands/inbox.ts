/**
 * `atomic inbox RUN`: messages per stage with their delivery states
 * (queued, delivered, received, receipt-unverified, session-replaced,
 * stage-terminal, undeliverable: src/journal/delivery-states.ts) and
 * reasons, sticky messages, and questions.
 */

import { defineCommand } from "citty";
import { inbox } from "../../engine/messaging.ts";
import { session } from "../session.ts";
import { formatTime } from "../style.ts";

export default defineCommand({
  meta: { name: "inbox", description: "List a run's messages per stage and its questions" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const box = await inbox(await s.journal(), run);
    if (s.globals.json) return s.json(box);
    const st = s.style;
    if (box.stages.length === 0 && box.sticky.length === 0 && box.prompts.length === 0) {
      s.info(`run ${box.runId} has no messages and no questions; send one with: atomic send ${box.runId} <stage> "text"`);
      return;
    }
    for (const stage of box.stages) {
      s.result(st.bold(stage.stage));
      for (const m of stage.messages) {
        const state = (m.state === "undeliverable" || m.state === "stage-terminal" ? st.red : m.state === "received" || m.state === "delivered" ? st.green : st.yellow)(m.state);
        const extra = [m.mode !== "steer" ? m.mode : "", m.sticky ? "sticky" : "", m.attempt ? `attempt ${m.attempt}` : "", m.reason ?? ""].filter(Boolean).join(", ");
        s.result(`  ${state.padEnd(18)} ${m.id}  ${st.dim(formatTime(m.sentAt))}  ${preview(m.text)}${extra ? st.dim(`  (${extra})`) : ""}`);
      }
    }
    if (box.sticky.length > 0) {
      s.result(st.bold("sticky (every matching stage that starts)"));
      for (const m of box.sticky) s.result(`  ${m.target}  ${m.id}  ${preview(m.text)}`);
    }
    if (box.prompts.length > 0) {
      s.result(st.bold("questions"));
      for (const p of box.prompts) {
        const choices = p.choices ? st.dim(` [${p.choices.join("/")}]`) : "";
        const state = p.state === "open" ? st.yellow("open") : p.state === "answered" ? st.green(`answered ${JSON.stringify(p.answer)}`) : st.red("timed out");
        s.result(`  ${p.id}  ${state}  ${preview(p.question)}${choices}`);
      }
      const open = box.prompts.find((p) => p.state === "open");
      if (open) s.info(st.dim(`answer with: atomic answer ${box.runId} ${open.id} <answer>`));
    }
  },
});

function preview(text: string): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 72 ? `${line.slice(0, 71)}…` : line;
}
