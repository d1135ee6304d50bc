/**
 * Provider errors, classified so that the stage's error code says what
 * happened and whether retrying can help:
 *
 * | code                   | when                                           | retried |
 * |------------------------|------------------------------------------------|---------|
 * | provider_auth          | 401, 403                                       | no      |
 * | provider_quota         | 429 (or 402) saying the quota/credit is gone   | no      |
 * | provider_rate_limit    | other 429                                      | yes     |
 * | provider_unknown_model | 404, or a 400 naming a missing model           | no      |
 * | provider_unavailable   | 5xx, connection refused/reset, request timeout | yes     |
 * | provider_bad_response  | malformed JSON, a stream cut off mid-way       | yes     |
 * | provider_bad_request   | any other 4xx                                  | no      |
 *
 * Messages are one line: what the provider said, trimmed.
 */

import { backoffDelay } from "../../shared/backoff.ts";

export type ProviderErrorCode =
  | "provider_auth"
  | "provider_quota"
  | "provider_rate_limit"
  | "provider_unknown_model"
  | "provider_unavailable"
  | "provider_bad_response"
  | "provider_bad_request";

const RETRYABLE: ReadonlySet<ProviderErrorCode> = new Set(["provider_rate_limit", "provider_unavailable", "provider_bad_response"]);

export class ProviderError extends Error {
  override name = "ProviderError";
  constructor(
    readonly code: ProviderErrorCode,
    message: string,
    readonly status?: number,
    /** From Retry-After, when the provider sent one. */
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }
}

/** Classifies an HTTP error response from its status, body text and headers. */
export function classifyHttpError(status: number, body: string, headers: Headers, model: string | undefined): ProviderError {
  const detail = providerMessage(body);
  const code = providerCode(body);
  const retryAfterMs = parseRetryAfter(headers.get("retry-after"));
  const said = detail ? `: ${detail}` : "";
  if (status === 401 || status === 403) {
    return new ProviderError("provider_auth", `the provider refused the API key (HTTP ${status})${said}`, status);
  }
  if (status === 402 || (status === 429 && /quota|credit|billing|insufficient/i.test(`${code} ${detail}`))) {
    return new ProviderError("provider_quota", `the provider account is out of quota or credit (HTTP ${status})${said}`, status);
  }
  if (status === 429) return new ProviderError("provider_rate_limit", `rate limited by the provider (HTTP 429)${said}`, status, retryAfterMs);
  if (status === 404 || ((status === 400 || status === 422) && /model/i.test(`${code} ${detail}`) && /not.?found|does not exist|unknown|invalid model/i.test(`${code} ${detail}`))) {
    return new ProviderError("provider_unknown_model", `the provider does not know the model ${JSON.stringify(model ?? "")} (HTTP ${status})${said}`, status);
  }
  if (status >= 500) return new ProviderError("provider_unavailable", `the provider is unavailable (HTTP ${status})${said}`, status, retryAfterMs);
  return new ProviderError("provider_bad_request", `the provider refused the request (HTTP ${status})${said}`, status);
}

/** A network-level failure (connection refused, reset, DNS, timeout). */
export function networkError(err: unknown, url: string): ProviderError {
  const e = err as { name?: string; code?: string; message?: string };
  const what = e?.name === "TimeoutError" ? "timed out" : (e?.code ?? e?.message ?? String(err));
  return new ProviderError("provider_unavailable", `cannot reach the provider at ${url} (${oneLine(String(what))})`);
}

/** Retry-After: delta seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/**
 * How long to wait before retry number `attempt` (1-based): Retry-After when
 * the provider sent one, else exponential backoff from 500 ms with jitter;
 * never more than `maxMs`.
 */
export function retryDelay(attempt: number, err: ProviderError, maxMs: number, random = Math.random): number {
  if (err.retryAfterMs !== undefined) return Math.min(maxMs, err.retryAfterMs);
  return backoffDelay({ firstMs: 500, maxMs, jitter: 0.25 }, attempt - 1, random);
}

function providerMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown };
    const m = typeof parsed.error === "string" ? parsed.error : (parsed.error?.message ?? parsed.message);
    if (typeof m === "string") return oneLine(m);
  } catch {
    // not JSON: use the text
  }
  return oneLine(body);
}

function providerCode(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { code?: unknown; type?: unknown } };
    return `${String(parsed.error?.code ?? "")} ${String(parsed.error?.type ?? "")}`;
  } catch {
    return "";
  }
}

export function oneLine(text: string, max = 300): string {
  const t = text.replace(/\s+/g, " ").trim();
  return t.length > max ? `${t.slice(0, max)}…` : t;
}
