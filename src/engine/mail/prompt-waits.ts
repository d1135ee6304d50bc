/**
 * A run tree's open questions (ctx.ask) and the steps waiting for their
 * answers.
 *
 * - Which prompts are open, and of which run: the first one to open turns
 *   its run (and the tree) awaiting_input, the last one to close turns it
 *   back; a run stopped while one is open ends awaiting_input.
 * - Waiting: the journal is the source of truth (an answer may come from
 *   `atomic answer`, the status page or intercom, even while no process
 *   drives the run). A waiter reads its prompt, and if it is still open
 *   sleeps until the next poll (MAIL_POLL_MS) or until `wake()` (a
 *   notification through intercom), then reads again. At the deadline it
 *   times the prompt out in the journal (fenced); an answer that won that
 *   race is returned instead.
 */

import type { PromptRecord } from "../../journal/prompts.ts";
import type { RunId } from "../../shared/ids.ts";
import type { MailTree } from "./mail-tree.ts";

export const MAIL_POLL_MS = 250;

export class PromptWaits {
  /** Open prompts of this tree: prompt id → asking run. */
  private readonly open = new Map<string, RunId>();
  private readonly sleepers = new Set<() => void>();

  constructor(private readonly tree: MailTree) {}

  private get rootId(): RunId {
    return this.tree.lease.rootId;
  }

  get waiting(): boolean {
    return this.sleepers.size > 0;
  }

  /** A prompt opens: whether its run, and the tree, had none open before (their status turns awaiting_input). */
  opened(runId: RunId, promptId: string): { runFirst: boolean; treeFirst: boolean } {
    const treeFirst = this.open.size === 0;
    const runFirst = ![...this.open.values()].includes(runId);
    this.open.set(promptId, runId);
    return { runFirst, treeFirst };
  }

  /** A prompt closed (answered or timed out): whether its run, and the tree, have none open now. */
  closed(promptId: string): { runLast: boolean; treeLast: boolean } {
    const runId = this.open.get(promptId);
    this.open.delete(promptId);
    return { runLast: runId !== undefined && ![...this.open.values()].includes(runId), treeLast: this.open.size === 0 };
  }

  /** Runs with an open prompt (a run stopped while one waits ends awaiting_input, not interrupted). */
  hasOpen(runId?: RunId): boolean {
    return runId === undefined ? this.open.size > 0 : [...this.open.values()].includes(runId);
  }

  /**
   * Waits until the prompt is answered (or times out at `deadline`): polls the
   * journal, woken early by `wake()`. Rejects when `signal` aborts.
   */
  async waitForAnswer(promptId: string, deadline: number | null, signal: AbortSignal): Promise<PromptRecord> {
    const { journal, lease } = this.tree;
    for (;;) {
      const prompt = await journal.messages.getPrompt(this.rootId, promptId);
      if (!prompt) throw new Error(`internal: prompt ${promptId} of run ${this.rootId} is not in the journal`);
      if (prompt.state !== "open") return prompt;
      const now = this.tree.clock.now();
      if (deadline !== null && now >= deadline) {
        const after = await journal.messages.timeOutPrompt(lease, this.rootId, promptId);
        if (after && after.state !== "open") return after;
        continue;
      }
      await this.sleep(Math.min(MAIL_POLL_MS, deadline === null ? MAIL_POLL_MS : deadline - now), signal);
    }
  }

  /** Every waiter reads its prompt again now. */
  wake(): void {
    for (const s of [...this.sleepers]) s();
  }

  private sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        reject(signal.reason);
      };
      const timer = setTimeout(done, Math.max(1, ms));
      this.sleepers.add(done);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }
}
