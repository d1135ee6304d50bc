/**
 * The status server on a real socket (Bun.serve): a free port with port 0,
 * the token file (0600, created once, reused), the Host check over HTTP,
 * clear errors for a busy port or a foreign address, and event streams that
 * outlive the server's idle timeout.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openJournal } from "../../src/journal/open.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { AtomicError } from "../../src/shared/errors.ts";
import { parsePort, startStatusServer, type StatusServer } from "../../src/status/server.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { journalData, sseReader } from "./support.ts";
import { DEFAULT_STREAM_OPTIONS } from "../../src/status/stream-hub.ts";
import { EVENT } from "../../src/engine/journal-events.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";

const servers: StatusServer[] = [];
const journals: Journal[] = [];

afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
  for (const j of journals.splice(0)) await j.close();
  removeTempDirs();
});

async function home(): Promise<{ home: string; journal: Journal }> {
  const dir = makeTempDir("atomic-status-");
  const journal = await openJournal({ home: dir, durability: "normal" });
  journals.push(journal);
  return { home: dir, journal };
}

async function serve(opts: Parameters<typeof startStatusServer>[0]): Promise<StatusServer> {
  const s = await startStatusServer(opts);
  servers.push(s);
  return s;
}

async function refusal(p: Promise<unknown>): Promise<AtomicError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(AtomicError);
    return err as AtomicError;
  }
  throw new Error("expected the promise to fail");
}

describe("status server", () => {
  test("port 0 picks a free port; the token file is created 0600 once and reused", async () => {
    const { home: dir, journal } = await home();
    const a = await serve({ journal, home: dir, port: 0 });
    expect(a.port).toBeGreaterThan(0);
    expect(a.url).toBe(`http://127.0.0.1:${a.port}/`);
    expect(a.exposed).toBe(false);
    expect(a.tokenPath).toBe(join(dir, "status-token"));
    expect(statSync(a.tokenPath).mode & 0o777).toBe(0o600);
    const token = readFileSync(a.tokenPath, "utf8").trim();
    expect(token).toMatch(/^[0-9a-f]{64}$/);

    const health = await fetch(`${a.url}healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true });
    const byName = await fetch(`http://localhost:${a.port}/healthz`).catch(() => undefined);
    if (byName) expect(byName.status).toBe(200);
    const rebound = await fetch(`${a.url}api/runs`, { headers: { host: `attacker.example:${a.port}` } });
    expect(rebound.status).toBe(403);

    // the page needs a session (no token in it); the login URL carries the token; a POST with it is accepted
    expect((await fetch(a.url)).status).toBe(401);
    expect(a.loginUrl()).toBe(`${a.url}?token=${token}`);
    expect(a.loginUrl("/runs/x")).toBe(`${a.url}runs/x?token=${token}`);
    const runId = await seedRun(journal, { stages: 2 });
    const post = await fetch(`${a.url}api/runs/${runId}/control`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ action: "pause" }),
    });
    expect(post.status).toBe(409); // a finished run: the token was accepted, the action refused

    const b = await serve({ journal, home: dir, port: 0 });
    expect(readFileSync(b.tokenPath, "utf8").trim()).toBe(token);
    // an empty token file is filled in
    writeFileSync(b.tokenPath, "");
    const c = await serve({ journal, home: dir, port: 0 });
    expect(readFileSync(c.tokenPath, "utf8").trim()).toMatch(/^[0-9a-f]{64}$/);
  });

  test("a busy port, a foreign address and a bad --port are clear errors", async () => {
    const { home: dir, journal } = await home();
    const a = await serve({ journal, home: dir, port: 0 });
    const busy = await refusal(serve({ journal, home: dir, port: a.port }));
    expect(busy.code).toBe("port_in_use");
    expect(busy.message).toContain(`port ${a.port}`);
    expect(busy.hint).toContain("--port 0");
    const foreign = await refusal(serve({ journal, home: dir, port: 0, host: "192.0.2.1" }));
    expect(foreign.code).toBe("bad_host");
    for (const bad of ["abc", "-1", "65536", "1.5", "", " "]) {
      expect(() => parsePort(bad)).toThrow(/--port must be a whole number from 0 to 65535/);
    }
    expect(parsePort(undefined)).toBe(4317);
    expect(parsePort("0")).toBe(0);
  });

  test("event streams outlive the server's idle timeout and the feed's close delay: heartbeats and events still flow", async () => {
    const { home: dir, journal } = await home();
    const runId = await seedRun(journal, { stages: 1 });
    // A 1 s idle timeout. The stream options given replace only their own defaults.
    const s = await serve({ journal, home: dir, port: 0, idleTimeoutS: 1, stream: { pollMs: 20 } });
    expect(s.source.streams.opts).toEqual({ ...DEFAULT_STREAM_OPTIONS, pollMs: 20 });
    const token = readFileSync(s.tokenPath, "utf8").trim();
    const abort = new AbortController();
    const opened = Date.now();
    const open = async (path: string) => {
      const res = await fetch(`${s.url}api/runs/${runId}/${path}?from=now`, { signal: abort.signal, headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(200);
      return { path, sse: sseReader(res.body!) };
    };
    const streams = [await open("stream"), await open("stages/stage-0/stream")];
    // What a failed wait reports: how old each stream is, what it received, what the server still serves.
    const state = async () =>
      `${Date.now() - opened} ms after the streams opened: ${streams.map(({ path, sse }) => `${path}: ${sse.comments} comments, ${sse.ended ? "ended" : "open"}`).join("; ")}; ` +
      `the server has ${s.source.streams.feedCount} run feed(s), ${await s.source.streams.clientCount()} client(s)`;
    const waiting = async <T,>(what: string, p: Promise<T>): Promise<T> => {
      try {
        return await p;
      } catch (err) {
        throw new Error(`${what}: ${(err as Error).message}; ${await state()}`);
      }
    };
    for (const { path, sse } of streams) expect((await waiting(`${path}: its ready`, sse.next()))?.event).toBe("ready");
    // Quiet but for a heartbeat every 5 s (the default): longer than the idle timeout, than one sweep of Bun's
    // idle timer (every 4 s: a connection it would cut is cut within one) and than the feed's close delay (2 s).
    for (const { path, sse } of streams) {
      const before = sse.comments;
      await waiting(`${path}: a heartbeat`, sse.waitForComment(15_000));
      expect(sse.comments).toBe(before + 1);
    }
    // Still live: an event of the run arrives on the run's stream.
    const lease = await journal.acquireLease(runId, thisProcessHolder("test"), { timeoutMs: 30_000 });
    await journal.append(lease, [{ runId, type: EVENT.runResumed, at: Date.now(), payload: { drivenBy: "test" } }]);
    await journal.releaseLease(lease);
    const got = await waiting("the run's stream: the appended event", streams[0]!.sse.until((m) => m.event === "journal" && journalData(m).type === EVENT.runResumed, 15_000));
    expect(got.map((m) => journalData(m).type)).toEqual([EVENT.runResumed]);
    for (const { sse } of streams) expect(sse.ended).toBe(false);
    abort.abort();
    for (const { sse } of streams) await sse.cancel();
  }, 60_000); // its own limit, about the stream's age here
});
