/**
 * The fixture of the openai runner's in-process tests: a fake
 * OpenAI-compatible server, a temp directory with the stage's `work/` cwd,
 * OPENAI_API_KEY set for the test and restored after it, and stage
 * requests pointing at that server (backoff shortened to 20 ms).
 */

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { OpenAIRunner } from "../../src/runners/openai/openai-runner.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { inOrder, startFakeOpenAI, text, type FakeOpenAI } from "./fake-openai.ts";
import { makeTempDir, removeTempDirs } from "./temp.ts";

export interface OpenAIStage {
  server: FakeOpenAI;
  dir: string;
  savedKey: string | undefined;
}

export async function openStage(): Promise<OpenAIStage> {
  const server = await startFakeOpenAI(inOrder(text("hello")));
  const dir = makeTempDir("atomic-openai-");
  mkdirSync(join(dir, "work"));
  const savedKey = process.env.OPENAI_API_KEY;
  process.env.OPENAI_API_KEY = "sk-test";
  return { server, dir, savedKey };
}

export async function closeStage(stage: OpenAIStage): Promise<void> {
  await stage.server.close();
  removeTempDirs();
  if (stage.savedKey === undefined) delete process.env.OPENAI_API_KEY;
  else process.env.OPENAI_API_KEY = stage.savedKey;
}

let attempt = 0;
export function stageRequest(stage: OpenAIStage, extra: Partial<StageRequest> = {}, agent: StageRequest["agent"] = {}): StageRequest {
  return {
    runId: "run-test",
    stageKey: "0",
    stageName: "agent",
    attempt: 1,
    runner: "openai",
    prompt: "do the thing",
    model: "fake-model",
    cwd: join(stage.dir, "work"),
    artifactDir: join(stage.dir, `artifacts-${++attempt}`),
    ...extra,
    agent: { baseUrl: stage.server.url, maxBackoffMs: 20, ...agent },
  };
}

/** Starts the stage in this process, as a worker does; its events are collected. */
export function runStage(req: StageRequest, events: RunnerEvent[] = []) {
  const handle = new OpenAIRunner().start(req, (e) => events.push(e));
  return { handle, events, result: handle.result };
}
