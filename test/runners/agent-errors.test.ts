/**
 * An error inside a provider's reply stream, as the CLI agents pass it on
 * (src/runners/cli-agents/agent-errors.ts): mapped to the shared codes by
 * its type or code when the CLI keeps them, else by its words, else
 * provider_unavailable (as the openai runner's mid-stream error); the
 * message names the CLI and keeps the provider's words.
 */

import { expect, test } from "bun:test";
import { streamedErrorIn, streamFailure } from "../../src/runners/cli-agents/agent-errors.ts";

test("an in-stream error object: its type or code decides the code; the words are kept", () => {
  const cases: [string, string][] = [
    ['{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}', "provider_rate_limit"],
    ['{"error":{"message":"quota per minute","code":429,"status":"RESOURCE_EXHAUSTED"}}', "provider_rate_limit"],
    ['{"message":"bad key","type":"authentication_error"}', "provider_auth"],
    ['{"message":"no credit left","code":"insufficient_quota"}', "provider_quota"],
    ['{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}', "provider_bad_request"],
    ['{"message":"Overloaded","type":"overloaded_error"}', "provider_unavailable"],
    ['{"message":"the stream broke down"}', "provider_unavailable"],
  ];
  for (const [text, code] of cases) {
    const e = streamedErrorIn(text)!;
    const f = streamFailure("opencode", e);
    expect({ text, code: f.code }).toEqual({ text, code });
    expect(f.message).toStartWith("opencode: ");
    expect(f.message).toContain("inside its reply stream");
    expect(f.message).toEndWith(`: ${JSON.parse(text).message ?? JSON.parse(text).error.message}`);
  }
});

test("words only (pi): a rate limit said in words is one; anything else is the provider's, retryable; text that is not an error object is not one", () => {
  expect(streamFailure("pi", { message: "Too many requests, slow down" }).code).toBe("provider_rate_limit");
  expect(streamFailure("pi", { message: "the model crashed" })).toEqual({ ok: false, code: "provider_unavailable", message: "pi: the provider reported an error (inside its reply stream): the model crashed" });
  expect(streamedErrorIn("plain words")).toBeUndefined();
  expect(streamedErrorIn('{"no":"message"}')).toBeUndefined();
});
