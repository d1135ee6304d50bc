/**
 * Throw-away Postgres clusters for tests. Tests never touch a Postgres they
 * did not start.
 *
 * - `startCluster()` makes one: a copy of this process's `initdb` output
 *   in a fresh temp directory (as the `postgres` user when running as root:
 *   initdb refuses root), then `pg_ctl start` on a free port of 127.0.0.1
 *   with a socket directory of its own. initdb runs once per process, into
 *   a template directory removed with the process (`initdbTemplate`; the
 *   processes it starts copy it too, while it is there): it
 *   costs about 1 CPU-second on this project's 2-core machine, the copy
 *   about 0.2, and a suite starts a dozen or more clusters. The clusters of
 *   one process (and of the processes it starts) share the template's
 *   superuser password. Password
 *   authentication over TCP (scram), so the admin URL carries a password
 *   like a real deployment's. `stop()` ends it
 *   (`-m immediate`) and deletes its files. `listen` and `hba` open it to
 *   other addresses (test/helpers/fleet.ts: a bridge its hosts reach it on).
 * - `testPostgres()` is the cluster a test file shares: the one
 *   scripts/test.sh started for the whole suite (its URL in
 *   ATOMIC_TEST_POSTGRES_URL), else one this process starts on first use and
 *   stops when it exits (`afterAll` of the file and, whatever happened, the
 *   process's exit handler).
 * - `freshDatabase()` gives each caller a database of its own in it, so
 *   tests do not see each other's rows.
 * - Every cluster directory names the process that owns it (`owner`); one
 *   whose owner is gone (a test process killed before its exit handler ran)
 *   is stopped and removed by the next `startCluster()` (the stale sweep).
 *
 * A test cluster is throw-away, so it is set for the suite's CPU, not for
 * a machine's crash (`THROWAWAY`; benchmarks of Postgres's own speed ask
 * for a `durable` one, a real deployment's defaults):
 * - `fsync = off`: the server still write()s every commit's WAL before it
 *   answers, and only skips asking the kernel to put it on the disk. What
 *   the tests do to Postgres is kill its processes (`pg_ctl stop` and
 *   `restart -m immediate`, SIGKILL, `pg_terminate_backend`), never the
 *   machine, and the kernel's page cache outlives any process: an outage
 *   or fault test's server comes back through the same crash recovery,
 *   with every acknowledged commit, as with fsync on.
 *   `synchronous_commit` stays on for that reason: off, a commit is
 *   answered before its WAL leaves the server's memory, and a killed server
 *   would lose commits atomic was told were made, which no test means.
 *   `full_page_writes` stays on too: it guards against a page half
 *   written, which a kill during the write could leave.
 * - `autovacuum = off`: its launcher visits every database in turn (the
 *   suite's cluster gathers hundreds: `freshDatabase`, a schema per home),
 *   each visit a new process that reads the database's catalog, for
 *   tables that live minutes. Nothing atomic does depends on it: gc runs
 *   its own VACUUM, and no test reads planner statistics; without it a
 *   table's size changes only by what the test did.
 *
 * Run as a script it serves scripts/test.sh: `start` prints the cluster's
 * URL and directory (owned by the pid given, the script's shell), `stop DIR`
 * ends it.
 */

import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, chownSync, mkdirSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

export const POSTGRES_URL_ENV = "ATOMIC_TEST_POSTGRES_URL";
const PREFIX = "atomic-pg-";
/** The settings of a test cluster that a real deployment's durability would add CPU to (header). */
const THROWAWAY = ["fsync = off", "autovacuum = off"];

export interface Cluster {
  dir: string;
  dataDir: string;
  port: number;
  /** postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres */
  adminUrl: string;
  password: string;
  /** Stops it (immediately) and removes its files; a second call does nothing. */
  stop(): void;
  /** `pg_ctl restart -m immediate` (a crash and recovery, for fault tests). */
  restart(): void;
  /** The server down (`pg_ctl stop -m immediate`), its files kept; `startServer` brings it back on the same port. */
  stopServer(): void;
  startServer(): void;
}

/** The installed server's programs (initdb, pg_ctl, pgbench), newest major version first. */
export function binDir(): string | undefined {
  for (const v of ["17", "16", "15", "14", "13"]) {
    const dir = `/usr/lib/postgresql/${v}/bin`;
    if (existsSync(join(dir, "initdb"))) return dir;
  }
  return undefined;
}

/** Whether this machine can start a cluster (Debian's postgresql installed). */
export function postgresInstalled(): boolean {
  return binDir() !== undefined || process.env[POSTGRES_URL_ENV] !== undefined;
}

const asRoot = process.getuid?.() === 0;

function run(argv: string[], opts: { allowFail?: boolean } = {}): { ok: boolean; output: string } {
  const cmd = asRoot ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
  const p = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe", env: { ...process.env, LC_ALL: "C" } });
  const output = `${p.stdout.toString()}${p.stderr.toString()}`;
  if (!p.success && !opts.allowFail) throw new Error(`${argv.join(" ")} failed (${p.exitCode}): ${output}`);
  return { ok: p.success, output };
}

/**
 * A port to try: pg_ctl start fails when it is taken, and the start is tried again on another (all synchronous).
 * Below the kernel's ephemeral range (ip_local_port_range, 32768 up here), which every outgoing connection and
 * every `port: 0` listener draws from: a cluster stopped for an outage test must find its port free again when
 * it starts on it again, and one in that range could be taken meanwhile.
 */
function randomPort(): number {
  return 10_000 + Math.floor(Math.random() * (ephemeralLow() - 10_000));
}

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return low > 12_000 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function stopDir(dir: string): void {
  const bin = binDir();
  const dataDir = join(dir, "data");
  if (bin && existsSync(join(dataDir, "postmaster.pid"))) run([join(bin, "pg_ctl"), "-D", dataDir, "-m", "immediate", "-w", "stop"], { allowFail: true });
  rmSync(dir, { recursive: true, force: true });
}

/**
 * A small process that runs `command` once `owner` is gone however it went
 * (here: stops and removes a cluster): bun test emits no "exit" event
 * (measured: only afterAll hooks run), and a test process may be killed. It
 * checks once a second.
 */
export function watchOwner(owner: number, command: string[]): void {
  const script = 'while kill -0 "$0" 2>/dev/null; do sleep 1; done; exec "$@"';
  const watcher = Bun.spawn(["sh", "-c", script, String(owner), ...command], {
    stdin: "ignore",
    stdout: "ignore",
    stderr: "ignore",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
  });
  watcher.unref();
}

/** Clusters of owners that no longer exist: stopped and removed. */
export function sweepStaleClusters(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(PREFIX)) continue;
    const dir = join(tmpdir(), name);
    let owner = 0;
    try {
      owner = Number(readFileSync(join(dir, "owner"), "utf8"));
    } catch {
      continue; // being made right now, or not one of ours
    }
    if (owner > 0 && !pidAlive(owner)) stopDir(dir);
  }
}

export interface ClusterOptions {
  /** The pid whose end stops and removes the cluster (default: this process). */
  owner?: number;
  /** A real deployment's durability (fsync, autovacuum), for benchmarks of Postgres's own speed; default: THROWAWAY. */
  durable?: boolean;
  /** Addresses it listens on (default 127.0.0.1 only); `adminUrl` always names 127.0.0.1, so list it. */
  listen?: string[];
  /** pg_hba.conf lines after initdb's (which allow 127.0.0.1 and ::1 with scram), e.g. `host all all 10.1.2.0/24 scram-sha-256`. */
  hba?: string[];
  /** More postgresql.conf settings, e.g. `tcp_keepalives_idle = 1`. */
  conf?: string[];
  /** TLS on (`ssl = on`, a self-signed certificate for CN=localhost made with openssl); plain TCP also works. */
  tls?: boolean;
}

/** This process's initdb output (data directory and superuser password), made on first use. */
let template: { dataDir: string; password: string } | undefined;
/**
 * Where a process's template is, for the processes it starts (a test's fixture that makes a fleet of its own):
 * they copy it too while it is there, rather than run initdb again (a second of CPU each).
 */
const TEMPLATE_ENV = "ATOMIC_TEST_POSTGRES_TEMPLATE";

/** The template of the process that started this one (TEMPLATE_ENV), while it is there. */
function inheritedTemplate(): { dataDir: string; password: string } | undefined {
  const dir = process.env[TEMPLATE_ENV];
  if (!dir) return undefined;
  try {
    return { dataDir: join(dir, "data"), password: readFileSync(join(dir, "pwfile"), "utf8").trim() };
  } catch {
    return undefined; // its owner ended and it was removed: this process makes its own
  }
}

function initdbTemplate(bin: string): { dataDir: string; password: string } {
  if (template && existsSync(template.dataDir)) return template;
  const inherited = inheritedTemplate();
  if (inherited && existsSync(inherited.dataDir)) return inherited;
  const dir = mkdtempSync(join(tmpdir(), PREFIX));
  // Named like a cluster's directory, with its owner: the stale sweep removes it too (no server ever runs in it).
  writeFileSync(join(dir, "owner"), String(process.pid));
  const password = `pw-${crypto.randomUUID()}`;
  writeFileSync(join(dir, "pwfile"), `${password}\n`);
  if (asRoot) {
    const { uid, gid } = postgresIds();
    for (const p of [dir, join(dir, "pwfile")]) chownSync(p, uid, gid);
  }
  const dataDir = join(dir, "data");
  try {
    run([join(bin, "initdb"), "-D", dataDir, "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256", `--pwfile=${join(dir, "pwfile")}`, "-E", "UTF8", "--no-sync", "--no-instructions"]);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  watchOwner(process.pid, [process.execPath, import.meta.path, "stop", dir]);
  template = { dataDir, password };
  process.env[TEMPLATE_ENV] = dir;
  return template;
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  return startClusterSync(opts);
}

/** `startCluster`, synchronously (for helpers that build a child's environment without awaiting). */
export function startClusterSync(opts: ClusterOptions = {}): Cluster {
  const bin = binDir();
  if (!bin) throw new Error("Postgres is not installed (apt-get install -y postgresql)");
  sweepStaleClusters();
  const made = initdbTemplate(bin);
  const password = made.password;
  const dir = mkdtempSync(join(tmpdir(), PREFIX));
  writeFileSync(join(dir, "owner"), String(opts.owner ?? process.pid));
  const dataDir = join(dir, "data");
  const socketDir = join(dir, "socket");
  mkdirSync(socketDir);
  if (asRoot) {
    const { uid, gid } = postgresIds();
    for (const p of [dir, socketDir]) chownSync(p, uid, gid);
  }
  let stopped = false;
  const cluster: Cluster = {
    dir,
    dataDir,
    port: 0,
    adminUrl: "",
    password,
    stop() {
      if (stopped) return;
      stopped = true;
      stopDir(dir);
    },
    restart() {
      run([join(bin, "pg_ctl"), "-D", dataDir, "-m", "immediate", "-w", "-l", join(dir, "log"), "restart"]);
    },
    stopServer() {
      run([join(bin, "pg_ctl"), "-D", dataDir, "-m", "immediate", "-w", "stop"]);
    },
    startServer() {
      run([join(bin, "pg_ctl"), "-D", dataDir, "-l", join(dir, "log"), "-w", "-t", "60", "-o", `-p ${cluster.port}`, "start"]);
    },
  };
  try {
    run(["cp", "-a", made.dataDir, dataDir]);
    if (opts.hba?.length) appendFileSync(join(dataDir, "pg_hba.conf"), `${opts.hba.join("\n")}\n`);
    const conf = [
      `listen_addresses = '${(opts.listen ?? ["127.0.0.1"]).join(",")}'`,
      `unix_socket_directories = '${socketDir}'`,
      "max_connections = 200",
      "shared_buffers = 32MB",
      ...(opts.durable ? [] : THROWAWAY),
      ...(opts.tls ? ["ssl = on"] : []),
      ...(opts.conf ?? []),
    ];
    writeFileSync(join(dataDir, "postgresql.auto.conf"), `${conf.join("\n")}\n`);
    if (asRoot) chownSync(join(dataDir, "postgresql.auto.conf"), postgresIds().uid, postgresIds().gid);
    // server.crt and server.key in the data directory: Postgres's default file names.
    if (opts.tls) run(["openssl", "req", "-new", "-x509", "-days", "2", "-nodes", "-subj", "/CN=localhost", "-keyout", join(dataDir, "server.key"), "-out", join(dataDir, "server.crt")]);
    if (opts.tls) run(["chmod", "600", join(dataDir, "server.key")]);
    for (let attempt = 0; ; attempt++) {
      const port = randomPort();
      const logBefore = readLog(dir, Infinity).length;
      const started = run([join(bin, "pg_ctl"), "-D", dataDir, "-l", join(dir, "log"), "-w", "-t", "60", "-o", `-p ${port}`, "start"], { allowFail: true });
      // Postgres starts when it can bind at least one of several listen addresses (pg_ctl -w asks over the
      // socket), so a port another process held on one address left a cluster refusing the tests' 127.0.0.1
      // (a fleet's sandbox-host test, ECONNREFUSED): every address bound, or another port.
      if (started.ok && readLog(dir, Infinity).slice(logBefore).includes("could not bind")) {
        run([join(bin, "pg_ctl"), "-D", dataDir, "-m", "immediate", "-w", "stop"], { allowFail: true });
        if (attempt >= 7) throw new Error(`pg_ctl start could not bind every listen address:\n${readLog(dir)}`);
        continue;
      }
      if (started.ok) {
        cluster.port = port;
        cluster.adminUrl = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
        watchOwner(opts.owner ?? process.pid, [process.execPath, import.meta.path, "stop", dir]);
        return cluster;
      }
      if (attempt >= 7) throw new Error(`pg_ctl start failed: ${started.output}\n${readLog(dir)}`);
    }
  } catch (err) {
    cluster.stop();
    throw err;
  }
}

function readLog(dir: string, chars = 4000): string {
  try {
    return readFileSync(join(dir, "log"), "utf8").slice(-chars);
  } catch {
    return "";
  }
}

function postgresIds(): { uid: number; gid: number } {
  const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("postgres:"));
  if (!line) throw new Error("there is no postgres user (apt-get install -y postgresql)");
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

// ---------------------------------------------------------------- the cluster of a test file

let own: Cluster | undefined;

/**
 * The admin URL of the cluster this process's tests use: the suite's
 * (scripts/test.sh), or one of its own started on first use and stopped when
 * the process exits (bun test runs every file of an invocation in one
 * process, so that is after the last file; a process killed before its exit
 * handler leaves a cluster the next start sweeps away).
 */
export function testPostgresSync(): string {
  const fromEnv = process.env[POSTGRES_URL_ENV];
  if (fromEnv) return fromEnv;
  if (!own) {
    own = startClusterSync();
    const cluster = own;
    process.once("exit", () => cluster.stop());
    // Processes this one starts (helpers that open the journal themselves) use this cluster rather than start
    // their own, which would outlive them when a test kills them.
    process.env[POSTGRES_URL_ENV] = cluster.adminUrl;
  }
  return own.adminUrl;
}

export async function testPostgres(): Promise<string> {
  return testPostgresSync();
}

/**
 * ATOMIC_TEST_JOURNAL=postgres runs the binary's tests on the Postgres
 * journal: every home gets a schema of its own (named after it) in the test
 * cluster's `postgres` database, passed as ATOMIC_JOURNAL (test/helpers/
 * atomic.ts). Undefined when the tests run on the embedded journal.
 */
export function journalUrlForHome(home: string): string | undefined {
  if (process.env.ATOMIC_TEST_JOURNAL !== "postgres") return undefined;
  const url = new URL(testPostgresSync());
  url.searchParams.set("schema", `h_${createHash("sha256").update(home.replace(/\/+$/, "")).digest("hex").slice(0, 20)}`);
  return url.toString();
}

/** `openJournal` options naming the journal of `home` under ATOMIC_TEST_JOURNAL (empty on the embedded journal). */
export function journalOf(home: string): { journalUrl?: string } {
  const url = journalUrlForHome(home);
  return url ? { journalUrl: url } : {};
}

let admin: pg.Pool | undefined;
let adminFor = "";

async function adminPool(): Promise<pg.Pool> {
  const url = await testPostgres();
  if (!admin || adminFor !== url) {
    await closeAdmin();
    admin = new pg.Pool({ connectionString: url, max: 2 });
    adminFor = url;
  }
  return admin;
}

async function closeAdmin(): Promise<void> {
  const a = admin;
  admin = undefined;
  await a?.end().catch(() => {});
}

/** Runs one statement as the cluster's superuser. */
export async function adminQuery<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values: unknown[] = []): Promise<R[]> {
  return (await (await adminPool()).query<R>(text, values)).rows;
}

let databases = 0;

/** A new, empty database in the test cluster; returns its URL (the superuser's, with its password). */
export async function freshDatabase(prefix = "t"): Promise<string> {
  const name = `${prefix}_${process.pid}_${++databases}_${Math.random().toString(36).slice(2, 8)}`;
  await adminQuery(`create database "${name}"`);
  const url = new URL(await testPostgres());
  url.pathname = `/${name}`;
  return url.toString();
}

/** `url` with its database replaced. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** A new, empty database `name` in a cluster of the caller's own; returns its URL (the superuser's). */
export async function createDatabase(cluster: Cluster, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: cluster.adminUrl });
  await c.connect();
  try {
    await c.query(`create database "${name}"`);
  } finally {
    await c.end();
  }
  return withDatabase(cluster.adminUrl, name);
}

if (import.meta.main) {
  const [command, arg] = process.argv.slice(2);
  if (command === "start") {
    const cluster = await startCluster({ owner: Number(arg) || process.ppid });
    console.log(`${cluster.adminUrl} ${cluster.dir}`);
  } else if (command === "stop" && arg) {
    stopDir(arg);
  } else {
    console.error("usage: bun test/helpers/postgres.ts start OWNER_PID | stop DIR");
    process.exit(2);
  }
}
