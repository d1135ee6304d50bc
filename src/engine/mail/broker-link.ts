/**
 * A run tree's sessions with the intercom broker.
 *
 * - Joining: the driver joins the home's broker when one runs; it never
 *   starts one (a run without intercom use pays nothing). While no broker
 *   runs, the client backs off; each poll tick looks for the broker's socket
 *   and, when a new one appears (another inode), connects at once instead
 *   of waiting out the backoff.
 * - Sessions: `<root id>` for the tree, plus `<root id>:<stage path>` while
 *   at least one attempt at that path runs (counted per path, so a fan-out
 *   of n stages costs n, not n²), all in group `<root id>`. The client
 *   registers them again on every new connection.
 * - Incoming: a message to one of these sessions is validated at this edge
 *   (requests.ts) and handed to `onRequest`; its result is the reply when
 *   the sender asked. A body that does not validate is refused (`bad_request`,
 *   to an ask) and logged as a warning of the run; it never reaches the
 *   handler, so nothing a client sends can throw inside the driver.
 */

import { existsSync, statSync } from "node:fs";
import * as v from "valibot";
import { IntercomClient, runGroup } from "../../intercom/client.ts";
import { intercomPaths } from "../../intercom/paths.ts";
import type { IncomingMessage } from "../../intercom/protocol/index.ts";
import { errorInfo } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { RootRequestSchema, StageMessageSchema, describeIssue, type DriverRequest } from "./requests.ts";

export interface BrokerLinkOptions {
  home: string;
  rootId: RunId;
  /** Acts on a validated request; what it returns is the reply (an ask's sender waits for it). */
  onRequest(request: DriverRequest): Promise<unknown>;
  /** A request that did not validate, in one line (the run shows it as a warning). */
  onMalformed(line: string): void;
}

export class BrokerLink {
  private readonly client: IntercomClient;
  /** How many live attempts each stage path has (a path stays registered while any runs). */
  private readonly livePaths = new Map<string, number>();
  private socketSeen = 0;

  constructor(private readonly opts: BrokerLinkOptions) {
    this.client = new IntercomClient({
      home: opts.home,
      role: "root",
      spawn: false,
      reconnect: true,
      onMessage: (msg, reply) => void this.onMessage(msg, reply),
    });
    void this.client.register(opts.rootId, [runGroup(opts.rootId)]).catch(() => {});
    this.client.start();
  }

  /** An attempt at `path` runs: its session exists while any attempt there runs. */
  stageRunning(path: string): void {
    this.livePaths.set(path, (this.livePaths.get(path) ?? 0) + 1);
    void this.client.register(this.sessionOf(path), [runGroup(this.opts.rootId)], "stage").catch(() => {});
  }

  stageEnded(path: string): void {
    const left = (this.livePaths.get(path) ?? 1) - 1;
    if (left > 0) this.livePaths.set(path, left);
    else {
      this.livePaths.delete(path);
      void this.client.unregister(this.sessionOf(path)).catch(() => {});
    }
  }

  /** Each poll tick: no broker when we started? Join one as soon as its socket appears. */
  tick(): void {
    if (this.client.isOpen) return;
    try {
      const socket = intercomPaths(this.opts.home).socket;
      if (!existsSync(socket)) return;
      const ino = statSync(socket).ino;
      if (ino !== this.socketSeen) {
        this.socketSeen = ino;
        this.client.nudge();
      }
    } catch {
      // checked again next tick
    }
  }

  close(): void {
    this.client.close();
  }

  private sessionOf(path: string): string {
    return `${this.opts.rootId}:${path}`;
  }

  private async onMessage(msg: IncomingMessage, reply: (body: unknown) => Promise<void>): Promise<void> {
    const request = this.validate(msg);
    let answer: unknown;
    if ("refused" in request) {
      this.opts.onMalformed(`ignored a malformed intercom request from ${msg.from ?? "an unnamed client"} to ${msg.to}: ${request.refused}`);
      answer = { ok: false, error: { name: "BadRequest", code: "bad_request", message: `malformed request to ${msg.to}: ${request.refused}` } };
    } else {
      try {
        answer = await this.opts.onRequest(request);
      } catch (err) {
        answer = { ok: false, error: errorInfo(err) };
      }
    }
    if (msg.ask) await reply(answer).catch(() => {});
  }

  /** The request a message carries, or why it carries none. */
  private validate(msg: IncomingMessage): DriverRequest | { refused: string } {
    const { rootId } = this.opts;
    const from = msg.from ?? undefined;
    if (msg.to === rootId) {
      const parsed = v.safeParse(RootRequestSchema, msg.body);
      return parsed.success ? { to: "root", request: parsed.output, from } : { refused: describeIssue(parsed.issues) };
    }
    if (!msg.to.startsWith(`${rootId}:`)) return { refused: "not a session of this run" };
    const parsed = v.safeParse(StageMessageSchema, msg.body);
    if (!parsed.success) return { refused: describeIssue(parsed.issues) };
    const body = typeof parsed.output === "string" ? { text: parsed.output } : parsed.output;
    const mode = body.mode ?? msg.mode;
    const message = { text: body.text, ...(mode ? { mode } : {}), ...(body.id !== undefined ? { id: body.id } : {}) };
    return { to: "stage", target: msg.to.slice(rootId.length + 1), message, from };
  }
}
