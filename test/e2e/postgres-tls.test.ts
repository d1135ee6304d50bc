/**
 * TLS to Postgres as libpq users expect it, through the binary, against a
 * cluster of the test's own with `ssl = on` and a certificate from a CA
 * made here (openssl): `sslmode=require` encrypts (the server's view of
 * a running atomic's connections says so); `verify-full` with the CA and the certificate's
 * host name works and runs a workflow; `verify-full` with another CA, or
 * with an address the certificate does not name, is refused in one
 * sentence and a hint, exit 2, nothing written; `sslmode=require` against
 * a server without TLS is refused the same way.
 */

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, chownSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { startCluster, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

let certs: string;
let tls: Cluster;
let plain: Cluster;

function openssl(args: string[]): void {
  const p = Bun.spawnSync(["openssl", ...args], { cwd: certs, stdout: "pipe", stderr: "pipe" });
  if (!p.success) throw new Error(`openssl ${args.join(" ")}: ${p.stderr.toString()}`);
}

/** A CA (`name`.pem, its key) and, signed by it, a server certificate for localhost only. */
function makeCa(name: string): void {
  openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", `/CN=${name}`, "-keyout", `${name}.key`, "-out", `${name}.pem`]);
}

function postgresIds(): { uid: number; gid: number } {
  const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("postgres:"))!;
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

beforeAll(async () => {
  certs = makeTempDir("atomic-tls-");
  chmodSync(certs, 0o755); // the server (user postgres) reads its certificate here
  makeCa("ca");
  makeCa("other-ca");
  openssl(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"]);
  writeFileSync(join(certs, "san.ext"), "subjectAltName = DNS:localhost\n");
  openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem"]);
  const { uid, gid } = postgresIds();
  for (const f of ["server.pem", "server.key"]) chownSync(join(certs, f), uid, gid);
  chmodSync(join(certs, "server.key"), 0o600);
  for (const f of ["ca.pem", "other-ca.pem"]) chmodSync(join(certs, f), 0o644);
  tls = await startCluster({ conf: ["ssl = on", `ssl_cert_file = '${join(certs, "server.pem")}'`, `ssl_key_file = '${join(certs, "server.key")}'`] });
  plain = await startCluster();
}, 60_000);

afterAll(() => {
  tls?.stop();
  plain?.stop();
  removeTempDirs();
});

/** The cluster's URL for `host`, with `params`, its password in PGPASSWORD (not the URL). */
function url(c: Cluster, host: string, params: string): string {
  return `postgres://postgres@${host}:${c.port}/postgres?${params}`;
}

async function atomic(args: string[], journal: string, c: Cluster) {
  return runAtomic([...args, "--journal", journal], { home: join(makeTempDir("atomic-tls-home-"), "h"), env: { PGPASSWORD: c.password } });
}

function expectRefusal(r: { code: number; stderr: string }, sentence: RegExp): void {
  expect(r.code).toBe(2);
  expect(r.stderr).toMatch(sentence);
  expect(r.stderr).toMatch(/\nhint: /);
  expect(r.stderr).not.toContain("    at ");
  expect(r.stderr).not.toContain(tls.password);
}

describe("TLS to Postgres", () => {
  test("sslmode=require encrypts: the server sees every connection of a running atomic as TLS", async () => {
    const journal = url(tls, "127.0.0.1", "sslmode=require&application_name=atomic-tls-probe&schema=req");
    const dir = makeTempDir("atomic-tls-wf-");
    const gate = join(dir, "gate");
    const wf = join(dir, "wait.ts");
    writeFileSync(
      wf,
      `import { existsSync } from "node:fs";\nimport { workflow } from "atomic";\nexport default workflow({ name: "tls-wait", async run(ctx) { return ctx.tool("wait", {}, async () => { while (!existsSync(${JSON.stringify(gate)})) await Bun.sleep(20); return "opened"; }); } });\n`,
    );
    const run = spawnAtomic(["run", wf, "--journal", journal], { home: join(dir, "h"), env: { PGPASSWORD: tls.password } });
    const admin = new pg.Client({ connectionString: tls.adminUrl });
    await admin.connect();
    try {
      const seen = await waitUntil(async () => {
        const rows = (await admin.query("select s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid) where a.application_name = 'atomic-tls-probe'")).rows;
        return rows.length > 0 ? rows : undefined;
      }, 30_000, "the run's connections");
      expect(seen!.every((r) => r.ssl === true)).toBe(true);
    } finally {
      writeFileSync(gate, "");
      await admin.end();
    }
    expect(await run.exited).toBe(0);
  }, 60_000);

  test("verify-full with the CA and the certificate's host name: a workflow runs", async () => {
    const journal = url(tls, "localhost", `sslmode=verify-full&sslrootcert=${join(certs, "ca.pem")}&schema=full`);
    const wf = join(makeTempDir("atomic-tls-wf-"), "wf.ts");
    writeFileSync(wf, `import { workflow } from "atomic";\nexport default workflow({ name: "tls", async run(ctx) { return (await ctx.tool("t", {}, async () => "over tls")); } });\n`);
    const r = await atomic(["run", wf, "--json"], journal, tls);
    if (r.code !== 0) throw new Error(r.stderr + r.stdout);
    expect(r.stdout).toContain('"outputs":"over tls"');
  }, 60_000);

  test("verify-full with another CA, or an address the certificate does not name, is refused and writes nothing", async () => {
    const wrongCa = await atomic(["runs"], url(tls, "localhost", `sslmode=verify-full&sslrootcert=${join(certs, "other-ca.pem")}&schema=wrongca`), tls);
    expectRefusal(wrongCa, /^error: the TLS certificate of Postgres at .* is not trusted/);
    const wrongName = await atomic(["runs"], url(tls, "127.0.0.1", `sslmode=verify-full&sslrootcert=${join(certs, "ca.pem")}&schema=wrongname`), tls);
    expectRefusal(wrongName, /^error: the TLS certificate of Postgres at .* is not trusted/);
    // verify-ca checks the chain, not the name: the address works there.
    const caOnly = await atomic(["runs"], url(tls, "127.0.0.1", `sslmode=verify-ca&sslrootcert=${join(certs, "ca.pem")}&schema=caonly`), tls);
    expect(caOnly.code).toBe(0);
    const admin = new pg.Client({ connectionString: tls.adminUrl });
    await admin.connect();
    try {
      const schemas = (await admin.query("select nspname from pg_namespace where nspname in ('wrongca', 'wrongname')")).rows;
      expect(schemas).toEqual([]);
    } finally {
      await admin.end();
    }
  }, 60_000);

  test("sslmode=require against a server without TLS is refused; sslmode=prefer falls back to plain", async () => {
    const refused = await atomic(["runs"], url(plain, "127.0.0.1", "sslmode=require"), plain);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^error: Postgres at .* does not accept TLS, which sslmode=require requires/);
    expect(refused.stderr).toMatch(/\nhint: /);
    const prefer = await atomic(["runs"], url(plain, "127.0.0.1", "sslmode=prefer"), plain);
    expect(prefer.code).toBe(0);
  }, 60_000);
});
