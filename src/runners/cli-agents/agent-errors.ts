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
 *
 * An error inside the reply stream (the response began 200 OK, then an
 * error event or chunk came) has no HTTP status: `streamFailure` reads the
 * kind from the error's own type or code where the CLI passes them on
 * (opencode passes the provider's error object; pi only its message;
 * gemini neither: it reports a stream that "ended without a finish
 * reason"), and is otherwise provider_unavailable, as the openai runner's
 * mid-stream error is: retryable, and the provider's, not the agent's.
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

/** The provider's error object from inside a stream, as far as the CLI passed it on. */
export interface StreamedError {
  message: string;
  /** Its `type`, `code` or `status` fields (`rate_limit_error`, `rate_limit_exceeded`, `RESOURCE_EXHAUSTED`, 429…). */
  kind?: string;
}

/** Kinds of in-stream errors by their type or code words, first match wins (what is not here is provider_unavailable). */
const STREAM_KINDS: readonly [RegExp, string, string][] = [
  [/auth|api.?key|permission|unauthenticated|forbidden|\b40[13]\b/i, "provider_auth", "the provider refused the API key"],
  [/quota|insufficient|billing|credit|\b402\b/i, "provider_quota", "the provider account is out of quota or credit"],
  [/rate.?limit|too.?many|resource.?exhausted|\b429\b/i, "provider_rate_limit", "rate limited by the provider"],
  [/invalid.?request|invalid.?argument|bad.?request|context.?length|\b4(00|13|22)\b/i, "provider_bad_request", "the provider refused the request"],
];

/** An error the provider reported inside its reply stream (no HTTP status), in the shared codes. */
export function streamFailure(cli: string, error: StreamedError): AgentFailure {
  const said = oneLine(error.message) || "(no message)";
  const kind = error.kind?.trim() ? oneLine(error.kind) : undefined;
  const where = `inside its reply stream${kind ? `, ${kind}` : ""}`;
  const match = STREAM_KINDS.find(([re]) => re.test(`${kind ?? ""} ${kind ? "" : said}`));
  if (match) return { ok: false, code: match[1], message: `${cli}: ${match[2]} (${where}): ${said}` };
  return { ok: false, code: "provider_unavailable", message: `${cli}: the provider reported an error (${where}): ${said}` };
}

/** The provider's error object in a text the CLI passed on (`{"message":…,"type":…,"code":…}` or `{"error":{…}}`), if it is one. */
export function streamedErrorIn(text: string): StreamedError | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const outer = parsed as Record<string, unknown>;
  const e = (typeof outer.error === "object" && outer.error !== null ? outer.error : outer) as Record<string, unknown>;
  if (typeof e.message !== "string") return undefined;
  const kind = [e.type, e.code, e.status].filter((x) => typeof x === "string" || typeof x === "number").join(" ");
  return { message: e.message, ...(kind ? { kind } : {}) };
}
