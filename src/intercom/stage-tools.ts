/**
 * The stage side of the run tools (message, ask_agent, reply): each call
 * is an intercom ask to the run's root session (`<root id>`), with the
 * stage attempt's credential; the driver's reply is the tool's result
 * (engine/mail/stage-tools.ts acts on it).
 *
 * The client starts the broker when none runs (a root only joins one that
 * runs, within a poll tick of its socket appearing), so while the root has
 * not joined yet the ask finds no session: it is tried again for up to
 * JOIN_WAIT_MS. Any failure is a tool result saying so in one sentence,
 * never a rejection: the agent reads it and goes on.
 *
 * The message tool's `attach` (file paths) is read here, where the stage
 * runs, from the stage's working directory (`cwd` of the link): the call
 * carries the files' contents as `attachments`
 * (artifacts/tool-attachments.ts), or is answered at once with why not.
 *
 * ask_user (a CLI agent's) is answered at once: the driver notes the
 * question and the stage parks on it once the agent's turn has ended
 * (engine/mail/stage-tools.ts), so no call waits for a person.
 */

import { readToolAttachments } from "../artifacts/tool-attachments.ts";
import { IntercomClient } from "./client.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { MAX_ASK_TIMEOUT_MS } from "./protocol/index.ts";

/** How long a call waits for the root to join a broker it just started. */
const JOIN_WAIT_MS = 10_000;
/** Tries while the root joins: soon at first (it joins within about a second of its broker starting), then less often. */
const JOIN_RETRY: Backoff = { firstMs: 25, maxMs: 1_000, jitter: 0.2 };
/** What the root may take on top of the tool's own wait (a journal write, a delivery pass). */
const MARGIN_MS = 15_000;

interface Link {
  rootId: string;
  token: string;
  /** The stage's working directory: where the message tool's `attach` paths are read from. */
  cwd?: string;
}

export class StageToolsClient {
  private client: Promise<IntercomClient> | undefined;

  constructor(private readonly home: string) {}

  async call(link: Link, tool: string, given: Record<string, unknown>, signal: AbortSignal): Promise<{ ok: boolean; output: string }> {
    let args = given;
    if (tool === "message" && given.attach !== undefined) {
      const { attach, ...rest } = given;
      const files = link.cwd === undefined ? { refused: "this stage cannot attach files (its working directory is not known here)" } : readToolAttachments(attach, link.cwd);
      if ("refused" in files) return { ok: false, output: `error: ${files.refused}` };
      args = { ...rest, attachments: files };
    }
    const waitS = tool === "ask_agent" && typeof args.timeout_s === "number" ? args.timeout_s : 0;
    const deadline = Date.now() + JOIN_WAIT_MS;
    for (let attempt = 0; ; attempt++) {
      if (signal.aborted) return { ok: false, output: "error: the stage was stopped before the run answered" };
      try {
        const client = await (this.client ??= IntercomClient.connect({ home: this.home, role: "stage-tools", reconnect: true }).catch((err: unknown) => {
          this.client = undefined;
          throw err;
        }));
        const timeoutMs = Math.min(MAX_ASK_TIMEOUT_MS, waitS * 1000 + MARGIN_MS);
        const { reply } = await client.ask(link.rootId, { type: "stage_tool", token: link.token, tool, args }, timeoutMs);
        const body = (reply ?? {}) as { ok?: boolean; output?: string; error?: { message?: string } };
        if (typeof body.output === "string") return { ok: body.ok === true, output: body.output };
        return { ok: false, output: `error: ${body.error?.message ?? "the run gave no answer"}` };
      } catch (err) {
        const code = (err as { code?: string }).code;
        const retry = (code === "no_session" || code === "intercom_unavailable") && Date.now() < deadline;
        if (!retry) return { ok: false, output: `error: the run could not be reached (${(err as Error).message}); try again later` };
        await Bun.sleep(Math.min(backoffDelay(JOIN_RETRY, attempt), Math.max(0, deadline - Date.now())));
      }
    }
  }

  close(): void {
    void this.client?.then((c) => c.close()).catch(() => {});
  }
}
