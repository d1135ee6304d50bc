/**
 * A failure a CLI agent reported in its own words, mapped onto the error
 * codes the openai runner uses (provider-errors.ts does the classifying:
 * provider_auth, provider_rate_limit, provider_unavailable,
 * provider_bad_request, ...; anything that is not the provider's is
 * agent_error). The CLIs do not hand us the HTTP response, only text such
 * as codex's "unexpected status 401 Unauthorized: …" or gemini's
 * `[API Error: {"error":{"code":429,…}}]`, so the status is read from the
 * text (or given, when the CLI reports it as a field) and the provider's
 * own words are kept in the message. The exit status is added by the
 * runner (cli-runner.ts) when the process has ended.
 */

import { classifyHttpError, oneLine } from "../openai/provider-errors.ts";

export interface AgentFailure {
  ok: false;
  code: string;
  message: string;
}

/** Words that mean the reply stream broke (retryable, like a 5xx). */
const STREAM_BROKEN = /stream (disconnected|ended|error|closed)|incomplete json|connection (reset|refused|closed)|premature close|ECONNRESET|ECONNREFUSED/i;
/** A 429 told in words only (gemini: "Rate limit hit. Please retry in 60s."). */
const RATE_LIMITED = /rate limit|too many requests|please retry in \d|RESOURCE_EXHAUSTED/i;
/** Words a CLI puts in place of a 5xx (codex: "We're currently experiencing high demand…"). */
const UNAVAILABLE = /high demand|overloaded|temporarily unavailable|service unavailable|internal server error/i;

export function agentFailure(cli: string, words: string, opts: { status?: number; model?: string | undefined } = {}): AgentFailure {
  const said = oneLine(words);
  // gemini wraps the provider's words ("[API Error: …]") and may add advice of its own after them
  const inner = /\[API Error: (.*)\]/.exec(said)?.[1] ?? said;
  const status = opts.status ?? statusIn(said) ?? (RATE_LIMITED.test(inner) ? 429 : undefined);
  if (status !== undefined && status >= 400 && status < 600) {
    const e = classifyHttpError(status, innerJson(said) ?? inner, new Headers(), opts.model);
    return { ok: false, code: e.code, message: `${cli}: ${e.message}` };
  }
  if (/invalid_request_error|INVALID_ARGUMENT/.test(said)) return { ok: false, code: "provider_bad_request", message: `${cli}: the provider refused the request: ${said}` };
  if (UNAVAILABLE.test(said)) return { ok: false, code: "provider_unavailable", message: `${cli}: the provider is unavailable: ${said}` };
  if (STREAM_BROKEN.test(said)) return { ok: false, code: "provider_unavailable", message: `${cli}: the provider's reply broke off: ${said}` };
  return { ok: false, code: "agent_error", message: `${cli} reported an error: ${said || "(no message)"}` };
}

/** An HTTP status named in the text: `status 401`, `status: 429`, `HTTP 500`, `"code":400`, `429 Too Many Requests`. */
function statusIn(text: string): number | undefined {
  const m = /\b(?:status:?|HTTP)\s*([1-5]\d\d)\b/i.exec(text) ?? /"code"\s*:\s*([1-5]\d\d)\b/.exec(text) ?? /\b([45]\d\d) (?:Unauthorized|Forbidden|Bad Request|Not Found|Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b/.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** The JSON error body inside a CLI's message (`[API Error: {...}]`), for the provider's own message. */
function innerJson(text: string): string | undefined {
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  if (start < 0 || end <= start) return undefined;
  const candidate = text.slice(start, end + 1);
  try {
    JSON.parse(candidate);
    return candidate;
  } catch {
    return undefined;
  }
}
