/**
 * Run tools for the stages of a worker host: a stage's agent calls
 * `message`, `ask_agent`, `reply` or `ask_user` (runners/run-tools.ts)
 * through the intercom broker of the machine it runs on, addressed to its
 * root's session `<root id>`; the root runs elsewhere, so this host stands
 * in for it (docs/design/stage-tools.md, "Worker hosts").
 *
 * - A stage granted run tools is pointed at this host's home (`localize`:
 *   its link's home), and this relay holds the session `<root id>` in this
 *   host's broker while any such stage of that root runs here.
 * - A call that comes in goes up the journal's fleet tables to the root
 *   (`stage_tool_call`, with an id of its own and the stage's work id); the
 *   root's driver acts on it as on a local call (the credential says which
 *   stage calls) and posts the result down to the item
 *   (`stage_tool_result`), which is the call's reply.
 * - The stage ended, or the database is away: the call's reply is an
 *   error result in one sentence; nothing waits forever.
 * A root whose home is this host's (one machine, one home) answers its
 * stages itself: nothing is relayed.
 */

import { randomUUID } from "node:crypto";
import { IntercomClient } from "../intercom/client.ts";
import type { IncomingMessage } from "../intercom/protocol/index.ts";
import type { FleetStore } from "../journal/fleet.ts";
import type { StageRequest } from "../runners/types.ts";
import { ensureError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";

type Outcome = { ok: boolean; output: string };

interface Relayed {
  rootId: RunId;
  token: string;
}

export class ToolsRelay {
  private client: IntercomClient | undefined;
  /** The stages relayed, by work id. */
  private readonly stages = new Map<string, Relayed>();
  /** Calls waiting for the root's result, by call id. */
  private readonly calls = new Map<string, { workId: string; settle(o: Outcome): void }>();

  constructor(
    private readonly home: string,
    private readonly fleet: FleetStore,
    private readonly log: (line: string) => void,
  ) {}

  /** The request as it runs here: a stage granted run tools reaches them through this host's broker. */
  localize(workId: string, rootId: RunId, request: StageRequest): StageRequest {
    const link = request.runTools;
    if (!link || link.home === this.home) return request;
    this.stages.set(workId, { rootId, token: link.token });
    void this.session().register(rootId, [], "relay").catch((err: unknown) => this.log(`run tools of run ${rootId} not relayed: ${ensureError(err).message}`));
    return { ...request, runTools: { ...link, home: this.home } };
  }

  /** The root's result of a call (a message down). */
  result(callId: string, outcome: Outcome): void {
    this.calls.get(callId)?.settle(outcome);
  }

  /** The item ended: its calls get an error result; its root's session goes when no stage of it runs here. */
  ended(workId: string): void {
    const stage = this.stages.get(workId);
    if (!stage) return;
    this.stages.delete(workId);
    for (const [id, c] of this.calls) if (c.workId === workId) this.calls.get(id)?.settle({ ok: false, output: "error: the stage ended before its run answered" });
    if (![...this.stages.values()].some((s) => s.rootId === stage.rootId)) void this.client?.unregister(stage.rootId).catch(() => {});
  }

  close(): void {
    for (const c of [...this.calls.values()]) c.settle({ ok: false, output: "error: the worker host stopped before the run answered" });
    this.client?.close();
  }

  private session(): IntercomClient {
    this.client ??= new IntercomClient({ home: this.home, role: "worker-host", reconnect: true, onMessage: (msg, reply) => void this.onMessage(msg, reply) });
    this.client.start();
    return this.client;
  }

  private async onMessage(msg: IncomingMessage, reply: (body: unknown) => Promise<void>): Promise<void> {
    const outcome = await this.relay(msg);
    if (msg.ask) await reply(outcome).catch(() => {});
  }

  private async relay(msg: IncomingMessage): Promise<Outcome> {
    const body = (msg.body ?? {}) as { type?: unknown; token?: unknown; tool?: unknown; args?: unknown };
    const entry = [...this.stages.entries()].find(([, s]) => s.rootId === msg.to && s.token === body.token);
    if (body.type !== "stage_tool" || typeof body.tool !== "string" || !entry) {
      return { ok: false, output: `error: run ${msg.to} runs on another machine; this worker host carries only its own stages' run tool calls to it` };
    }
    const [workId, stage] = entry;
    const callId = randomUUID();
    const answered = new Promise<Outcome>((resolve) => {
      this.calls.set(callId, {
        workId,
        settle: (o) => {
          this.calls.delete(callId);
          resolve(o);
        },
      });
    });
    const args = body.args && typeof body.args === "object" ? (body.args as Record<string, unknown>) : {};
    try {
      await this.fleet.postUp(stage.rootId, [{ type: "stage_tool_call", workId, callId, token: stage.token, tool: body.tool, args }]);
    } catch (err) {
      this.calls.delete(callId);
      return { ok: false, output: `error: the run could not be reached (${ensureError(err).message}); try again later` };
    }
    return answered;
  }
}
