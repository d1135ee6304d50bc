/**
 * Bad Postgres journal URLs through the real binary: each is one sentence
 * and a hint, exit 2, no stack trace, the password nowhere in the output,
 * and nothing written (no home made, no schema created or changed).
 * Malformed URL, unknown host, refused connection, wrong password, missing
 * database, no permission to create the schema, a schema from a newer
 * atomic, and servers that are not Postgres (an HTTP server, a TCP server
 * that greets like SSH) the test starts on ports of its own. A retry window
 * (ATOMIC_JOURNAL_RETRY_MS) that is not a whole number of milliseconds from
 * 1 to a day is refused the same way by every command, before anything
 * connects.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import pg from "pg";
import { runAtomic } from "../helpers/atomic.ts";
import { adminQuery, freshDatabase } from "../helpers/postgres.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
const closers: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const close of closers.splice(0)) await close();
  await cleanupNow();
});

const SECRET = "pw-never-shown-4711";

/** `atomic <args>` with the journal URL in ATOMIC_JOURNAL (and `env`): exit 2, one sentence and a hint, no home made. */
async function expectRefused(url: string, message: RegExp, hint: RegExp, args = ["runs"], env: Record<string, string> = {}): Promise<void> {
  const home = join(makeTempDir(), "home");
  const r = await runAtomic(args, { home, env: { ATOMIC_JOURNAL: url, ...env } });
  expect({ url, code: r.code }).toEqual({ url, code: 2 });
  const e = expectOneSentenceError(r.stderr);
  expect(e.message).toMatch(message);
  expect(e.hint ?? "").toMatch(hint);
  expect(r.stdout + r.stderr).not.toContain(SECRET);
  expect(existsSync(home)).toBe(false);
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

e2eTest("postgres: a malformed URL is refused before anything connects, its password hidden", async () => {
  await expectRefused(`postgres://me:${SECRET}@db.example:notaport/app`, /^the journal URL postgres:\/\/me:\*\*\*@db\.example:notaport\/app is not valid: it does not parse as a URL\.$/, /postgres:\/\/user@host:5432\/database/);
  await expectRefused("postgres://me@db.example/app?colour=blue", /unknown parameter "colour"/, /postgres:\/\//);
  await expectRefused("postgres://me@db.example/app?schema=Not-Valid", /the schema "Not-Valid" must be lower-case/, /postgres:\/\//);
  await expectRefused("postgres://me@db.example/app?sslmode=sometimes", /sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full/, /postgres:\/\//);
});

e2eTest("postgres: an unknown host, a refused connection", async () => {
  await expectRefused(`postgres://me:${SECRET}@no-such-host.invalid:5432/app`, /^cannot find the journal's Postgres host no-such-host\.invalid: the name does not resolve\.$/, /host name/);
  const port = await freePort();
  await expectRefused(`postgres://me:${SECRET}@127.0.0.1:${port}/app`, new RegExp(`^Postgres at 127\\.0\\.0\\.1:${port} refused the connection\\.$`), /running there and listening/, ["run", fixture("waits.ts")]);
});

e2eTest("postgres: a wrong password, a database that does not exist", async () => {
  const url = new URL(await freshDatabase("bad"));
  const host = url.host;
  url.password = SECRET;
  await expectRefused(url.toString(), new RegExp(`^Postgres at ${host.replace(/\./g, "\\.")} refused user postgres: password authentication failed\\.$`), /PGPASSWORD or ~\/\.pgpass/);
  const missing = new URL(await freshDatabase("bad"));
  missing.pathname = "/no_such_database";
  await expectRefused(missing.toString(), /^the database no_such_database does not exist on Postgres at .*\.$/, /createdb no_such_database/);
});

e2eTest("postgres: a user who may not create the journal's schema; nothing is created", async () => {
  const db = await freshDatabase("perm");
  const name = new URL(db).pathname.slice(1);
  const role = `limited_${process.pid}_${Date.now() % 100000}`;
  await adminQuery(`create role ${role} login password '${SECRET}'`);
  closers.push(() => adminQuery(`drop owned by ${role}; drop role ${role}`).then(() => {}, () => {}));
  const u = new URL(db);
  u.username = role;
  u.password = SECRET;
  await expectRefused(u.toString(), new RegExp(`^user ${role} may not create the journal's schema atomic in database ${name} at postgres://${role}@.*\\.$`), new RegExp(`create schema atomic authorization ${role}`));
  const pool = new pg.Pool({ connectionString: db, max: 1 });
  closers.push(() => pool.end());
  expect((await pool.query("select count(*)::int as n from pg_namespace where nspname = 'atomic'")).rows[0]).toEqual({ n: 0 });
});

e2eTest("postgres: a schema written by a newer atomic is refused, left as it was", async () => {
  const db = await freshDatabase("newer");
  const home = makeTempDir();
  expect((await runAtomic(["runs"], { home, env: { ATOMIC_JOURNAL: db } })).code).toBe(0);
  const pool = new pg.Pool({ connectionString: db, max: 1 });
  closers.push(() => pool.end());
  await pool.query("update atomic.meta set value = '999' where key = 'schema_version'");
  for (const args of [["runs"], ["run", fixture("waits.ts")]]) {
    const r = await runAtomic(args, { home, env: { ATOMIC_JOURNAL: db } });
    expect(r.code).toBe(2);
    const e = expectOneSentenceError(r.stderr);
    expect(e.message).toMatch(/^the journal at postgres:\/\/postgres@.* has schema version 999, newer than version \d+ that this atomic knows\.$/);
    expect(e.hint).toBe("upgrade atomic, or name another schema in the journal URL (?schema=NAME)");
  }
  expect((await pool.query("select value from atomic.meta where key = 'schema_version'")).rows).toEqual([{ value: "999" }]);
  expect((await pool.query("select count(*)::int as n from atomic.runs")).rows).toEqual([{ n: 0 }]);
});

e2eTest("postgres: a server on the port that is not Postgres (HTTP; a TCP server greeting like SSH)", async () => {
  const http = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("hello") });
  closers.push(() => http.stop(true));
  const ssh = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(s) {
        s.write("SSH-2.0-OpenSSH_9.2\r\n");
        s.end();
      },
    },
  });
  closers.push(() => ssh.stop(true));
  for (const url of [`postgres://me:${SECRET}@127.0.0.1:${http.port}/app`, `postgres://me@127.0.0.1:${http.port}/app?sslmode=disable`, `postgres://me@127.0.0.1:${ssh.port}/app?sslmode=disable`]) {
    const port = new URL(url).port;
    await expectRefused(url, new RegExp(`^the server at 127\\.0\\.0\\.1:${port} does not answer like Postgres \\(.*\\)\\.$`), /is Postgres listening there/);
  }
});

e2eTest("postgres: an ATOMIC_JOURNAL_RETRY_MS that is not a number, negative, zero or absurdly large is refused by every command; nothing is created", async () => {
  const db = await freshDatabase("retry");
  const wrong = new RegExp(`^ATOMIC_JOURNAL_RETRY_MS must be a whole number of milliseconds from 1 to 86400000 \\(a day\\), got "(soon|-5|0|1\\.5|86400001|1e9|9{20})"\\.$`);
  const hint = /^for example ATOMIC_JOURNAL_RETRY_MS=15000 \(the default\), or unset it$/;
  for (const value of ["soon", "-5", "0", "1.5", "86400001", "1e9", "9".repeat(20)]) {
    for (const args of [["run", fixture("waits.ts")], ["runs"], ["serve", "--port", "0"], ["worker", "--host-id", "h1"]]) {
      await expectRefused(db, wrong, hint, args, { ATOMIC_JOURNAL_RETRY_MS: value });
    }
  }
  // The database was never written: no command reached it (each would have made the journal's schema).
  const pool = new pg.Pool({ connectionString: db, max: 1 });
  closers.push(() => pool.end());
  expect((await pool.query("select count(*)::int as n from pg_namespace where nspname = 'atomic'")).rows[0]).toEqual({ n: 0 });
  // A whole number in range is taken: the same command with the good password goes on (and makes the schema).
  const ok = await runAtomic(["runs"], { home: join(makeTempDir(), "home"), env: { ATOMIC_JOURNAL: db, ATOMIC_JOURNAL_RETRY_MS: " 500 " } });
  expect(ok.stderr).toBe("");
  expect(ok.code).toBe(0);
});
