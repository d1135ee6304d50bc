/**
 * The query of the run list (`GET /api/runs`): its parameters read and
 * checked, each problem one sentence with a hint. The journal does the
 * searching (ListRunsFilter; journal/run-search.ts for the text).
 */

import { INSTANT_EXAMPLES, parseInstant } from "../shared/age.ts";
import { AtomicError } from "../shared/errors.ts";
import { parseTagPairs } from "../shared/tags.ts";
import { badOriginMessage, isRunOrigin, type RunOriginFilter } from "../journal/run-origin.ts";
import { MAX_SEARCH_TEXT } from "../journal/run-search.ts";
import { RUN_STATUSES, type RunStatus } from "../journal/runs.ts";
import type { RunListQuery } from "./summaries.ts";

export interface QueryProblem {
  code: string;
  message: string;
  hint?: string;
}

/** What a request's query parameters read as (`one` the single value, `all` a repeated one). */
export interface QueryParams {
  one(name: string): string | undefined;
  all(name: string): string[];
}

function whole(raw: string | undefined, name: string, dflt: number, min: number, max: number): number | QueryProblem {
  if (raw === undefined || raw === "") return dflt;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) {
    return { code: "bad_paging", message: `${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}` };
  }
  return n;
}

function instant(raw: string | undefined, name: string, now: number): number | undefined | QueryProblem {
  if (raw === undefined || raw.trim() === "") return undefined;
  const at = parseInstant(raw, now);
  return at ?? { code: "bad_time", message: `${name} ${JSON.stringify(raw.slice(0, 80))} is neither a date nor an age`, hint: `use ${INSTANT_EXAMPLES}` };
}

const isProblem = (v: unknown): v is QueryProblem => typeof v === "object" && v !== null && "code" in v;

/** The run list query of these parameters, or what is wrong with them. */
export function readRunListQuery(p: QueryParams, now = Date.now()): RunListQuery | QueryProblem {
  const status = p.one("status");
  if (status !== undefined && status !== "" && !(RUN_STATUSES as readonly string[]).includes(status)) {
    return { code: "bad_status", message: `status must be one of ${RUN_STATUSES.join(", ")}, got ${JSON.stringify(status)}` };
  }
  const limit = whole(p.one("limit"), "limit", 50, 1, 500);
  if (isProblem(limit)) return limit;
  const offset = whole(p.one("offset"), "offset", 0, 0, 1_000_000_000);
  if (isProblem(offset)) return offset;
  let tags: Record<string, string>;
  try {
    tags = parseTagPairs(p.all("tag"), "tag");
  } catch (err) {
    if (err instanceof AtomicError) return { code: err.code, message: err.message, hint: "for example ?tag=team=search (repeat for runs with every tag)" };
    throw err;
  }
  const text = p.one("q") ?? "";
  if (text.length > MAX_SEARCH_TEXT) return { code: "bad_query", message: `q is ${text.length} characters long; at most ${MAX_SEARCH_TEXT} are searched for`, hint: "search for a shorter, telling part" };
  const since = instant(p.one("since"), "since", now);
  if (isProblem(since)) return since;
  const until = instant(p.one("until"), "until", now);
  if (isProblem(until)) return until;
  if (since !== undefined && until !== undefined && until <= since) {
    return { code: "bad_time", message: "until must be later than since", hint: "for example ?since=2026-12-01&until=2026-12-02" };
  }
  const workflow = p.one("workflow")?.trim() ?? "";
  const origin = p.one("origin")?.trim() ?? "";
  if (origin && !isRunOrigin(origin)) return { code: "bad_origin", message: badOriginMessage(origin), hint: "for example ?origin=schedule" };
  return {
    ...(origin ? { origin: origin as RunOriginFilter } : {}),
    ...(status ? { status: status as RunStatus } : {}),
    ...(Object.keys(tags).length > 0 ? { tags } : {}),
    ...(workflow ? { workflow } : {}),
    ...(text.trim() ? { text: text.trim() } : {}),
    ...(since !== undefined ? { since } : {}),
    ...(until !== undefined ? { until } : {}),
    limit,
    offset,
  };
}

export { isProblem as isQueryProblem };
