/**
 * Prompts to humans (ctx.ask): open → answered | timed_out. Opened by the
 * run's driver with the ask's start record (AppendEntry.prompt,
 * ./append.ts); answered by anyone, closed on time-out by the driver
 * (MessageStore, ./messages.ts).
 */

import type { RunId } from "../shared/ids.ts";

export type PromptState = "open" | "answered" | "timed_out";

export interface NewPrompt {
  id: string;
  question: string;
  choices: string[] | null;
  /** When an unanswered prompt times out (ms since the epoch), if it does. */
  deadline: number | null;
}

export interface PromptRecord extends NewPrompt {
  rootId: RunId;
  runId: RunId;
  stageKey: string;
  state: PromptState;
  answer: string | null;
  answeredBy: string | null;
  createdAt: number;
  answeredAt: number | null;
}

