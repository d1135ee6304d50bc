/**
 * The status server's HTTP API, every route through `app.request()` over a
 * real SQLite journal holding runs the engine really ran (in this process):
 * a fan-out, a tool, a retried stage, a failing stage, a child workflow,
 * same-named stages, a failed run and a live one.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RunDetail } from "../../src/status/source.ts";
import type { RunListPage } from "../../src/status/summaries.ts";
import type { GraphBlock } from "../../src/status/graph.ts";
import type { Transcript } from "../../src/status/transcript.ts";
import { workflow } from "../../src/sdk/index.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { engineAfterEach, shQuote, waitUntil, withEngine, type Engine } from "../engine/helpers.ts";
import { json, statusFixture, TOKEN, type StatusFixture } from "./support.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(engineAfterEach);

const summarize = workflow({
  name: "summarize",
  async run(ctx) {
    const r = await ctx.shell("report", "echo child-report");
    return { summary: r.text.trim() };
  },
});

function reviewWorkflow(counter: string) {
  return workflow({
    name: "review",
    async run(ctx) {
      await ctx.parallel([
        { name: "list", shell: "echo listed; echo warned >&2" },
        { name: "count", shell: "printf 'h\\303\\251llo w\\303\\266rld\\n'" },
        { name: "disk", shell: "echo 12K" },
      ]);
      const n = await ctx.tool("count-files", {}, () => 3);
      await ctx.shell("flaky", `n=$(cat ${shQuote(counter)} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${shQuote(counter)}; echo try-$n; [ $n -ge 2 ]`, { retries: 1 });
      await ctx.shell("lint", "echo lint-out; exit 3", { failureMode: "return" });
      await ctx.parallel([() => ctx.shell("dup", "echo first"), () => ctx.shell("dup", "echo second")]);
      const child = await ctx.workflow(summarize, {});
      return { n, child };
    },
  });
}

const failing = workflow({ name: "breaks", run: (ctx) => ctx.shell("bad", "echo doomed >&2; exit 4") });

interface Runs {
  fx: Engine;
  st: StatusFixture;
  reviewId: RunId;
  failedId: RunId;
}

async function withRuns(cb: (r: Runs) => Promise<void>): Promise<void> {
  await withEngine(async (fx) => {
    const review = await fx.run(reviewWorkflow(join(makeTempDir(), "n")));
    expect(review.status).toBe("completed");
    const failed = await fx.run(failing);
    expect(failed.status).toBe("failed");
    const st = statusFixture(fx.journal);
    try {
      await cb({ fx, st, reviewId: review.runId, failedId: failed.runId });
    } finally {
      await st.close();
    }
  });
}

/** Names of the nodes of a graph block, nested groups as `name{...}`, fan-outs as `[a|b]`. */
function shape(b: GraphBlock): string {
  if (b.type === "node") return b.node.group ? `${b.node.name}{${shape(b.node.group.body)}}` : b.node.kind === "join" ? "+" : b.node.name;
  if (b.type === "seq") return b.items.map(shape).join(" > ");
  return `[${b.branches.map(shape).join("|")}]`;
}

describe("status API", () => {
  test("healthz, metrics, unknown routes as JSON 404, and no CORS headers", async () => {
    await withRuns(async ({ st, reviewId, fx }) => {
      const health = await st.req("/healthz");
      expect(health.status).toBe(200);
      expect(await json(health)).toMatchObject({ ok: true });

      const metrics = await st.req("/metrics");
      expect(metrics.status).toBe(200);
      expect(metrics.headers.get("content-type")).toContain("application/openmetrics-text");
      const text = await metrics.text();
      const value = (name: string) => Number(new RegExp(`^${name.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m").exec(text)?.[1]);
      expect(value('atomic_runs{status="completed"}')).toBe(1);
      expect(value('atomic_runs{status="failed"}')).toBe(1);
      expect(value('atomic_runs{status="running"}')).toBe(0);
      // review: 3 + flaky (2 attempts) + lint + 2 dup + child report = 9 attempts; breaks: 1
      expect(value("atomic_stages_started_total")).toBe(10);
      expect(value("atomic_stages_completed_total")).toBe(7);
      expect(value("atomic_stages_failed_total")).toBe(3);
      const childId = (await fx.journal.listRuns({ parentId: reviewId })).map((r) => r.id);
      let appends = 0;
      for (const id of [reviewId, ...childId]) appends += (await fx.journal.getRun(id))!.lastSeq;
      for (const r of await fx.journal.listRuns({})) if (r.id !== reviewId) appends += r.lastSeq;
      expect(value("atomic_journal_appends_total")).toBe(appends);
      // a second scrape reads only what changed (nothing): same figures
      expect(await (await st.req("/metrics")).text()).toBe(text);

      const missing = await st.req("/api/nothing");
      expect(missing.status).toBe(404);
      expect((await json(missing)).error.code).toBe("not_found");
      // a browser's preflight carries no credentials: refused like any request without them
      const preflight = await st.anon("/api/runs", { method: "OPTIONS", headers: { origin: "http://evil.example", "access-control-request-method": "POST" } });
      expect(preflight.status).toBe(401);
      for (const res of [health, metrics, preflight, await st.req("/api/runs", { headers: { origin: "http://evil.example" } })]) {
        expect(res.headers.get("access-control-allow-origin")).toBeNull();
      }
    });
  });

  test("a foreign Host header is refused; the bound address and localhost are answered", async () => {
    await withRuns(async ({ st }) => {
      for (const host of ["evil.example", "evil.example:4317", "127.0.0.1:9999", "localhost:80", "127.0.0.1.nip.io:4317"]) {
        for (const path of ["/api/runs", "/", "/healthz"]) {
          const res = await st.req(path, { headers: { host } });
          expect(res.status).toBe(403);
          expect((await json(res)).error.code).toBe("forbidden_host");
        }
      }
      const post = await st.post("/api/runs/x/control", { action: "pause" });
      expect(post.status).not.toBe(403);
      for (const host of ["127.0.0.1:4317", "localhost:4317", "LOCALHOST:4317", "[::1]:4317"]) {
        expect((await st.req("/api/runs", { headers: { host } })).status).toBe(200);
      }
    });
  });

  test("GET /api/runs: newest first, stage counts, status filter and paging; bad paging is 400", async () => {
    await withRuns(async ({ st, reviewId, failedId }) => {
      const all = await json<RunListPage>(await st.req("/api/runs"));
      expect(all.total).toBe(2);
      expect(all.runs.map((r) => r.id)).toEqual([failedId, reviewId]);
      const review = all.runs[1]!;
      expect(review).toMatchObject({ workflow: "review", status: "completed", storedStatus: "completed", usage: null, error: null });
      expect(review.stages).toEqual({ total: 8, completed: 7, failed: 1, queued: 0, running: 0, stopped: 0 });
      expect(review.durationMs).toBeGreaterThanOrEqual(0);
      expect(all.runs[0]).toMatchObject({ status: "failed", error: { code: "exit_code" } });
      // the list reads the stage index; a run's detail folds its events: the same counts and usage
      for (const r of all.runs) {
        const detail = await json<RunDetail>(await st.req(`/api/runs/${r.id}`));
        expect(r.stages).toEqual(detail.run.stages);
        expect(r.usage).toEqual(detail.run.usage);
      }

      const failed = await json<RunListPage>(await st.req("/api/runs?status=failed"));
      expect(failed.runs.map((r) => r.id)).toEqual([failedId]);
      expect(failed.total).toBe(1);
      const second = await json<RunListPage>(await st.req("/api/runs?limit=1&offset=1"));
      expect(second).toMatchObject({ total: 2, limit: 1, offset: 1 });
      expect(second.runs.map((r) => r.id)).toEqual([reviewId]);
      expect((await json<RunListPage>(await st.req("/api/runs?offset=5"))).runs).toEqual([]);

      for (const q of ["limit=0", "limit=501", "limit=abc", "limit=1.5", "offset=-1", "offset=x", "limit=-3"]) {
        const res = await st.req(`/api/runs?${q}`);
        expect(res.status).toBe(400);
        expect((await json(res)).error.code).toBe("bad_paging");
      }
      const bad = await st.req("/api/runs?status=sleepy");
      expect(bad.status).toBe(400);
      expect((await json(bad)).error).toMatchObject({ code: "bad_status" });

      // the search, in the journal: text in outputs, any case, the workflow, a time range, together
      const ids = async (q: string) => (await json<RunListPage>(await st.req(`/api/runs?${q}`))).runs.map((r) => r.id);
      expect(await ids("q=CHILD-REPORT")).toEqual([reviewId]);
      expect(await ids("workflow=breaks")).toEqual([failedId]);
      expect(await ids("q=child-report&workflow=breaks")).toEqual([]);
      expect(await ids("since=1h")).toEqual([failedId, reviewId]);
      expect(await ids("until=1h")).toEqual([]);
      expect(await ids(`since=${new Date(Date.now() - 3_600_000).toISOString()}&until=${new Date(Date.now() + 60_000).toISOString()}&q=${reviewId.slice(0, 12)}`)).toEqual([reviewId]);
      expect((await json<RunListPage>(await st.req("/api/runs?q=review&limit=1"))).total).toBe(1);
      const badTime = await st.req("/api/runs?since=yesterday");
      expect(badTime.status).toBe(400);
      expect((await json(badTime)).error).toEqual({ code: "bad_time", message: 'since "yesterday" is neither a date nor an age', hint: "use an ISO date or time (2026-12-01, 2026-12-01T09:30Z) or an age like 90m, 2h, 7d" });
      const backwards = await st.req("/api/runs?since=1h&until=2h");
      expect((await json(backwards)).error).toMatchObject({ code: "bad_time", message: "until must be later than since" });
      const long = await st.req(`/api/runs?q=${"x".repeat(201)}`);
      expect((await json(long)).error).toMatchObject({ code: "bad_query" });
    });
  });

  test("GET /api/runs/:id: report, graph from positions, totals; prefixes; unknown runs are 404", async () => {
    await withRuns(async ({ st, reviewId }) => {
      const res = await st.req(`/api/runs/${reviewId}`);
      expect(res.status).toBe(200);
      const d = await json<RunDetail>(res);
      expect(d.run).toMatchObject({ id: reviewId, workflow: "review", status: "completed", parentId: null, depth: 0, outputs: { n: 3, child: { summary: "child-report" } } });
      expect(d.report.steps.map((s) => s.name)).toEqual(["list", "count", "disk", "count-files", "flaky", "lint", "dup", "dup", "summarize"]);
      const flaky = d.report.steps.find((s) => s.name === "flaky")!;
      expect(flaky.attemptLog.map((a) => [a.attempt, a.status])).toEqual([[1, "failed"], [2, "completed"]]);
      expect(d.totals).toMatchObject({ stages: { total: 8, completed: 7, failed: 1 }, otherSteps: 2, childRuns: 1, attempts: 9, usage: null });

      // the graph: the fan-out fans into the tool step, steps follow each other, the child is a nested group
      expect(shape(d.graph.root)).toBe("[list|count|disk] > count-files > flaky > lint > [dup|dup] > summarize{report}");
      const id = (name: string) => {
        const s = d.report.steps.find((x) => x.name === name)!;
        return `${reviewId}:${s.position}`;
      };
      const dups = d.report.steps.filter((s) => s.name === "dup").map((s) => `${reviewId}:${s.position}`);
      const childRun = d.report.steps.find((s) => s.kind === "child")!.childRunId!;
      expect(d.graph.edges).toEqual(
        expect.arrayContaining([
          { from: id("list"), to: id("count-files") },
          { from: id("count"), to: id("count-files") },
          { from: id("disk"), to: id("count-files") },
          { from: id("count-files"), to: id("flaky") },
          { from: id("flaky"), to: id("lint") },
          { from: id("lint"), to: dups[0]! },
          { from: id("lint"), to: dups[1]! },
          { from: dups[0]!, to: id("summarize") },
          { from: dups[1]!, to: id("summarize") },
        ]),
      );
      expect(d.graph.edges).toHaveLength(9);
      expect(d.graph.nodeCount).toBe(10);
      const childNode = (d.graph.root as Extract<GraphBlock, { type: "seq" }>).items.at(-1) as Extract<GraphBlock, { type: "node" }>;
      expect(childNode.node.group).toMatchObject({ runId: childRun, workflow: "summarize", status: "completed" });

      // a child run has its own page; a prefix finds the root (it wins over its children)
      const child = await json<RunDetail>(await st.req(`/api/runs/${childRun}`));
      expect(child.run).toMatchObject({ id: childRun, parentId: reviewId, rootId: reviewId, depth: 1 });
      expect((await json<RunDetail>(await st.req(`/api/runs/${reviewId.slice(0, 12)}`))).run.id).toBe(reviewId);

      for (const unknown of ["0000000000zzzzzzzz", "nope", "zzzzzz"]) {
        const miss = await st.req(`/api/runs/${unknown}`);
        expect(miss.status).toBe(404);
        expect((await json(miss)).error).toMatchObject({ code: "unknown_run" });
      }
    });
  });

  test("GET /api/runs/:id/events pages through a run's events after a seq", async () => {
    await withRuns(async ({ st, reviewId, fx }) => {
      const all = await fx.journal.readEvents(reviewId);
      const page = await json(await st.req(`/api/runs/${reviewId}/events?after=2&limit=3`));
      expect(page.events.map((e: { seq: number }) => e.seq)).toEqual([3, 4, 5]);
      expect(page).toMatchObject({ runId: reviewId, next: 5, more: true, lastSeq: all.length });
      const rest = await json(await st.req(`/api/runs/${reviewId}/events?after=5`));
      expect(rest.events.map((e: { seq: number }) => e.seq)).toEqual(all.slice(5).map((e) => e.seq));
      expect(rest.more).toBe(false);
      const none = await json(await st.req(`/api/runs/${reviewId}/events?after=${all.length}`));
      expect(none).toMatchObject({ events: [], next: all.length, more: false });
      for (const q of ["after=-1", "after=x", "limit=0", "limit=5001", "after=1e3"]) {
        const res = await st.req(`/api/runs/${reviewId}/events?${q}`);
        expect(res.status).toBe(400);
        expect((await json(res)).error.code).toBe("bad_paging");
      }
      expect((await st.req("/api/runs/0000000000zzzzzzzz/events")).status).toBe(404);
    });
  });

  test("GET .../stages/:stage/transcript reads a stage's output by position, path or name, from offsets", async () => {
    await withRuns(async ({ st, reviewId }) => {
      const d = await json<RunDetail>(await st.req(`/api/runs/${reviewId}`));
      const pos = (name: string) => d.report.steps.find((s) => s.name === name)!.position;
      const t = await json<Transcript>(await st.req(`/api/runs/${reviewId}/stages/${pos("list")}/transcript`));
      expect(t).toMatchObject({ runId: reviewId, name: "list", status: "completed", attempt: 1, attempts: 1, live: false });
      expect(t.stdout).toMatchObject({ text: "listed\n", offset: 0, next: 7, size: 7, more: false, missing: false });
      expect(t.stderr.text).toBe("warned\n");

      // by name, with an offset in bytes (the text is UTF-8)
      const count = await json<Transcript>(await st.req(`/api/runs/${reviewId}/stages/count/transcript?stdout=7`));
      expect(count.stdout).toMatchObject({ offset: 7, text: "wörld\n", next: 14, size: 14 });
      // by path through the child run
      const child = await json<Transcript>(await st.req(`/api/runs/${reviewId}/stages/${encodeURIComponent("summarize/report")}/transcript`));
      expect(child).toMatchObject({ name: "report", runId: d.report.steps.at(-1)!.childRunId });
      expect(child.stdout.text).toBe("child-report\n");
      // an earlier attempt
      const first = await json<Transcript>(await st.req(`/api/runs/${reviewId}/stages/flaky/transcript?attempt=1`));
      expect(first).toMatchObject({ attempt: 1, attempts: 2, status: "failed" });
      expect(first.stdout.text).toBe("try-1\n");
      expect((await json<Transcript>(await st.req(`/api/runs/${reviewId}/stages/flaky/transcript`))).stdout.text).toBe("try-2\n");

      const cases: [string, number, string][] = [
        ["flaky/transcript?attempt=3", 404, "unknown_stage"],
        ["flaky/transcript?attempt=0", 400, "bad_offset"],
        ["flaky/transcript?stdout=-1", 400, "bad_offset"],
        ["flaky/transcript?stderr=abc", 400, "bad_offset"],
        ["nosuch/transcript", 404, "unknown_stage"],
        [`${pos("count-files")}/transcript`, 404, "no_output"],
        ["dup/transcript", 409, "ambiguous"],
      ];
      for (const [path, status, code] of cases) {
        const res = await st.req(`/api/runs/${reviewId}/stages/${path}`);
        expect([path, res.status]).toEqual([path, status]);
        expect((await json(res)).error.code).toBe(code);
      }
      expect((await st.req("/api/runs/0000000000zzzzzzzz/stages/0/transcript")).status).toBe(404);
    });
  });

  test("POSTs need the token: 401 without, 403 wrong; a message or answer without its fields is 400; bad control and bad bulk actions are 400", async () => {
    await withRuns(async ({ st, reviewId }) => {
      const none = await st.post(`/api/runs/${reviewId}/control`, { action: "pause" }, null);
      expect(none.status).toBe(401);
      expect(none.headers.get("www-authenticate")).toContain("Bearer");
      expect((await json(none)).error.code).toBe("token_required");
      const wrong = await st.post(`/api/runs/${reviewId}/control`, { action: "pause" }, "not-the-token");
      expect(wrong.status).toBe(403);
      expect((await json(wrong)).error.code).toBe("wrong_token");
      for (const path of ["messages", "answers"]) {
        expect((await st.post(`/api/runs/${reviewId}/${path}`, { text: "hi" }, null)).status).toBe(401);
        // Messages need a stage, answers a question (test/intercom/status-routes.test.ts covers the rest).
        const res = await st.post(`/api/runs/${reviewId}/${path}`, { text: "hi" });
        expect(res.status).toBe(400);
        expect((await json(res)).error).toMatchObject({ code: "bad_body" });
        expect((await st.post(`/api/runs/0000000000zzzzzzzz/${path}`, {})).status).toBe(404);
      }
      for (const body of [{ action: "explode" }, { action: "resume" }, {}, [], "null"]) {
        const res = await st.post(`/api/runs/${reviewId}/control`, body);
        expect(res.status).toBe(400);
        expect((await json(res)).error.code).toBe("unknown_action");
      }
      const notJson = await st.post(`/api/runs/${reviewId}/control`, "{pause");
      expect(notJson.status).toBe(400);
      expect((await json(notJson)).error.code).toBe("bad_body");
      expect((await st.post("/api/runs/0000000000zzzzzzzz/control", { action: "pause" })).status).toBe(404);
      // a finished run cannot be paused or cancelled; a child run is controlled through its root
      const done = await st.post(`/api/runs/${reviewId}/control`, { action: "pause" });
      expect(done.status).toBe(409);
      expect((await json(done)).error.code).toBe("not_running");
      expect((await st.post(`/api/runs/${reviewId}/control`, { action: "cancel" })).status).toBe(409);
      const d = await json<RunDetail>(await st.req(`/api/runs/${reviewId}`));
      const child = await st.post(`/api/runs/${d.report.steps.at(-1)!.childRunId}/control`, { action: "pause" });
      expect(child.status).toBe(409);
      expect((await json(child)).error.code).toBe("not_root");
      // Bulk actions: an empty selection, an unknown action and a body without runs are refused in one sentence; a
      // run that cannot take the action (finished) or does not exist fails alone, the others go on.
      const empty = await st.post("/api/runs/bulk", { action: "cancel", runs: [] });
      expect([empty.status, (await json(empty)).error]).toEqual([400, { code: "no_runs", message: "no runs were selected, so there is nothing to cancel", hint: 'select runs in the list, or name them in "runs"' }]);
      const unknown = await st.post("/api/runs/bulk", { action: "delete", runs: [reviewId] });
      expect([unknown.status, (await json(unknown)).error.code]).toEqual([400, "unknown_action"]);
      expect((await json(await st.post("/api/runs/bulk", { action: "cancel" }))).error.code).toBe("bad_body");
      expect((await st.post("/api/runs/bulk", { action: "cancel", runs: [reviewId] }, null)).status).toBe(401);
      const mixed = await json<{ results: { runId: string; ok: boolean; error?: { code: string } }[] }>(await st.post("/api/runs/bulk", { action: "cancel", runs: [reviewId, "0000000000zzzzzzzz"] }));
      expect(mixed.results.map((r) => [r.runId, r.ok, r.error?.code])).toEqual([[reviewId, false, "already_ended"], ["0000000000zzzzzzzz", false, "unknown_run"]]);
    });
  });

  test("POST control pauses, unpauses and cancels a live run", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const wf = workflow({
        name: "gated",
        async run(ctx) {
          await ctx.shell("wait", `${untilExists(shQuote(gate))}; echo released`);
          await ctx.shell("after", "echo after");
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      const st = statusFixture(fx.journal);
      try {
        const runId = driven.runId;
        await waitUntil(async () => (await json<RunDetail>(await st.req(`/api/runs/${runId}`))).report.steps[0]?.status === "running", "the stage to run");
        const live = await json<Transcript>(await st.req(`/api/runs/${runId}/stages/wait/transcript`));
        expect(live).toMatchObject({ live: true, status: "running" });

        const paused = await st.post(`/api/runs/${runId}/control`, { action: "pause" });
        expect(paused.status).toBe(202);
        expect(await json(paused)).toEqual({ runId, action: "pause", result: "requested" });
        await waitUntil(() => fx.eventsOf("paused", runId).length > 0, "the driver to pause");
        expect((await json<RunDetail>(await st.req(`/api/runs/${runId}`))).run.status).toBe("paused");
        expect((await json<RunListPage>(await st.req("/api/runs"))).runs[0]!.status).toBe("paused");

        expect((await st.post(`/api/runs/${runId}/control`, { action: "unpause" })).status).toBe(202);
        await waitUntil(() => fx.eventsOf("unpaused", runId).length > 0, "the driver to unpause");
        expect((await json<RunDetail>(await st.req(`/api/runs/${runId}`))).run.status).toBe("running");

        const cancel = await st.post(`/api/runs/${runId}/control`, { action: "cancel" });
        expect(cancel.status).toBe(202);
        expect((await json(cancel)).result).toBe("requested");
        expect((await running).status).toBe("cancelled");
        const after = await json<RunDetail>(await st.req(`/api/runs/${runId}`));
        expect(after.run.status).toBe("cancelled");
        expect(after.report.steps.map((s) => s.name)).toEqual(["wait"]);
      } finally {
        writeFileSync(gate, "");
        await running.catch(() => {});
        await st.close();
      }
    });
  });

  test("the page never carries the token; assets are embedded, with ETags", async () => {
    await withRuns(async ({ st, reviewId }) => {
      const local = await st.req("/");
      expect(local.status).toBe(200);
      expect(local.headers.get("content-type")).toContain("text/html");
      expect(local.headers.get("content-security-policy")).toContain("default-src 'none'");
      expect(local.headers.get("x-frame-options")).toBe("DENY");
      const html = await local.text();
      expect(html).not.toContain(TOKEN);
      expect(html).toContain("/assets/app.js?v=");
      expect(await (await st.req(`/runs/${reviewId}`)).text()).not.toContain(TOKEN);

      const js = await st.req("/assets/app.js");
      expect(js.status).toBe(200);
      expect(js.headers.get("content-type")).toContain("javascript");
      const etag = js.headers.get("etag")!;
      expect(etag).toBeTruthy();
      expect((await st.req("/assets/app.js", { headers: { "if-none-match": etag } })).status).toBe(304);
      expect((await st.req("/assets/style.css")).headers.get("content-type")).toContain("text/css");
      expect((await st.req("/assets/secret.txt")).status).toBe(404);
      expect((await st.req("/assets/..%2Fpackage.json")).status).toBe(404);
      expect(existsSync(join(import.meta.dir, "..", "..", "src", "status", "page", "app.js"))).toBe(true);
    });
  });
});
