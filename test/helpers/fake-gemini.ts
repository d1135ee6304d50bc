/**
 * A fake Gemini API for the real `gemini` CLI (fake-provider.ts holds the
 * scripting, the request log and the trap; docs/design/runners.md says how gemini is
 * pointed at it):
 *
 *   const fake = await startFakeGemini();
 *   fake.push(shell("echo hi"), say("done", { prompt: 300, cached: 200, output: 20 }));
 *
 * `POST /v1beta/models/M:streamGenerateContent?alt=sse` streams `data:`
 * lines (no `event:` field: the client's reader expects none), each a
 * GenerateContentResponse: candidates with text or functionCall parts
 * (gemini's shell tool is `run_shell_command {command}`), the last with
 * finishReason and usageMetadata (promptTokenCount includes
 * cachedContentTokenCount). A reply can instead be an HTTP error (status,
 * the API's error body, headers such as Retry-After) or an `error` object
 * inside the stream. The CLI's side calls (non-streamed generateContent,
 * for its own checks, and countTokens) are answered and logged.
 */

import { startFakeProvider, streamResponse, type FakeProvider } from "./fake-provider.ts";

export interface GeminiUsage {
  prompt: number;
  output: number;
  cached?: number;
}

export interface GeminiReply {
  text?: string | string[];
  calls?: { name?: string; args: Record<string, unknown> }[];
  usage?: GeminiUsage;
  model?: string;
  /** An HTTP error instead of a stream. */
  status?: number;
  headers?: Record<string, string>;
  /** The API's error (the body of an HTTP error, or the stream's error object with `streamError`). */
  error?: { code: number; status: string; message: string };
  /** An error object inside the stream after the text. */
  streamError?: boolean;
  /** Hold the reply until this resolves (or the client goes away). */
  hold?: Promise<unknown>;
}

export type FakeGemini = FakeProvider<GeminiReply>;

export const DEFAULT_USAGE: GeminiUsage = { prompt: 100, output: 10 };

export const say = (text: string | string[], usage: GeminiUsage = DEFAULT_USAGE): GeminiReply => ({ text, usage });
export const shell = (command: string, usage: GeminiUsage = DEFAULT_USAGE): GeminiReply => ({ calls: [{ args: { command } }], usage });
export const httpError = (status: number, apiStatus: string, message: string, headers: Record<string, string> = {}): GeminiReply => ({ status, headers, error: { code: status, status: apiStatus, message } });
export const streamFailure = (message: string, partial = "Partial"): GeminiReply => ({ text: partial, streamError: true, error: { code: 500, status: "INTERNAL", message } });

/** The model a request named (`/v1beta/models/M:method`). */
export const modelOf = (path: string) => /\/models\/([^:/]+):/.exec(path)?.[1] ?? "";

export function startFakeGemini(): Promise<FakeGemini> {
  return startFakeProvider<GeminiReply>({
    handles: (req) => req.method === "POST" && req.path.endsWith(":streamGenerateContent"),
    other(req) {
      if (req.method === "POST" && req.path.endsWith(":countTokens")) return Response.json({ totalTokens: 10 });
      // The CLI's own checks (next speaker, loop detection) ask for JSON: "the user speaks next".
      if (req.method === "POST" && req.path.endsWith(":generateContent")) return Response.json(chunk({ text: '{"reasoning":"done","next_speaker":"user"}', usage: { prompt: 0, output: 0 } }, modelOf(req.path), true));
      return undefined;
    },
    fallback: say("(the fake provider has no reply scripted)", { prompt: 1, output: 1 }),
    async respond(reply, req, signal) {
      if (reply.hold) await Promise.race([reply.hold, new Promise((r) => signal.addEventListener("abort", r))]);
      if (reply.status) return Response.json({ error: reply.error ?? { code: reply.status, status: "UNKNOWN", message: `fake error ${reply.status}` } }, { status: reply.status, headers: reply.headers });
      return streamResponse(events(reply, modelOf(req.path)), signal);
    },
  });
}

const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;

function chunk(reply: GeminiReply, model: string, last: boolean, parts?: unknown[]) {
  const u = reply.usage ?? DEFAULT_USAGE;
  const text = reply.text === undefined ? [] : [Array.isArray(reply.text) ? reply.text.join("") : reply.text];
  return {
    candidates: [{ content: { role: "model", parts: parts ?? text.map((t) => ({ text: t })) }, index: 0, ...(last ? { finishReason: "STOP" } : {}) }],
    ...(last ? { usageMetadata: { promptTokenCount: u.prompt, candidatesTokenCount: u.output, totalTokenCount: u.prompt + u.output, ...(u.cached !== undefined ? { cachedContentTokenCount: u.cached } : {}) } } : {}),
    modelVersion: reply.model ?? model,
  };
}

function events(reply: GeminiReply, model: string): string[] {
  const out: string[] = [];
  const texts = reply.text === undefined ? [] : Array.isArray(reply.text) ? reply.text : [reply.text];
  for (const t of texts) out.push(data(chunk(reply, model, false, [{ text: t }])));
  if (reply.streamError) {
    // As a data line, gemini 0.61 sees a stream that ended without a finish reason (and retries it 3 times);
    // a bare JSON chunk it would take as an HTTP error only when it arrives as a read of its own.
    out.push(data({ error: reply.error ?? { code: 500, status: "INTERNAL", message: "stream error" } }));
    return out;
  }
  const calls = (reply.calls ?? []).map((c) => ({ functionCall: { name: c.name ?? "run_shell_command", args: c.args } }));
  out.push(data(chunk(reply, model, true, calls)));
  return out;
}
