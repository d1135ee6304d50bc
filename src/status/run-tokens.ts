/**
 * Run-scoped read-only tokens (`atomic token --run ID --read-only --ttl 1h`),
 * for a web app that shows one run's progress (docs/design/security.md).
 *
 * A token is `atr1.<root run id>.<expiry, ms since the epoch>.<mac>`, the
 * mac an HMAC-SHA256 of the rest under the status token: the server checks
 * it without storing anything, a token cannot be changed to name another
 * run or a later expiry, and a new status token (delete the file) revokes
 * every run token with it. Such a token may only read (GET, HEAD) the API
 * routes of its run and of the run's child runs (`/api/runs/:id…`); the
 * page, the run list, metrics, service and schedules, and every request
 * that changes something are refused (403).
 */

import { createHmac, timingSafeEqual } from "node:crypto";

const PREFIX = "atr1";
const TOKEN = /^atr1\.([0-9a-z]{1,64})\.(\d{1,15})\.([0-9a-f]{64})$/;
/** The longest a run token may live. */
export const MAX_RUN_TOKEN_TTL_MS = 30 * 24 * 3_600_000;

function mac(secret: string, body: string): string {
  return createHmac("sha256", secret).update(`atomic run token v1\u0000${body}`).digest("hex");
}

export function mintRunToken(secret: string, rootId: string, ttlMs: number, now = Date.now()): { token: string; expiresAt: number } {
  const expiresAt = now + ttlMs;
  const body = `${PREFIX}.${rootId}.${expiresAt}`;
  return { token: `${body}.${mac(secret, body)}`, expiresAt };
}

/** True when `text` has a run token's form (whether or not it is valid). */
export function looksLikeRunToken(text: string): boolean {
  return text.startsWith(`${PREFIX}.`);
}

/** The run a token reads, or why it is refused. */
export function checkRunToken(secret: string, text: string, now = Date.now()): { rootId: string } | { refused: "wrong" | "expired" } {
  const m = TOKEN.exec(text);
  if (!m) return { refused: "wrong" };
  const body = `${PREFIX}.${m[1]}.${m[2]}`;
  const want = Buffer.from(mac(secret, body));
  const got = Buffer.from(m[3]!);
  if (want.length !== got.length || !timingSafeEqual(want, got)) return { refused: "wrong" };
  if (Number(m[2]) <= now) return { refused: "expired" };
  return { rootId: m[1]! };
}

/** The run id a run-token request reads (`/api/runs/:id` and below), or undefined for any other path. */
export function runOfPath(path: string): string | undefined {
  const m = /^\/api\/runs\/([^/]+)(\/.*)?$/.exec(path);
  return m ? decodeURIComponent(m[1]!) : undefined;
}
