/**
 * A question shown inline under `atomic run`'s live tree (ink, rendered
 * below what is on the screen, not full-screen). The caller sends the
 * answer and closes the question when the run reports it answered: by this
 * terminal or by anyone else (cli/view/inline-answers.ts).
 */

import { createElement as h, useEffect, useState } from "react";
import { render, useInput } from "ink";
import { Question, type QuestionView } from "./question.ts";

export interface InlineQuestion {
  /** Show a line under the input (an answer being sent, a refusal). */
  status(line: string | undefined, disabled?: boolean): void;
  /** Take the question off the screen (the cursor is back where it started) and give the keyboard back. */
  close(): void;
}

const Gone = () => null;

export function showInlineQuestion(q: QuestionView, opts: { color: boolean; onAnswer(text: string): void; onInterrupt(): void }): InlineQuestion {
  // The caller's status lines reach the component through this setter (set once it is mounted).
  let pending: { line: string | undefined; disabled: boolean } = { line: undefined, disabled: false };
  let setShown: ((s: typeof pending) => void) | undefined;
  const Root = () => {
    const [shown, set] = useState(pending);
    useEffect(() => {
      setShown = set;
      set(pending);
      return () => {
        setShown = undefined;
      };
    }, []);
    // Raw mode turns Ctrl-C into a key: it goes to the run as the signal it would have been.
    useInput((input, key) => {
      if (key.ctrl && input === "c") opts.onInterrupt();
    });
    return h(Question, { q, color: opts.color, disabled: shown.disabled, ...(shown.line ? { status: shown.line } : {}), onAnswer: opts.onAnswer });
  };
  const app = render(h(Root), { exitOnCtrlC: false, patchConsole: false, interactive: true });
  return {
    status(line, disabled = false) {
      pending = { line, disabled };
      setShown?.(pending);
    },
    close() {
      // Unmounting writes the last frame again: an empty one first, so nothing of the question stays.
      app.rerender(h(Gone));
      app.clear();
      app.unmount();
    },
  };
}
