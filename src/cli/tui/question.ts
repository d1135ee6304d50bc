/**
 * One ctx.ask question on the terminal (ink): its choices as a picker
 * (arrow keys, Enter) or, without choices, a line of free text (Enter
 * sends). Used inline under `atomic run`'s live tree and in the console's
 * question pane. What happens to an answer is the caller's: the component
 * only collects it and shows what the caller says back (an error, or
 * "sending…").
 */

import { createElement as h, useMemo } from "react";
import { Box, Text } from "ink";
import { Select, TextInput } from "@inkjs/ui";

export interface QuestionView {
  id: string;
  question: string;
  choices: string[] | null;
  /** Where it came from, e.g. "run 01m8rf, stage review". */
  from: string;
}

export interface QuestionProps {
  q: QuestionView;
  color: boolean;
  /** Input is ignored (another pane has the keys, or an answer is on its way). */
  disabled?: boolean;
  /** A line under the input: what became of the last try. */
  status?: string;
  onAnswer(text: string): void;
}

export function Question({ q, color, disabled, status, onAnswer }: QuestionProps) {
  // The picker calls onChange again whenever its options change identity: they are made once.
  const options = useMemo(() => (q.choices ?? []).map((c) => ({ label: c, value: c })), [q.choices]);
  const input = q.choices
    ? h(Select, { options, isDisabled: disabled === true, visibleOptionCount: Math.min(8, q.choices.length), onChange: onAnswer })
    : h(Box, null, h(Text, null, "> "), h(TextInput, { isDisabled: disabled === true, placeholder: "type the answer, Enter sends", onSubmit: (v: string) => v.trim() && onAnswer(v) }));
  return h(
    Box,
    { flexDirection: "column" },
    h(Text, { wrap: "wrap" }, h(Text, color ? { color: "yellow", bold: true } : { bold: true }, `question ${q.id}`), h(Text, { dimColor: color }, ` (${q.from})`)),
    h(Text, { wrap: "wrap" }, q.question),
    input,
    h(Text, { dimColor: color, wrap: "truncate-end" }, status ?? (q.choices ? "↑/↓ choose, Enter answers" : "Enter answers") + " · or elsewhere: atomic answer"),
  );
}
