/**
 * The `openai` runner: a built-in agent loop over any OpenAI-compatible
 * chat-completions endpoint (OpenAI, OpenRouter, Ollama, llama.cpp, vLLM).
 *
 * A turn is one streamed model call; when the reply asks for tools, each
 * is run (confined to the stage's cwd, tools.ts) and answered, and the
 * next turn starts. The stage ends on a reply without tool calls (its text
 * is the result), or when the `structured_output` tool was called with a
 * value matching the task's schema. A reply that should have been
 * structured and is not gets a corrective re-prompt naming the problems,
 * at most MAX_CORRECTIONS times; then the stage fails
 * (structured_output_invalid).
 *
 * Delivery modes are native:
 * - steer: queued, added as a user message before the next model call
 *   (after a final answer it starts another turn);
 * - followUp: after the final answer, another turn with the message;
 * - interrupt: the HTTP request in flight is aborted (or the running tool
 *   killed), tool calls not yet answered are dropped from the history,
 *   then the message is delivered and a new turn starts.
 * wrapUp (budget used up), for a cost or token cap, lets the call in
 * flight finish (its usage is counted), runs no tool and makes no new
 * call: the stage ends with what the agent said. For the time limit it
 * aborts the call in flight like interrupt and makes one last call without
 * tools (only `structured_output`, when the task has a schema); its answer
 * ends the stage as completed (agent-loop.ts).
 * hold (the stage paused: `atomic pause RUN STAGE`) lets the turn in flight
 * end, its tools answered, and makes no next model call until unpaused.
 *
 * Sessions: every stage leaves its whole conversation in conversation.json
 * (its attempt's artifact directory); a stage with `continueFrom` starts
 * from the earlier stage's file (its messages after this stage's own system
 * prompt), so a continuation and a fork are the same copy, and the earlier
 * stage's file never changes.
 *
 * The loop is a state machine of its own (agent-loop.ts); requests and
 * their retries are chat-client.ts, the tools tools.ts.
 *
 * Usage per turn comes from the stream's usage chunk (prompt tokens include
 * cached ones: normalized in usage.ts); a provider that sends none gets an
 * estimate, marked `estimated`. Every turn's usage is also streamed as a
 * `usage` event, which is what the root's budget watches.
 */

import type { Runner, RunnerEvent, RunnerHandle, StageRequest } from "../types.ts";
import { AgentLoop } from "./agent-loop.ts";

export class OpenAIRunner implements Runner {
  readonly kind = "openai";
  /** continueFrom replays the earlier conversation into a new one: a fork is the same copy. */
  readonly sessions = { fork: true };

  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle {
    const loop = new AgentLoop(request, onEvent);
    const result = loop.run();
    onEvent({ type: "started" });
    return {
      result,
      send: (message, mode, id) => loop.send(message, mode, id),
      interrupt: () => loop.interruptTurn(),
      cancel: (reason) => loop.stop("cancelled", reason ?? "cancelled"),
      wrapUp: (text, reason) => loop.wrapUp(text, reason ?? "spending"),
      hold: (held) => loop.hold(held),
    };
  }
}
