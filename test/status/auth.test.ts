/**
 * Who may use the status server, route class by route class, through
 * `app.request()` over a real journal holding a run the engine really ran:
 * every route but /healthz needs the session cookie or the bearer token;
 * a login URL sets an HttpOnly, SameSite=Strict cookie and redirects to a
 * clean address; the page never carries the token; requests that change
 * something pass the Origin check; every answer carries a strict CSP.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { workflow } from "../../src/sdk/index.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { engineAfterEach, withEngine } from "../engine/helpers.ts";
import { json, ORIGIN, statusFixture, TOKEN, type StatusFixture } from "./support.ts";

afterEach(engineAfterEach);

const wf = workflow({
  name: "secretive",
  inputs: {},
  async run(ctx) {
    const r = await ctx.shell("say", "echo the-secret-output");
    return { said: r.text.trim() };
  },
});

async function withRun(cb: (st: StatusFixture, runId: RunId) => Promise<void>): Promise<void> {
  await withEngine(async (fx) => {
    const done = await fx.run(wf);
    expect(done.status).toBe("completed");
    const st = statusFixture(fx.journal);
    try {
      await cb(st, done.runId);
    } finally {
      await st.close();
    }
  });
}

/** Signs in through the login URL; returns the Cookie header the browser would send. */
async function signIn(st: StatusFixture, path = "/"): Promise<{ cookie: string; res: Response }> {
  const res = await st.anon(`${path}?token=${TOKEN}`);
  const set = res.headers.get("set-cookie") ?? "";
  return { cookie: set.split(";")[0]!, res };
}

const GET_ROUTES = (id: string) => [
  "/metrics",
  "/api/runs",
  `/api/runs/${id}`,
  `/api/runs/${id}/events`,
  `/api/runs/${id}/stages/say/transcript`,
  "/assets/app.js",
];

describe("status server authentication", () => {
  test("every route but /healthz needs a session or the bearer token: 401 JSON without, 403 with a wrong token", async () => {
    await withRun(async (st, id) => {
      expect((await st.anon("/healthz")).status).toBe(200);
      const { cookie } = await signIn(st);
      for (const path of GET_ROUTES(id)) {
        const none = await st.anon(path);
        expect(none.status, path).toBe(401);
        expect(none.headers.get("www-authenticate")).toContain("Bearer");
        const body = await none.text();
        expect(JSON.parse(body).error.code).toBe("token_required");
        expect(body).not.toContain("the-secret-output");
        expect(body).not.toContain(id);
        const wrong = await st.anon(path, { headers: { authorization: "Bearer not-the-token" } });
        expect(wrong.status, path).toBe(403);
        expect((await json(wrong)).error.code).toBe("wrong_token");
        // a bad cookie or another server's cookie (another port) is no session
        for (const c of ["atomic_session_4317=forged", cookie.replace("_4317=", "_4318=")]) {
          expect((await st.anon(path, { headers: { cookie: c } })).status, `${path} ${c}`).toBe(401);
        }
        expect((await st.req(path)).status, path).toBe(200);
        expect((await st.anon(path, { headers: { cookie } })).status, path).toBe(200);
      }
      // the event stream too
      const stream = await st.anon(`/api/runs/${id}/stream`);
      expect(stream.status).toBe(401);
      const ctl = new AbortController();
      const live = await st.anon(`/api/runs/${id}/stream`, { headers: { cookie }, signal: ctl.signal });
      expect(live.status).toBe(200);
      expect(live.headers.get("content-type")).toContain("text/event-stream");
      ctl.abort();
      await live.body?.cancel().catch(() => {});
      // a token in the query of an API route is not a login
      expect((await st.anon(`/api/runs?token=${TOKEN}`)).status).toBe(401);
    });
  });

  test("a page without a session is a short sign-in page (401) with no data; the page itself never carries the token", async () => {
    await withRun(async (st, id) => {
      for (const path of ["/", `/runs/${id}`]) {
        const res = await st.anon(path);
        expect(res.status).toBe(401);
        expect(res.headers.get("content-type")).toContain("text/html");
        const html = await res.text();
        expect(html).toContain("atomic serve");
        expect(html).toContain("?token=");
        expect(html).not.toContain("/assets/");
        expect(html).not.toContain("the-secret-output");
      }
      const { cookie } = await signIn(st);
      for (const path of ["/", `/runs/${id}`]) {
        const res = await st.anon(path, { headers: { cookie } });
        expect(res.status).toBe(200);
        const html = await res.text();
        expect(html).toContain("/assets/app.js?v=");
        expect(html).not.toContain(TOKEN);
        expect(html).not.toContain("atomic-token");
      }
      for (const asset of ["app.js", "dom.js", "views.js", "style.css"]) {
        expect(await (await st.anon(`/assets/${asset}`, { headers: { cookie } })).text()).not.toContain(TOKEN);
      }
    });
  });

  test("a login URL sets an HttpOnly, SameSite=Strict session cookie (not the token) and redirects without the token", async () => {
    await withRun(async (st, id) => {
      const { cookie, res } = await signIn(st);
      expect(res.status).toBe(303);
      expect(res.headers.get("location")).toBe("/");
      const set = res.headers.get("set-cookie")!;
      expect(set).toMatch(/^atomic_session_4317=[0-9a-f]{64}; /);
      expect(set).toContain("HttpOnly");
      expect(set).toContain("SameSite=Strict");
      expect(set).toContain("Path=/");
      expect(cookie).not.toContain(TOKEN);
      expect(res.headers.get("cache-control")).toBe("no-store");
      // other query parameters survive; the run page is a login target too
      const deep = await st.anon(`/runs/${id}?token=${TOKEN}&tab=graph`);
      expect(deep.status).toBe(303);
      expect(deep.headers.get("location")).toBe(`/runs/${id}?tab=graph`);
      expect(deep.headers.get("set-cookie")!.split(";")[0]).toBe(cookie);
      // a wrong token: a 403 page, no cookie
      const bad = await st.anon("/?token=0000");
      expect(bad.status).toBe(403);
      expect(bad.headers.get("set-cookie")).toBeNull();
      expect(await bad.text()).toContain("not valid");
    });
  });

  test("a request that changes something passes the Origin check: a foreign Origin is 403, a cookie needs an Origin", async () => {
    await withRun(async (st, id) => {
      const { cookie } = await signIn(st);
      const post = (headers: Record<string, string>) =>
        st.anon(`/api/runs/${id}/control`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ action: "pause" }) });
      // accepted (the run has ended, so 409 not_running: past authentication and the Origin check)
      for (const origin of [ORIGIN, "http://localhost:4317"]) {
        const ok = await post({ cookie, origin });
        expect(ok.status).toBe(409);
        expect((await json(ok)).error.code).toBe("not_running");
      }
      expect((await post({ authorization: `Bearer ${TOKEN}` })).status).toBe(409);
      // refused
      for (const headers of <Record<string, string>[]>[
        { cookie, origin: "http://evil.example" },
        { cookie, origin: "http://127.0.0.1:9999" },
        { cookie, origin: "null" },
        { cookie, origin: "https://127.0.0.1:4317" },
        { cookie },
        { authorization: `Bearer ${TOKEN}`, origin: "http://evil.example" },
      ]) {
        const res = await post(headers);
        expect(res.status, JSON.stringify(headers)).toBe(403);
        expect((await json(res)).error.code).toBe("forbidden_origin");
      }
      expect((await post({ origin: ORIGIN })).status).toBe(401);
      for (const path of ["messages", "answers"]) {
        const res = await st.anon(`/api/runs/${id}/${path}`, { method: "POST", headers: { cookie, origin: "http://evil.example" }, body: "{}" });
        expect(res.status).toBe(403);
      }
    });
  });

  test("every answer carries a strict Content-Security-Policy and no CORS header", async () => {
    await withRun(async (st, id) => {
      const { cookie } = await signIn(st);
      for (const res of [
        await st.anon("/healthz"),
        await st.anon("/"),
        await st.anon("/api/runs"),
        await st.anon(`/runs/${id}`, { headers: { cookie } }),
        await st.req(`/api/runs/${id}`, { headers: { origin: "http://evil.example" } }),
        await st.anon("/?token=wrong"),
        await st.req("/api/runs", { headers: { host: "evil.example:4317" } }),
      ]) {
        const csp = res.headers.get("content-security-policy") ?? "";
        expect(csp).toContain("default-src 'none'");
        expect(csp).toContain("script-src 'self'");
        expect(csp).toContain("frame-ancestors 'none'");
        expect(res.headers.get("access-control-allow-origin")).toBeNull();
        expect(res.headers.get("access-control-allow-credentials")).toBeNull();
      }
    });
  });
});
