/**
 * Questions (ctx.ask) answered in the terminal that runs the workflow:
 * under `atomic run`'s (and `atomic resume`'s) live tree on a terminal, an
 * open question shows as a picker of its choices or a line for free text
 * (cli/tui/inline.ts). The question stays answerable everywhere else
 * (`atomic answer`, the status page, the API, `atomic tui`); the journal
 * keeps the first answer (journal/message-rules.ts), and the run's
 * `prompt` event says who gave it, so the terminal says "answered from
 * atomic answer" when another place won. One question is shown at a time;
 * others wait their turn in the order they were asked.
 */

import type { EngineEvent } from "../../engine/observer.ts";
import { answerPrompt } from "../../engine/messaging.ts";
import { UsageError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { importEntry } from "../../shared/entry-points.ts";
import { setEnv } from "../../shared/config/environment.ts";
import type { CliSession } from "../session.ts";
import type { InlineQuestion } from "../tui/inline.ts";

type PromptEvent = Extract<EngineEvent, { type: "prompt" }>;

/** Who answered, as a sentence says it. */
export function answeredByText(by: string | null | undefined): string {
  if (by === "cli") return "atomic answer";
  if (by === "status-page") return "the status page";
  if (by === "tui") return "atomic tui";
  if (by === "terminal") return "this terminal";
  return by ? by : "elsewhere";
}

export interface InlineAnswers {
  /** A prompt event of the run: open → shown (or queued behind the one shown), answered / timed out → taken off with a line saying so. */
  onPrompt(e: PromptEvent): void;
  /** Takes any question off the screen (the run ended). */
  close(): void;
}

/**
 * `print` writes a line above the live tree; `hold(true)` stops the tree's
 * redraws while a question is on the screen, `hold(false)` lets them go on.
 */
export function inlineAnswers(s: CliSession, view: { print(line: string): void; hold(on: boolean): void }): InlineAnswers {
  const waiting: PromptEvent[] = [];
  /** The question on the screen; `ui` once ink has drawn it. */
  let current: { e: PromptEvent; ui?: InlineQuestion } | undefined;
  let closed = false;
  if (!s.style.enabled) setEnv("FORCE_COLOR", "0"); // ink's colours (chalk) follow NO_COLOR / --no-color too

  const submit = async (e: PromptEvent, ui: InlineQuestion, text: string) => {
    ui.status(`sending ${JSON.stringify(text)}…`, true);
    try {
      const journal = await s.journal();
      const run = await journal.getRun(e.rootId as RunId);
      if (!run) throw new UsageError("unknown_run", `run ${e.rootId} is gone from the journal`);
      await answerPrompt(journal, run, e.promptId, text, "terminal");
      // The ask step reads the journal within a quarter second and reports it answered: onPrompt takes it off.
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      ui.status(`${message}${err instanceof UsageError && err.hint ? ` (${err.hint})` : ""}`, false);
    }
  };

  const showNext = () => {
    if (current || closed) return;
    const e = waiting.shift();
    if (!e) {
      view.hold(false);
      return;
    }
    view.hold(true);
    const shown: { e: PromptEvent; ui?: InlineQuestion } = { e };
    current = shown;
    const from = e.runId === e.rootId ? `run ${e.rootId}` : `run ${e.runId} of ${e.rootId}`;
    void importEntry("cli/tui/entry.ts").then((m) => {
      if (current !== shown) return; // answered elsewhere, or the run ended, before ink loaded
      const show = m.showInlineQuestion as typeof import("../tui/inline.ts").showInlineQuestion;
      const ui: InlineQuestion = show(
        { id: e.promptId, question: e.question, choices: e.choices, from },
        { color: s.style.enabled, onAnswer: (text) => void submit(e, ui, text), onInterrupt: () => process.kill(process.pid, "SIGINT") },
      );
      shown.ui = ui;
    });
  };

  const takeOff = (promptId: string, line: string) => {
    const i = waiting.findIndex((w) => w.promptId === promptId);
    if (i >= 0) waiting.splice(i, 1);
    if (current?.e.promptId === promptId) {
      current.ui?.close();
      current = undefined;
    }
    view.print(line);
    showNext();
  };

  return {
    onPrompt(e) {
      if (closed) return;
      if (e.state === "open") {
        waiting.push(e);
        showNext();
        return;
      }
      if (e.state === "timed_out") return takeOff(e.promptId, `  question ${e.promptId} was not answered in time`);
      const answer = JSON.stringify(e.answer);
      takeOff(e.promptId, e.by === "terminal" ? `  question ${e.promptId} answered: ${answer}` : `  question ${e.promptId} was answered from ${answeredByText(e.by)}: ${answer}`);
    },
    close() {
      closed = true;
      waiting.length = 0;
      current?.ui?.close();
      current = undefined;
      view.hold(false);
    },
  };
}
