/**
 * What `import { testRun } from "atomic/testing"` takes and gives back
 * (./test-run.ts runs it). Plain data, so a test can build it inline and
 * compare the result with `toEqual`.
 */

import type { Usage } from "../sdk/types.ts";
import type { RunExport } from "./run-export.ts";

/** A scripted tool call of an agent reply: shown as the runner shows one (started, ended) and written to the transcript. */
export interface ScriptedToolCall {
  name: string;
  input?: unknown;
  /** What the tool returned, for the transcript. */
  output?: string;
  /** False: the call failed (the agent goes on, as a real one would). Default true. */
  ok?: boolean;
}

/**
 * One scripted answer of an agent stage: its text, or an object saying
 * more. Each call of a matching stage takes the next reply; the last one
 * answers every call after it.
 */
export type AgentReply =
  | string
  | {
      text?: string;
      /** The structured output (a stage with `schema`); else a `text` that is JSON is parsed for it. */
      structured?: unknown;
      toolCalls?: ScriptedToolCall[];
      /** Tokens and cost this reply spent (default: one turn, nothing spent). */
      usage?: Partial<Usage>;
      /** The stage fails with this error (a string is its message, code "agent_error"). */
      error?: string | { code?: string; message: string };
      /** The provider fails: "rate_limit", "quota", "auth", "unavailable" … (the code is provider_<this>). */
      providerError?: string;
      /** The stage runs out of its `timeoutMs` (at once: the clock is virtual). */
      timeout?: boolean;
    };

export interface ShellStub {
  stdout?: string;
  stderr?: string;
  /** Default 0; anything else fails the stage as the shell runner does ("exit_code"). */
  exitCode?: number;
}

export interface TestRunOptions {
  inputs?: Record<string, unknown>;
  /** Scripted agents by stage name, path through child workflows (`summarize/report`) or glob pattern (`review-*`); a stage none matches runs its real runner, configured as `atomic run` would in this directory. */
  agents?: Record<string, string | AgentReply[]>;
  /** Shell stages stubbed by stage name, or a glob pattern of the stage name or its command; others run for real. */
  shell?: Record<string, ShellStub>;
  /** Answers to ctx.ask by its name or question (or a glob pattern of either); an unanswered question parks the run. */
  answers?: Record<string, string>;
  /** Messages delivered to stages before they start, by stage name or pattern. */
  messages?: Record<string, string | string[]>;
  /**
   * Crash the run at the stage or step of this name (or pattern), then resume it: a stage when it starts; a
   * `ctx.tool` step after its function returned, before its checkpoint (it runs again, with the same idempotency
   * key). The steps of the resumed drive say what was replayed.
   */
  crashAt?: string;
  /**
   * Replay a recorded run (`atomic export RUN > run.json`: the file's path, or
   * its parsed contents) against this workflow instead of running it: its
   * inputs are the run's, nothing runs live, and `status` is "replayed" (every
   * recorded step matched) or "diverged" (`error` names the first step that did not).
   */
  replay?: string | RunExport;
  /** The time the virtual clock starts at (ms since the epoch; default now). */
  startAt?: number;
}

/** One step of the run, in the order the run went through them. */
export interface TestStep {
  kind: string;
  name: string;
  status: "completed" | "failed" | "cancelled";
  /** Taken from the journal rather than run again (a resumed run's recorded steps). */
  replayed: boolean;
  /** The run it belongs to: the root's id, or a child workflow's. */
  runId: string;
  /** Which drive went through it: 1, then 2 after a crash. */
  drive: number;
}

/** What a stage did, over all its attempts. */
export interface TestStage {
  name: string;
  runner: string;
  /** How many times it was executed (a crash, retries); 0: it was only replayed. */
  attempts: number;
  status: "completed" | "failed" | "cancelled";
  text: string;
  structured?: unknown;
  usage?: Usage;
  /** The prompt (agents) or command (shell), then what came back: readable text. */
  transcript: string;
  error?: { code: string; message: string };
}

export interface TestRunResult {
  runId: string;
  status: string;
  outputs: unknown;
  error?: { code: string; message: string; hint?: string };
  steps: TestStep[];
  stages: Record<string, TestStage>;
  /** True when `crashAt` found its stage or step and the run was resumed. */
  crashed: boolean;
  /** The virtual time the run took (ms): sleeps and timeouts count, none of it was waited for. */
  virtualMs: number;
}
