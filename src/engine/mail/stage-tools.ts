/**
 * The driver's side of the run tools (message, ask_agent, reply:
 * runners/run-tools.ts): what a stage's agent asks of its run, over
 * intercom (`{ type: "stage_tool", token, tool, args }` to the root's
 * session), answered with the tool's result `{ ok, output }`.
 *
 * Credentials: each attempt of a stage granted a run tool gets a token
 * (`<root id>.<random>`) minted when it starts and revoked when it ends;
 * the token says which stage asks. A token of another run, or of an ended
 * attempt, is refused in one sentence.
 *
 * - message: `sendMessage` exactly as `atomic send` and ctx.send (the
 *   journal first; the delivery rules: future stages, patterns, caps,
 *   dedup; a path that can never exist, or whose last name no stage of
 *   the run's code has, is refused naming close matches, nothing recorded).
 *   Files the agent attached (`attach`) come as their contents, read where
 *   the stage runs (artifacts/tool-attachments.ts): copied into the run's
 *   artifacts and delivered in the message as `atomic send --attach` does
 *   (../attachments.ts), the copies removed when the message is refused.
 * - ask_agent: the question goes to a running stage as a steer message
 *   naming a question id; the asker's call waits (in memory: a question
 *   between two live agents needs both alive) until that stage's agent
 *   calls `reply` with the id, or the timeout. A finished, not yet started
 *   or absent stage, a stage without the reply tool, the asker itself: an
 *   error result at once. A stage that ends while asked answers nothing:
 *   the asker is told.
 * - ask_user (a CLI agent's, through the stage MCP server or pi's
 *   extension): the call does not wait for the person. The stage's `asked`
 *   notes the question for the attempt and the result tells the agent to
 *   end its turn; when the turn has ended the stage parks on the question
 *   exactly like the openai loop's (steps/agent-asks.ts), the CLI gone, and
 *   the answer comes as the next message of the resumed session. One
 *   question per attempt: a second is refused, saying to end the turn.
 */

import { randomBytes } from "node:crypto";
import { ASK_AGENT_DEFAULT_S, ASK_AGENT_MAX_S } from "../../runners/run-tools.ts";
import { closeMatches } from "../../shared/close-matches.ts";
import { AtomicError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { sendMessage } from "../messaging.ts";
import { attachmentContents, sendAttached } from "../attachments.ts";
import { newId } from "../../shared/ids.ts";
import type { MailTree } from "./mail-tree.ts";
import { askUserArgs } from "../../runners/openai/tools.ts";

export interface ToolStage {
  runId: RunId;
  stageKey: string;
  path: string;
  name: string;
  attempt: number;
  tools: readonly string[];
  /** ask_user for a CLI agent: notes the attempt's question (the stage parks on it when the turn ends); a refusal when it has one. */
  asked?: (question: string, choices: string[] | undefined) => string | undefined;
}

interface Pending {
  from: string;
  to: string;
  settle(outcome: { ok: boolean; output: string }): void;
}

type Outcome = { ok: boolean; output: string };

/** ask_user's result for a CLI agent: the question waits for a person while the CLI is gone (steps/agent-asks.ts). */
export const ASKED =
  "Your question is recorded and waits for a person. End your turn now: make no more tool calls and do no more work. This conversation goes on when the person has answered: the answer comes as the next message.";

const fail = (output: string): Outcome => ({ ok: false, output: `error: ${output}` });

export class StageTools {
  private readonly tokens = new Map<string, ToolStage>();
  private readonly pending = new Map<string, Pending>();

  constructor(
    private readonly tree: MailTree,
    /** Deliver what is queued now (a message to a running stage goes out at once). */
    private readonly pump: () => Promise<void>,
  ) {}

  private get rootId(): RunId {
    return this.tree.lease.rootId;
  }

  /** An attempt granted run tools starts: its credential. */
  mint(stage: ToolStage): string {
    const token = `${this.rootId}.${randomBytes(18).toString("base64url")}`;
    this.tokens.set(token, stage);
    return token;
  }

  /** The attempt ended: its credential is refused from now on, and a question asked of it is told it will get no answer. */
  revoke(token: string): void {
    const stage = this.tokens.get(token);
    this.tokens.delete(token);
    if (!stage) return;
    for (const [id, p] of this.pending) {
      if (p.to === stage.path && !this.liveAt(stage.path)) p.settle(fail(`stage ${stage.path} ended without answering question ${id}`));
    }
  }

  async handle(token: string, tool: string, args: Record<string, unknown>): Promise<Outcome> {
    const stage = this.tokens.get(token);
    if (!stage) {
      const owner = token.split(".")[0];
      if (owner && owner !== this.rootId) return fail(`this stage credential belongs to run ${owner}, not to run ${this.rootId}; a stage can reach only its own run`);
      return fail(`this stage credential is not valid any more (its attempt of run ${this.rootId} ended)`);
    }
    if (!stage.tools.includes(tool)) return fail(`the stage was not granted the ${tool} tool`);
    try {
      switch (tool) {
        case "message":
          return await this.message(stage, str(args.to), str(args.text), args.attachments);
        case "ask_agent":
          return await this.askAgent(stage, str(args.to), str(args.question), args.timeout_s);
        case "reply":
          return this.reply(stage, str(args.id), str(args.text));
        case "ask_user":
          return this.askUser(stage, args);
        default:
          return fail(`there is no run tool named ${JSON.stringify(tool)}`);
      }
    } catch (err) {
      if (err instanceof AtomicError) return fail(`${err.message}${err.hint ? ` (hint: ${err.hint})` : ""}`);
      throw err;
    }
  }

  private async message(stage: ToolStage, to: string, text: string, attachments: unknown): Promise<Outcome> {
    const run = await this.tree.journal.getRun(stage.runId);
    if (!run) return fail(`run ${stage.runId} is not in the journal`);
    const files = attachmentContents(attachments, this.tree.config.artifacts?.maxAttachmentBytes, "attach");
    const id = newId("msg");
    // As `atomic send`: a name no stage of the run's pinned code has is refused with close matches, nothing recorded
    // (no builtin grants run tools, so a builtin's embedded source is not needed: builtins.ts stays out of the SDK's reach).
    const request = { run, target: to, text, id, sender: `stage ${stage.path}`, warnUnknown: true, checkNames: true };
    const { sent, attached } = await sendAttached(this.tree.journal, request, files, this.tree.artifactsDir, this.rootId);
    await this.pump();
    const where = sent.deliveries.map((d) => `${d.stage} (${d.state === "queued" && !d.started ? "queued until it starts" : d.state})`);
    const head = `${where.length ? `sent to ${where.join(", ")}` : `sent; it waits for the first stage ${sent.target} to start`}${attached ? `, with ${files.map((f) => f.given).join(", ")} attached` : ""}`;
    return { ok: true, output: sent.warning ? `${head}; note: ${sent.warning}` : head };
  }

  private async askAgent(stage: ToolStage, to: string, question: string, timeoutArg: unknown): Promise<Outcome> {
    const timeoutS = typeof timeoutArg === "number" && Number.isFinite(timeoutArg) && timeoutArg > 0 ? Math.min(ASK_AGENT_MAX_S, Math.ceil(timeoutArg)) : ASK_AGENT_DEFAULT_S;
    const target = stage.path.includes("/") ? `${stage.path.slice(0, stage.path.lastIndexOf("/") + 1)}${to}` : to;
    if (target === stage.path) return fail("a stage cannot ask itself; ask another stage of the run by its name");
    const live = this.liveAt(target);
    if (!live) return fail(await this.whyNotLive(target));
    if (!live.tools.includes("reply")) return fail(`stage ${target} cannot answer: it was not granted the reply tool (grant it with tools: [..., "reply"] or "ask_agent"); use message instead`);
    const id = `a${randomBytes(4).toString("hex")}`;
    const answered = new Promise<Outcome>((resolve) => {
      const timer = setTimeout(() => settle(fail(`stage ${target} did not answer question ${id} within ${timeoutS} s; go on without it, or ask again with a longer timeout_s`)), timeoutS * 1000);
      const settle = (o: Outcome) => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(o);
      };
      this.pending.set(id, { from: stage.path, to: target, settle });
    });
    const run = await this.tree.journal.getRun(live.runId);
    const text = `Question ${id} from stage ${stage.path}: ${question}\n(Answer it with your reply tool: id "${id}" and your answer.)`;
    await sendMessage(this.tree.journal, { run: run!, target: live.name, text, mode: "steer", sender: `stage ${stage.path}` });
    await this.pump();
    return answered;
  }

  private askUser(stage: ToolStage, args: Record<string, unknown>): Outcome {
    const checked = askUserArgs(JSON.stringify({ question: args.question, choices: args.choices }));
    if ("refused" in checked) return { ok: false, output: checked.refused };
    if (!stage.asked) return fail("this stage cannot ask a person from here");
    const refused = stage.asked(checked.question, checked.choices);
    if (refused) return fail(refused);
    return { ok: true, output: ASKED };
  }

  private reply(stage: ToolStage, id: string, text: string): Outcome {
    const p = this.pending.get(id);
    if (!p) return fail(`no question ${id} waits for an answer (it was answered, timed out, or never asked)`);
    if (p.to !== stage.path) return fail(`question ${id} was asked of stage ${p.to}, not of you`);
    p.settle({ ok: true, output: text });
    return { ok: true, output: `your answer went to stage ${p.from}` };
  }

  private liveAt(path: string): ToolStage | undefined {
    for (const s of this.tokens.values()) if (s.path === path) return s;
    return undefined;
  }

  private async whyNotLive(target: string): Promise<string> {
    const rows = (await this.tree.journal.messages.stages(this.rootId)).filter((r) => r.kind === "stage");
    const row = rows.filter((r) => r.path === target).at(-1);
    if (row?.state === "finished") return `stage ${target} has finished, so it cannot answer; use its result, or ask a stage that runs`;
    if (row) return `stage ${target} is not running now (${row.state}); ask_agent asks only a running stage: send it a message instead`;
    const near = closeMatches(target, new Set(rows.map((r) => r.path)));
    return `no stage ${target} has started in this run${near.length ? ` (did you mean ${near.join(", ")}?)` : ""}; ask_agent asks only a running stage: send a message instead, it waits for the stage to start`;
  }
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}
