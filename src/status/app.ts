/**
 * The status server's Hono app: the page, the JSON API, the event streams.
 *
 * Every request first passes the Host check (security.ts), then
 * authentication (auth.ts): every route but `/healthz` needs the session
 * cookie a login URL set, or the bearer token; a request that changes
 * something also passes the Origin check. Errors are JSON `{ error: { code,
 * message, hint? } }` with a fitting status: 400 bad input, 401 no token or
 * session, 403 wrong token, foreign Host or Origin, 404 unknown run or
 * stage, 409 a control, message or answer that does not fit the run's state,
 * 503 journal unavailable; 400 also for a request without a Host header
 * (there is nothing to check), 413 for a body over MAX_BODY_BYTES (by its
 * Content-Length before reading, or once that many bytes of a chunked body
 * arrived; a message's body may also hold one attachment's cap in base64). A browser asking for a page without a session
 * gets a short HTML page (401) saying how to sign in.
 * No CORS headers: other origins cannot read anything. Every answer carries
 * a strict Content-Security-Policy (scripts and styles only from here).
 *
 * The app takes its parts (source, control, token, Host policy) as
 * arguments, so tests drive it with `app.request()` and no socket.
 */

import { Hono, type Context } from "hono";
import type { RunRecord } from "../journal/runs.ts";
import { isQueryProblem, readRunListQuery } from "./run-query.ts";
import { UnsafeArtifactError } from "../artifacts/stage-logs.ts";
import { AtomicError, UsageError } from "../shared/errors.ts";
import { fileSystemFault } from "../shared/file-system-fault.ts";
import { VERSION } from "../shared/version.ts";
import { formatBytes } from "../shared/format-bytes.ts";
import { isControlAction, CONTROL_ACTIONS, httpStatusOf, type StatusControl } from "./control.ts";
import { pageAsset, pageHtml } from "./page.ts";
import { isPagePath, signInPage, StatusAuth } from "./auth.ts";
import { checkRunToken, looksLikeRunToken, runOfPath } from "./run-tokens.ts";
import type { HostPolicy } from "./security.ts";
import type { Miss, StatusSource } from "./source.ts";
import { parseCursor } from "./stream-cursor.ts";
import { inbox } from "../engine/messaging.ts";
import { scheduleViews } from "./schedules.ts";
import { USAGE_GROUPINGS, usageReport, type UsageGrouping } from "./usage-report.ts";
import { INSTANT_EXAMPLES, parseInstant } from "../shared/age.ts";

/**
 * What starts runs for the API: a posted run, a resume, a rerun, a fork
 * (service/operator.ts, the actions `atomic mcp` uses too). Refusals are
 * UsageErrors whose codes map to statuses (startStatus).
 */
export interface RunStarting {
  start(req: { workflow: string; inputs: Record<string, unknown>; id?: string }): Promise<{ runId: string; created: boolean; status: string }>;
  resume(runId: string): Promise<{ runId: string; drivenBy: string }>;
  rerun(runId: string, inputs?: Record<string, unknown>): Promise<{ runId: string; from: string }>;
  fork(runId: string, at: string): Promise<{ runId: string; from: string }>;
  workflows(): Promise<unknown[]>;
}

export interface StatusAppOptions {
  source: StatusSource;
  control: StatusControl;
  token: string;
  hosts: HostPolicy;
  starter?: RunStarting;
}

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

type Status = 400 | 401 | 403 | 404 | 409 | 413 | 500 | 501 | 503;

/** The most bytes a request body may have (controls, messages and answers are small JSON). */
export const MAX_BODY_BYTES = 64 * 1024;

/** The most runs one bulk action takes (named or matched by a filter). */
const BULK_MAX = 500;

function fail(c: Context, status: Status, code: string, message: string, hint?: string): Response {
  return c.json({ error: { code, message, ...(hint ? { hint } : {}) } }, status);
}

/** A whole number from a query parameter, or an error message. */
/**
 * Where an event stream starts: the cursor of `Last-Event-ID` (or `?cursor=`), read by `parse`, else `?from=`
 * ("start", the default, or "now"); a 400 response for what is neither.
 */
function streamStart<T>(c: Context, parse: (text: string) => T | undefined, kind: string): T | "start" | "now" | Response {
  const lastId = c.req.header("last-event-id");
  const cursorText = lastId || c.req.query("cursor");
  if (cursorText) {
    const cursor = parse(cursorText);
    if (cursor !== undefined) return cursor;
    return fail(c, 400, "bad_cursor", `${lastId ? "Last-Event-ID" : "cursor"} ${JSON.stringify(cursorText.slice(0, 80))} is not a ${kind}`, "use the id of an event this stream sent");
  }
  const fromText = c.req.query("from");
  if (fromText === undefined || fromText === "start" || fromText === "now") return fromText ?? "start";
  return fail(c, 400, "bad_from", `from must be "start" or "now", got ${JSON.stringify(fromText)}`);
}

/** The routes that answer with a server-sent event stream. */
const STREAM_ROUTES = ["/api/runs/:id/stream", "/api/runs/:id/stages/:stage/stream"] as const;

/**
 * Turns Bun's idle timeout off for an event stream's request (a stream may be quiet for long; its heartbeat is
 * for proxies in between). It runs before anything else, Host check and authentication included: Bun's timer
 * sweeps every few seconds, so a request still being answered (a slow journal read while it opens) could
 * otherwise be cut by the sweep before its first byte.
 */
function noIdleTimeout(c: Context, next: () => Promise<void>): Promise<void> {
  (c.env as { timeout?: (req: Request, seconds: number) => void } | undefined)?.timeout?.(c.req.raw, 0);
  return next();
}

/** A server-sent event stream response (its request has no idle timeout: noIdleTimeout). */
function eventStream(body: ReadableStream<Uint8Array>): Response {
  return new Response(body, {
    headers: {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache, no-transform",
      "X-Accel-Buffering": "no",
    },
  });
}

function intParam(c: Context, name: string, dflt: number, min: number, max: number): number | string {
  const raw = c.req.query(name);
  if (raw === undefined || raw === "") return dflt;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) {
    return `${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`;
  }
  return n;
}

export function createStatusApp(opts: StatusAppOptions): Hono {
  const { source, control, token, hosts, starter } = opts;
  const auth = new StatusAuth(token, hosts);
  const app = new Hono();
  // A message may carry attachments (base64 in its JSON): room for one file at the cap, besides the text.
  const messageBodyBytes = MAX_BODY_BYTES + Math.ceil(control.maxAttachmentBytes / 3) * 4;

  const secure = (c: Context) => {
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Referrer-Policy", "no-referrer");
    c.header("X-Frame-Options", "DENY");
    c.header("Content-Security-Policy", CSP);
  };
  for (const route of STREAM_ROUTES) app.use(route, noIdleTimeout);
  app.use("*", async (c, next) => {
    // Bun hands over a request without a Host header with a relative URL ("/healthz"): nothing to check it against.
    const host = c.req.header("host") ?? (URL.canParse(c.req.url) ? new URL(c.req.url).host : undefined);
    if (!host) {
      c.res = fail(c, 400, "missing_host", "the request has no Host header", `send Host: ${hosts.url("").slice("http://".length)}`);
      secure(c);
      return c.res;
    }
    if (!hosts.allows(host)) {
      const res = fail(c, 403, "forbidden_host", `this server answers to ${hosts.url("")}, not to Host ${JSON.stringify(host)}`, "open the address atomic serve printed");
      c.res = res;
      secure(c);
      return c.res;
    }
    await next();
    secure(c);
  });

  app.use("*", async (c, next) => {
    const path = new URL(c.req.url).pathname;
    if (path === "/healthz") return next();
    const reading = c.req.method === "GET" || c.req.method === "HEAD";
    const page = reading && isPagePath(path);
    const login = page ? c.req.query("token") : undefined;
    if (login !== undefined) {
      if (auth.isToken(login)) return auth.login(c);
      c.header("Cache-Control", "no-store");
      return c.html(signInPage("bad_link"), 403);
    }
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "")?.[1];
    if (bearer && looksLikeRunToken(bearer)) {
      // A run token (run-tokens.ts): reads of its own run tree, nothing else.
      const checked = checkRunToken(token, bearer);
      const mint = "mint one with: atomic token --run ID --read-only --ttl 1h";
      if ("refused" in checked) {
        return checked.refused === "expired" ? fail(c, 403, "token_expired", "this run token has expired", mint) : fail(c, 403, "wrong_token", "this run token is not valid on this server", mint);
      }
      if (!reading) return fail(c, 403, "read_only_token", "this token can only read: it cannot send, answer or control anything", "use the status token for that");
      const ref = runOfPath(path);
      const found = ref === undefined ? undefined : await source.findRun(ref);
      if (!found || "miss" in found || found.rootId !== checked.rootId) {
        return fail(c, 403, "run_token_scope", `this token can read run ${checked.rootId} only`, `its API is under /api/runs/${checked.rootId}`);
      }
      return next();
    }
    const caller = auth.caller(c);
    if (caller === "wrong") return fail(c, 403, "wrong_token", "the status token is wrong", "use the token in $ATOMIC_HOME/status-token");
    if (caller === "missing") {
      c.header("Cache-Control", "no-store");
      if (page) return c.html(signInPage("missing"), 401);
      c.header("WWW-Authenticate", 'Bearer realm="atomic"');
      return fail(c, 401, "token_required", "this request needs the status token or a signed-in session", "open the login URL atomic serve printed, or send Authorization: Bearer <the token in $ATOMIC_HOME/status-token>");
    }
    if (!reading) {
      const problem = auth.originProblem(c, caller);
      if (problem) return fail(c, 403, "forbidden_origin", problem, "use the status page itself, or send the bearer token without an Origin header");
      // The body is read here, capped, before any route looks at the run: a route never reads more.
      const message = c.req.method === "POST" && MESSAGES_PATH.test(path);
      const body = await cappedBody(c.req.raw, message ? messageBodyBytes : MAX_BODY_BYTES);
      if (body === TOO_LARGE) {
        c.header("Connection", "close"); // the rest of the body is not read
        if (message) {
          return fail(c, 413, "body_too_large", `the message and its attachments are over ${formatBytes(messageBodyBytes)} (the attachment cap of ${formatBytes(control.maxAttachmentBytes)}, in base64, and the text)`, "attach fewer or smaller files, or raise artifacts.maxAttachmentBytes in config.json");
        }
        return fail(c, 413, "body_too_large", `the request body is over ${MAX_BODY_BYTES / 1024} KiB`, "controls, messages and answers are short JSON; send a shorter text");
      }
      bodies.set(c.req.raw, body);
    }
    await next();
  });

  app.onError((thrown, c) => {
    const err = fileSystemFault(thrown) ?? thrown;
    if (err instanceof AtomicError && err.disposition === "retryable") return fail(c, 503, err.code, err.message, err.hint);
    process.stderr.write(`status server: ${c.req.method} ${new URL(c.req.url).pathname} failed: ${err.stack ?? err.message}\n`);
    return fail(c, 500, "internal", err.message || "internal error", "this is a bug in atomic; the server's stderr has the details");
  });
  app.notFound((c) => fail(c, 404, "not_found", `no route ${c.req.method} ${new URL(c.req.url).pathname}`, "the API is listed in docs/reference/http-api.md"));

  const respondMiss = (c: Context, m: Miss) => fail(c, m.miss === "ambiguous" ? 409 : 404, m.miss, m.message, m.hint);

  async function runOf(c: Context): Promise<RunRecord | Response> {
    const found = await source.findRun(c.req.param("id") ?? "");
    return "miss" in found ? respondMiss(c, found) : found;
  }

  // ---------------------------------------------------------------- page

  const page = (c: Context) => {
    c.header("Cache-Control", "no-store");
    return c.html(pageHtml());
  };
  // The page: the run list. With `?token=<token>`: sign in (sets the session cookie, 303 to the address without it).
  app.get("/", page);
  // The page of one run (full id or unique prefix); `?token=` signs in as on `/`.
  app.get("/runs/:id", page);
  // The cost page: tokens and money by workflow, stage, model or runner (`?by=`), a bar per day, since a time (`?since=`), as `atomic usage`.
  app.get("/usage", page);
  // The page's scripts and style sheet (embedded in the binary), with an ETag.
  app.get("/assets/:file", (c) => {
    const asset = pageAsset(c.req.param("file"));
    if (!asset) return fail(c, 404, "not_found", `no asset ${c.req.param("file")}`);
    if (c.req.header("if-none-match") === asset.etag) return c.body(null, 304);
    c.header("Content-Type", asset.type);
    c.header("ETag", asset.etag);
    c.header("Cache-Control", "no-cache");
    return c.body(asset.body);
  });

  // ---------------------------------------------------------------- health and metrics

  // `{ ok, version }`; the one route without authentication.
  app.get("/healthz", (c) => c.json({ ok: true, version: VERSION }));
  // OpenMetrics text (status/metrics.ts lists the metrics): runs by status, stage counts, tokens and cost, durations, queue waits.
  app.get("/metrics", async (c) => {
    const body = await source.metrics.render();
    c.header("Content-Type", source.metrics.contentType);
    return c.body(body);
  });

  // The local service beside this server (`atomic serve`): `{ state: "active" | "standby" | "stopped", pid, active, duties, recovery }`,
  // or `{ state: "none" }` under `atomic run --serve`.
  app.get("/api/service", (c) => c.json(source.service ? source.service.describe() : { state: "none" }));

  // ---------------------------------------------------------------- runs

  // Root runs, newest first: `{ runs, total, limit, offset }`, searched in the journal. `status`: one stored status
  // (running, completed, failed, cancelled, blocked, interrupted, awaiting_input, skipped); `workflow`: runs of the
  // workflow of that name; `q`: text in the id, workflow, inputs, outputs or error (any case); `since` and `until`:
  // started at or after, and before, an ISO date or time or an age (`2h`, `7d`); `tag=KEY=VALUE` (repeatable): runs
  // with every tag; `origin`: how runs came to be (schedule, api, cli, rerun, fork, recovery; docs/guides/console.md
  // "Runs by origin"). `limit` (1 to 500, default 50) and `offset` page through what matches; `total` counts it all.
  app.get("/api/runs", async (c) => {
    const q = readRunListQuery({ one: (name) => c.req.query(name), all: (name) => c.req.queries(name) ?? [] });
    if (isQueryProblem(q)) return fail(c, 400, q.code, q.message, q.hint);
    const body = await source.listRunsJson(q);
    return c.body(body, 200, { "Content-Type": "application/json" });
  });

  // One run (full id or unique prefix): `{ run, report, graph, totals }`.
  app.get("/api/runs/:id", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    return c.json(await source.detail(run));
  });

  // The run tree's messages per stage with their delivery states and reasons, and its questions: what `atomic inbox
  // RUN --json` prints (`{ runId, stages: [{ stage, messages: [{ id, text, state, reason, attempt, ... }] }], sticky, prompts }`).
  app.get("/api/runs/:id/inbox", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    return c.json(await inbox(source.journal, run));
  });

  // The run's journal events after a seq: `{ events, lastSeq, next, more }`.
  app.get("/api/runs/:id/events", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const after = intParam(c, "after", 0, 0, Number.MAX_SAFE_INTEGER);
    const limit = intParam(c, "limit", 500, 1, 5000);
    if (typeof after === "string") return fail(c, 400, "bad_paging", after);
    if (typeof limit === "string") return fail(c, 400, "bad_paging", limit);
    return c.json(await source.events(run, after, limit));
  });

  // Server-sent events of the run and its child runs (`event: journal`, then `event: ready` after the catch-up, then
  // also `event: live`: their stages' model deltas, tool calls, usage; not stored, no id). Resume with `Last-Event-ID`
  // or `?cursor=`; `?from=now` starts at the end.
  app.get("/api/runs/:id/stream", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const from = streamStart(c, parseCursor, "stream cursor");
    if (from instanceof Response) return from;
    const body = await source.streams.open(run.id, from, c.req.raw.signal);
    if ("error" in body) {
      if (body.stopping) return fail(c, 503, "stopping", body.error);
      return fail(c, 400, "bad_cursor", body.error, "reconnect without Last-Event-ID to start over");
    }
    return eventStream(body);
  });

  // Server-sent events of one stage (`:stage` as for its transcript): `event: journal` (its journal events and its run's
  // status, each with the seq as id), `event: ready` after the catch-up, then `event: live` (model deltas, tool calls,
  // usage; not stored, no id). Resume with `Last-Event-ID` or `?cursor=` (a seq); `?from=now` starts at the end.
  app.get("/api/runs/:id/stages/:stage/stream", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const from = streamStart(c, (text) => (/^\d{1,15}$/.test(text.trim()) ? Number(text.trim()) : undefined), "stage stream cursor");
    if (from instanceof Response) return from;
    const body = await source.stageStream(run, c.req.param("stage"), from, c.req.raw.signal);
    if ("miss" in body) return respondMiss(c, body);
    if ("error" in body) return fail(c, 400, "bad_cursor", body.error, "reconnect without Last-Event-ID to start over");
    return eventStream(body);
  });

  // A stage's output from byte offsets, at most 256 KiB per stream: `{ stdout, stderr, live, attempt, attempts, agent }`.
  // `:stage` is a position, a path through child runs or a name; `turns=1` adds per-call usage of a finished attempt.
  app.get("/api/runs/:id/stages/:stage/transcript", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const attemptText = c.req.query("attempt");
    const attempt = attemptText === undefined ? undefined : intParam(c, "attempt", 1, 1, 1_000_000);
    const stdout = intParam(c, "stdout", 0, 0, Number.MAX_SAFE_INTEGER);
    const stderr = intParam(c, "stderr", 0, 0, Number.MAX_SAFE_INTEGER);
    for (const v of [attempt, stdout, stderr]) if (typeof v === "string") return fail(c, 400, "bad_offset", v);
    let result: Awaited<ReturnType<typeof source.transcript>>;
    try {
      result = await source.transcript(run, c.req.param("stage"), {
        attempt: attempt as number | undefined,
        stdout: stdout as number,
        stderr: stderr as number,
        turns: c.req.query("turns") === "1",
      });
    } catch (err) {
      if (err instanceof UnsafeArtifactError) return fail(c, 403, err.code, err.message, err.hint);
      throw err;
    }
    if ("miss" in result) return respondMiss(c, result);
    return c.json(result);
  });

  // A stage's worktree diff for the review view (stage-diff.ts), what `atomic diff RUN STAGE` prints, read into
  // `{ branch, baseCommit, live, files: [{ path, status, additions, deletions, hunks: [{ header, lines: [{ kind, old?,
  // new?, html }] }] }], truncated, review: { question, text } | null }`; each line's code coloured (escaped HTML).
  app.get("/api/runs/:id/stages/:stage/diff", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    try {
      // Loaded on first use: highlight.js takes tens of ms to load, and every `atomic run` serves this app.
      const { stageDiffView } = await import("./stage-diff.ts");
      return c.json(await stageDiffView(source.journal, run, c.req.param("stage")));
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, httpStatusOf(err.code), err.code, err.message, err.hint);
      throw err;
    }
  });

  // ---------------------------------------------------------------- control and (later) intercom

  // `{"action": "pause" | "unpause" | "cancel"}` on a root run: 202 `{ runId, action, result }`; with `"stage": PATH`,
  // pause or unpause that stage only (atomic pause RUN STAGE).
  app.post("/api/runs/:id/control", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const body = jsonBody(c);
    if (body === NOT_JSON) return fail(c, 400, "bad_body", "the body must be JSON like {\"action\": \"pause\"}");
    const action = (body as { action?: unknown } | null)?.action;
    if (!isControlAction(action)) {
      const hint = action === "resume" ? "use unpause to let a paused run go on; a stopped run is continued with atomic resume" : undefined;
      return fail(c, 400, "unknown_action", `action must be one of ${CONTROL_ACTIONS.join(", ")}, got ${JSON.stringify(action)}`, hint);
    }
    const stage = (body as { stage?: unknown } | null)?.stage;
    if (stage !== undefined && (typeof stage !== "string" || stage === "")) return fail(c, 400, "bad_body", "stage must be a stage's path from the root run", 'send {"action": "pause", "stage": "review/security"}');
    try {
      const outcome = await control.control(run, action, stage);
      source.invalidate();
      return c.json(outcome, 202);
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, httpStatusOf(err.code), err.code, err.message, err.hint);
      throw err;
    }
  });

  // Starting a run from code (the service only): `{ "workflow", "inputs"?, "id"? }`; 201 `{ runId, created, status, url }`,
  // 200 when a run of that id exists and asked for the same. Keyed by `id` when given (engine/keyed-start.ts).
  app.post("/api/runs", async (c) => {
    if (!starter) return notAService(c);
    const body = jsonBody(c);
    const req = startRequest(body);
    if (typeof req === "string") return fail(c, 400, "bad_body", req, 'send {"workflow": "<builtin or registered name, or a path>", "inputs": {...}, "id": "<optional run id>"}');
    try {
      const started = await starter.start(req);
      source.invalidate();
      return c.json({ ...started, url: `/api/runs/${started.runId}` }, started.created ? 201 : 200);
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, startStatus(err.code), err.code, err.message, err.hint);
      throw err;
    }
  });

  const notAService = (c: Context) => fail(c, 501, "not_a_service", "this server does not start runs", "start runs through atomic serve (the service), or with atomic run");
  /** A starter action on one run: the UsageErrors the CLI raises, answered with their status. */
  const runAction = (act: (s: RunStarting, run: RunRecord, body: unknown) => Promise<unknown>, created: 201 | 202) => async (c: Context) => {
    if (!starter) return notAService(c);
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const body = jsonBody(c);
    try {
      const answer = await act(starter, run, body === NOT_JSON ? {} : body);
      source.invalidate();
      return c.json(answer, created);
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, startStatus(err.code), err.code, err.message, err.hint);
      throw err;
    }
  };
  // The workflows a start may name, with their inputs (for the page's start form): `{ workflows: [{ name, source, description, inputs, error }] }`.
  app.get("/api/workflows", async (c) => (starter ? c.json({ workflows: await starter.workflows() }) : notAService(c)));
  // Continue a crashed, interrupted, failed or blocked run, as `atomic resume` (the service drives it): 202 `{ runId, drivenBy }`.
  app.post("/api/runs/:id/resume", runAction((s, run) => s.resume(run.id), 202));
  // A new run of the run's workflow, as `atomic rerun`; `{ "inputs"?: {...} }` changes some inputs: 201 `{ runId, from }`.
  app.post("/api/runs/:id/rerun", runAction((s, run, body) => s.rerun(run.id, objectField(body, "inputs")), 201));
  // A new run going live at a step, as `atomic fork --at`: `{ "at": "<step name or #position>" }`; 201 `{ runId, from }`.
  app.post("/api/runs/:id/fork", runAction((s, run, body) => s.fork(run.id, stringField(body, "at")), 201));
  // One action over several runs: `{ "action": "cancel" | "resume", "runs": ["<id>", ...] }`, or `"filter"` instead of
  // `"runs"`: the run list's query (`GET /api/runs` without paging, e.g. "status=crashed&workflow=nightly"), for every
  // run it matches, at most 500; 200 `{ action, results: [{ runId, ok, error? }] }`.
  app.post("/api/runs/bulk", async (c) => {
    const body = jsonBody(c);
    const { action, runs, filter } = (body && typeof body === "object" ? body : {}) as { action?: unknown; runs?: unknown; filter?: unknown };
    if (action !== "cancel" && action !== "resume") return fail(c, 400, "unknown_action", `action must be cancel or resume, got ${JSON.stringify(action)}`, 'send {"action": "cancel", "runs": ["<run id>", ...]}');
    if (runs !== undefined && filter !== undefined) return fail(c, 400, "bad_body", 'send either "runs" or "filter", not both', 'send {"action": "cancel", "filter": "status=crashed"}');
    const ids = filter === undefined ? runs : await filteredRuns(c, filter, action);
    if (ids instanceof Response) return ids;
    if (!Array.isArray(ids) || ids.some((r) => typeof r !== "string")) return fail(c, 400, "bad_body", '"runs" must be a list of run ids', 'send {"action": "cancel", "runs": ["<run id>", ...]}');
    if (ids.length === 0) return fail(c, 400, "no_runs", "no runs were selected, so there is nothing to " + action, "select runs in the list, or name them in \"runs\"");
    if (ids.length > BULK_MAX) return fail(c, 400, "too_many_runs", `at most ${BULK_MAX} runs at once, got ${ids.length}`, "send them in smaller batches");
    if (action === "resume" && !starter) return notAService(c);
    const results = [];
    for (const id of ids as string[]) {
      const found = await source.findRun(id);
      if ("miss" in found) {
        results.push({ runId: id, ok: false, error: { code: found.miss, message: found.message } });
        continue;
      }
      try {
        if (action === "cancel") await control.control(found, "cancel");
        else await starter!.resume(found.id);
        results.push({ runId: found.id, ok: true });
      } catch (err) {
        if (!(err instanceof AtomicError && err.disposition === "usage")) throw err;
        results.push({ runId: found.id, ok: false, error: { code: err.code, message: err.message, ...(err.hint ? { hint: err.hint } : {}) } });
      }
    }
    source.invalidate();
    return c.json({ action, results });
  });
  /** The ids of every run a bulk action's filter (the run list's query, paging left out) matches, or the refusal. */
  async function filteredRuns(c: Context, filter: unknown, action: string): Promise<string[] | Response> {
    const example = 'send {"action": "cancel", "filter": "status=crashed&workflow=nightly"}';
    if (typeof filter !== "string") return fail(c, 400, "bad_body", '"filter" must be the run list\'s query, a string', example);
    const params = new URLSearchParams(filter.replace(/^\?/, ""));
    params.delete("limit");
    params.delete("offset");
    // An empty filter would take every run of the journal: a person asks for that by naming what they mean.
    if ([...params.values()].every((v) => v.trim() === "")) return fail(c, 400, "empty_filter", `the filter names nothing to match, so it would ${action} every run`, example);
    const q = readRunListQuery({ one: (name) => (name === "limit" ? String(BULK_MAX) : (params.get(name) ?? undefined)), all: (name) => params.getAll(name) });
    if (isQueryProblem(q)) return fail(c, 400, q.code, q.message, q.hint);
    const page = await source.listRuns(q);
    if (page.total === 0) return fail(c, 400, "no_runs", `no runs match the filter, so there is nothing to ${action}`, "change the filter");
    if (page.total > BULK_MAX) return fail(c, 400, "too_many_runs", `${page.total} runs match the filter; at most ${BULK_MAX} are acted on at once`, "narrow the filter (a status, a workflow, a time range)");
    return page.runs.map((r) => r.id);
  }

  // Tokens (cache included) and money over root runs, as `atomic usage --json` prints them: `{ by, since, runs, groups,
  // total, topRuns }`. `by`: workflow (default), stage, model, runner or day (UTC); `since`: an ISO date or time or an
  // age (`7d`); `workflow`: one workflow's runs. The same sums as `atomic show`, to the token and the micro-dollar.
  app.get("/api/usage", async (c) => {
    const by = (c.req.query("by") ?? "workflow").trim().toLowerCase() || "workflow";
    if (!(USAGE_GROUPINGS as readonly string[]).includes(by)) return fail(c, 400, "bad_grouping", `by ${JSON.stringify(by.slice(0, 40))} is not a grouping`, `use one of ${USAGE_GROUPINGS.join(", ")}`);
    const sinceText = c.req.query("since")?.trim();
    const since = sinceText ? parseInstant(sinceText) : undefined;
    if (sinceText && since === undefined) return fail(c, 400, "bad_time", `since ${JSON.stringify(sinceText.slice(0, 80))} is neither a date nor an age`, `use ${INSTANT_EXAMPLES}`);
    const workflow = c.req.query("workflow")?.trim();
    return c.json(await usageReport(source.journal, { by: by as UsageGrouping, ...(since !== undefined ? { since } : {}), ...(workflow ? { workflow } : {}) }));
  });

  // The schedules: `{ schedules: [{ name, cron, timezone, workflow, inputs, cwd, overlap, catchUp, paused, nextTickAt, ... }] }`.
  app.get("/api/schedules", async (c) => c.json({ schedules: await scheduleViews(source.journal, Date.now()) }));

  // Messages to stages and answers to ctx.ask: the same code as `atomic send` / `atomic answer`.
  const intercom = (what: "message" | "answer") => async (c: Context) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const body = jsonBody(c);
    if (body === NOT_JSON) {
      return fail(c, 400, "bad_body", what === "message" ? 'the body must be JSON like {"stage": "review", "text": "..."}' : 'the body must be JSON like {"question": "q1a2b3c4", "answer": "yes"}');
    }
    try {
      return what === "message" ? c.json(await control.message(run, body), 202) : c.json(await control.answer(run, body));
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, httpStatusOf(err.code), err.code, err.message, err.hint);
      throw err;
    }
  };
  // A message to a stage, as `atomic send`: `{ "stage", "text", "mode"?, "sticky"?, "id"?, "attachments"? }`
  // (`attachments: [{ "name", "data" }]`, data base64, as `--attach`); 202 with the deliveries.
  app.post("/api/runs/:id/messages", intercom("message"));
  // An answer to a `ctx.ask` question, as `atomic answer`: `{ "question", "answer" }`.
  app.post("/api/runs/:id/answers", intercom("answer"));

  // The verdict on a stage's open review (ctx.review), as `atomic review`: `{ "approve": true }` or `{ "comments": [{ "file"?,
  // "line"?, "text" }] }` (a line of the diff's new side); `{ runId, question, status, answer }`.
  app.post("/api/runs/:id/stages/:stage/review", async (c) => {
    const run = await runOf(c);
    if (run instanceof Response) return run;
    const body = jsonBody(c);
    if (body === NOT_JSON) return fail(c, 400, "bad_body", 'the body must be JSON like {"approve": true} or {"comments": [{"file": "src/app.ts", "line": 12, "text": "..."}]}');
    try {
      const outcome = await control.review(run, c.req.param("stage"), body);
      source.invalidate();
      return c.json(outcome);
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return fail(c, httpStatusOf(err.code), err.code, err.message, err.hint);
      throw err;
    }
  });

  return app;
}

/** The body of `POST /api/runs`, or what is wrong with it. */
function startRequest(body: unknown): { workflow: string; inputs: Record<string, unknown>; id?: string } | string {
  if (body === NOT_JSON || !body || typeof body !== "object" || Array.isArray(body)) return "the body must be a JSON object";
  const { workflow, inputs, id } = body as Record<string, unknown>;
  if (typeof workflow !== "string" || !workflow.trim()) return '"workflow" must be a non-empty string';
  if (inputs !== undefined && (!inputs || typeof inputs !== "object" || Array.isArray(inputs))) return '"inputs" must be an object';
  if (id !== undefined && typeof id !== "string") return '"id" must be a string';
  return { workflow: workflow.trim(), inputs: (inputs ?? {}) as Record<string, unknown>, ...(id !== undefined ? { id } : {}) };
}

function startStatus(code: string): Status {
  if (code === "workflow_not_allowed" || code === "storage_readonly") return 403;
  if (code === "workflow_not_found" || code === "unknown_step") return 404;
  if (["run_id_conflict", "already_completed", "run_cancelled", "run_live", "not_root", "no_service", "recovery_opted_out"].includes(code)) return 409;
  return 400;
}

/** `body[key]` when it is an object (else a UsageError naming it); undefined when absent. */
function objectField(body: unknown, key: string): Record<string, unknown> | undefined {
  const value = body && typeof body === "object" ? (body as Record<string, unknown>)[key] : undefined;
  if (value === undefined) return undefined;
  if (!value || typeof value !== "object" || Array.isArray(value)) throw new UsageError("bad_body", `"${key}" must be an object`, { hint: `send {"${key}": {"name": "value"}}` });
  return value as Record<string, unknown>;
}

function stringField(body: unknown, key: string): string {
  const value = body && typeof body === "object" ? (body as Record<string, unknown>)[key] : undefined;
  if (typeof value !== "string" || !value.trim()) throw new UsageError("bad_body", `the body needs "${key}" as a non-empty string`, { hint: `send {"${key}": "review"} (a step's name, or its position as #3)` });
  return value;
}

const NOT_JSON = Symbol("not JSON");
const TOO_LARGE = Symbol("too large");
/** Request bodies as read (capped) by the authentication middleware. */
const bodies = new WeakMap<Request, Uint8Array>();

const MESSAGES_PATH = /^\/api\/runs\/[^/]+\/messages$/;

/** The body's bytes, or TOO_LARGE (over `limit`: by Content-Length without reading, or counted while reading). */
async function cappedBody(req: Request, limit: number): Promise<Uint8Array | typeof TOO_LARGE> {
  const declared = req.headers.get("content-length");
  if (declared !== null && !(Number(declared) <= limit)) return TOO_LARGE;
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => {});
      return TOO_LARGE;
    }
    parts.push(value);
  }
  return Buffer.concat(parts);
}

/** The request's JSON body (as the middleware read it), or NOT_JSON. */
function jsonBody(c: Context): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bodies.get(c.req.raw) ?? new Uint8Array(0)));
  } catch {
    return NOT_JSON;
  }
}
