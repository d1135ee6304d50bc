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
 * unfinished attempt. A stage recorded as completed replays its result,
 * and its questions are claimed with it (replayedWithStage), so the replay
 * does not take them for steps the workflow no longer asks for.
 *
 * A CLI agent (claude, codex, opencode, pi) asks through the stage MCP
 * server or pi's extension. A CLI's session cannot be continued inside one
 * of its tool calls, so the call does not wait: its result tells the agent
 * to end its turn, and the attempt that ends then parks the same way, with
 * the CLI's session id recorded beside the directory. No CLI and no worker
 * stay while the person takes their time; the next attempt resumes that
 * session (the CLI's resume flag) with the answer as its next message.
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
  /** A CLI agent's session, resumed by id (claude, codex, gemini, opencode; pi's is a file in artifactDir). */
  sessionId?: string;
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

  /** The stage was recorded complete: its agent's questions are part of that record, claimed so that the replay counts them as asked. */
  replayedWithStage(): void {
    for (let n = 1; ; n++) {
      const position = this.keyOf(n);
      if (!this.exec.cursor.peek(position)) return;
      this.exec.cursor.claim(position, this.stepAt(position));
    }
  }

  /** The attempt ended on an ask_user call: records the question, waits for the answer, says how to go on. */
  park(result: StageResult, artifactDir: string): Promise<ParkedAnswer> {
    const asked = result.askUser!;
    this.count++;
    return this.ask(this.keyOf(this.count), asked.question, asked.choices ?? null, { callId: asked.callId, artifactDir, ...(result.sessionId ? { sessionId: result.sessionId } : {}) });
  }

  private async ask(position: string, question: string, choices: string[] | null, extra: Recorded): Promise<ParkedAnswer> {
    const answered = await askAt(this.exec, this.scope, position, this.stepAt(position), question, choices, undefined, { ...extra });
    const got = answered.extra as Partial<Recorded>;
    const callId = got.callId ?? extra.callId;
    const artifactDir = got.artifactDir ?? extra.artifactDir;
    const sessionId = got.sessionId ?? extra.sessionId;
    return { continueFrom: { artifactDir, fork: false, ...(sessionId ? { sessionId } : {}) }, answer: { callId, text: answered.answer } };
  }

  private stepAt(position: string): StepIdentity {
    return { kind: "ask", name: `${this.stageName}: ask_user`, args: digestArgs({ stage: this.position, n: position }) };
  }

  private keyOf(n: number): string {
    return `${this.position}~ask${n}`;
  }
}
