/**
 * An agent's `ask_user` tool: the stage parks on the question exactly like
 * ctx.ask, through the same code (ask.ts askAt): one prompt in the journal,
 * the run awaiting_input, answered by `atomic answer`, the status page,
 * intercom or the API, listed by `atomic inbox`, waited for across crashes.
 *
 * The runner does not hold a worker while the question waits: its attempt
 * ends with `askUser` (the tool call's id, the question, its choices) and
 * its conversation saved in the attempt's artifact directory. The stage
 * records the question at `<stage position>~ask<n>` (n counts the stage's
 * questions from 1), with that call id and directory, waits for the answer,
 * and starts its next attempt continuing that conversation with the answer
 * as the call's result (`request.answer`).
 *
 * Resume (kill -9 while parked, or later): the stage finds its recorded
 * questions (ReplayCursor.peek) before its first attempt. An answered one
 * is replayed; the last one, answered or not, is where the stage goes on
 * (an open one is waited for again under its prompt id). Work done after
 * an answer but not checkpointed is redone from that answer, like any
 * unfinished attempt.
 *
 * A CLI agent (claude, codex, opencode) asks through the stage MCP server
 * and its call waits (`live`): the question is recorded at the same
 * positions, the run is awaiting_input, and the answer is the call's
 * result while the CLI keeps running (a CLI's session cannot be continued
 * inside a tool call). After a crash the stage's attempt starts again and
 * its agent's n-th question gets the n-th recorded answer (or waits again
 * for it) instead of asking anew.
 */

import type { StageResult } from "../../sdk/types.ts";
import type { StageRequest } from "../../runners/types.ts";
import type { StepRun } from "../step-run.ts";
import type { Scope } from "../scope.ts";
import type { StepIdentity } from "../journal-events.ts";
import { digestArgs } from "../values.ts";
import { askAt } from "./ask.ts";

/** Where a parked stage goes on: the conversation to continue and the answer to the call it ended on. */
export interface ParkedAnswer {
  continueFrom: NonNullable<StageRequest["continueFrom"]>;
  answer: NonNullable<StageRequest["answer"]>;
}

interface Recorded {
  callId: string;
  artifactDir: string;
}

/** The questions a stage's agent asked, in order: the next one's number and the answer to go on from. */
export class AgentAsks {
  private count = 0;

  constructor(
    private readonly exec: StepRun,
    private readonly scope: Scope,
    private readonly position: string,
    private readonly stageName: string,
  ) {}

  /** The questions recorded by earlier drivers (answered or waited for again); the last one's answer, if any. */
  async recorded(): Promise<ParkedAnswer | undefined> {
    let last: ParkedAnswer | undefined;
    for (;;) {
      const position = this.keyOf(this.count + 1);
      const rec = this.exec.cursor.peek(position);
      if (!rec) return last;
      this.count++;
      const started = rec.started;
      const extra = (started?.extra ?? {}) as Partial<Recorded>;
      last = await this.ask(position, started?.question ?? "", started?.choices ?? null, extra as Recorded);
    }
  }

  /** The attempt ended on an ask_user call: records the question, waits for the answer, says how to go on. */
  park(result: StageResult, artifactDir: string): Promise<ParkedAnswer> {
    const asked = result.askUser!;
    this.count++;
    return this.ask(this.keyOf(this.count), asked.question, asked.choices ?? null, { callId: asked.callId, artifactDir });
  }

  private async ask(position: string, question: string, choices: string[] | null, extra: Recorded): Promise<ParkedAnswer> {
    const step: StepIdentity = { kind: "ask", name: `${this.stageName}: ask_user`, args: digestArgs({ stage: this.position, n: position }) };
    const answered = await askAt(this.exec, this.scope, position, step, question, choices, undefined, { ...extra });
    const got = answered.extra as Partial<Recorded>;
    const callId = got.callId ?? extra.callId;
    const artifactDir = got.artifactDir ?? extra.artifactDir;
    return { continueFrom: { artifactDir, fork: false }, answer: { callId, text: answered.answer } };
  }

  /** A CLI agent's question, its call waiting: recorded (or found recorded) like any other; resolves with the answer. */
  async live(question: string, choices: string[] | undefined): Promise<string> {
    this.count++;
    const position = this.keyOf(this.count);
    const step: StepIdentity = { kind: "ask", name: `${this.stageName}: ask_user`, args: digestArgs({ stage: this.position, n: position }) };
    return (await askAt(this.exec, this.scope, position, step, question, choices ?? null, undefined)).answer;
  }

  private keyOf(n: number): string {
    return `${this.position}~ask${n}`;
  }
}
