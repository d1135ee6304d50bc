/**
 * Who may use the status server: the person who holds the status token
 * (docs/design/security.md). Modelled on Jupyter's login tokens.
 *
 * - `atomic serve` prints a login URL: a page address with `?token=<token>`.
 *   Opening it sets a session cookie and redirects (303) to the same address
 *   without the token, so the token leaves the address bar and the history.
 * - The cookie is `atomic_session_<port>` (cookies are not scoped by port:
 *   two servers on 127.0.0.1 must not overwrite each other's), HttpOnly (no
 *   script reads it), SameSite=Strict (no other site's page makes the
 *   browser send it), Path=/. Its value is an HMAC of the token, not the
 *   token: it stays valid across restarts of the server while the token file
 *   stays, and a new token (delete the file) signs every browser out.
 * - Every route but `/healthz` needs the cookie or `Authorization: Bearer
 *   <token>` (scripts, `curl`, Prometheus). Without either, API routes answer
 *   401 JSON and a browser asking for a page gets a short page that says how
 *   to sign in, with no data. A wrong bearer token is 403.
 * - Every request that changes something (not GET or HEAD) also passes the
 *   Origin check: an Origin header that is not this server's own is refused
 *   (403); a cookie-authenticated one must name an Origin (browsers always
 *   send it on such requests). With the Host check (security.ts), the
 *   SameSite cookie, a strict CSP and no CORS headers, a page opened from
 *   another site can neither read nor change anything.
 * - The page never carries the token: its scripts use the cookie.
 */

import { createHmac, timingSafeEqual } from "node:crypto";
import type { Context } from "hono";
import { getCookie, setCookie } from "hono/cookie";
import type { HostPolicy } from "./security.ts";

export type Caller = "bearer" | "cookie" | "missing" | "wrong";

/** Pages a browser navigates to (the rest is JSON, event streams, assets and metrics). */
export function isPagePath(path: string): boolean {
  return path === "/" || path === "/usage" || /^\/runs\/[^/]+\/?$/.test(path);
}

function equal(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export class StatusAuth {
  readonly cookieName: string;
  private readonly session: string;

  constructor(
    private readonly token: string,
    private readonly hosts: HostPolicy,
  ) {
    this.cookieName = `atomic_session_${hosts.port}`;
    this.session = createHmac("sha256", token).update("atomic status session v1").digest("hex");
  }

  /** The bearer header decides when present; otherwise the session cookie. */
  caller(c: Context): Caller {
    const header = c.req.header("authorization");
    if (header !== undefined) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
      if (!m) return "missing";
      return equal(m[1]!, this.token) ? "bearer" : "wrong";
    }
    const cookie = getCookie(c, this.cookieName);
    return cookie !== undefined && equal(cookie, this.session) ? "cookie" : "missing";
  }

  /** True for a login token that is the server's. */
  isToken(text: string): boolean {
    return equal(text, this.token);
  }

  /** Sets the session cookie and answers with a redirect to `path` without the token. */
  login(c: Context): Response {
    setCookie(c, this.cookieName, this.session, { httpOnly: true, sameSite: "Strict", path: "/" });
    const url = new URL(c.req.url);
    url.searchParams.delete("token");
    const query = url.searchParams.toString();
    c.header("Cache-Control", "no-store");
    return c.redirect(`${url.pathname}${query ? `?${query}` : ""}`, 303);
  }

  /** An Origin header names this server (http, a Host name it answers to). */
  isOwnOrigin(origin: string): boolean {
    try {
      const url = new URL(origin);
      return url.protocol === "http:" && url.pathname === "/" && this.hosts.allows(url.host);
    } catch {
      return false; // "null" (a sandboxed frame, a file) and anything unparsable
    }
  }

  /** Whether a request that changes something may go on: undefined, or why not. */
  originProblem(c: Context, caller: Caller): string | undefined {
    const origin = c.req.header("origin");
    if (origin === undefined) return caller === "cookie" ? "a request from the page must name its Origin" : undefined;
    return this.isOwnOrigin(origin) ? undefined : `requests from ${JSON.stringify(origin.slice(0, 100))} are not accepted here`;
  }
}

/**
 * The page a browser gets instead of the status page without a session: how to sign in, and no data. It carries the
 * status page's icon inline (page/index.html), so the browser asks for no /favicon.ico, which would only get a 401.
 */
export function signInPage(kind: "missing" | "bad_link"): string {
  const lead =
    kind === "bad_link"
      ? "This login link is not valid: its token is not this server's (an old link, or one from another server)."
      : "This status page needs you to sign in first.";
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>atomic: sign in</title>
<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Ccircle cx='8' cy='8' r='6' fill='%232563eb'/%3E%3C/svg%3E"></head>
<body>
<h1>atomic</h1>
<p>${lead}</p>
<p>Open the login URL that <code>atomic serve</code> (or <code>atomic run --serve</code>) printed in its terminal: it ends in <code>?token=…</code>. The token is also in the file <code>status-token</code> of the atomic home (<code>~/.atomic</code> unless <code>ATOMIC_HOME</code> or <code>--home</code> says otherwise).</p>
</body>
</html>
`;
}
