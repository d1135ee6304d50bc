/**
 * Postgres journal URLs: `postgres://[user[:password]@]host[:port][/database][?param=value&...]`
 * (also `postgresql://`), read the way libpq users expect, by
 * pg-connection-string with its libpq compatibility (sslmode, the
 * certificate files); what is ours around it:
 *
 * - `schema` (where the journal's tables live, default `atomic`, so one
 *   database can host several installations), taken off before the
 *   library reads the URL.
 * - The password comes from the URL, else PGPASSWORD, else ~/.pgpass (or
 *   PGPASSFILE): the driver (pg) reads the last two itself when the URL has
 *   none. It is a registered secret (shared/secrets.ts) and never printed:
 *   `location` is the URL without it.
 * - The user defaults to PGUSER, else the login name; the database to
 *   PGDATABASE, else the user; the port to PGPORT, else 5432; sslmode to
 *   PGSSLMODE, else prefer; the certificate files to PGSSLROOTCERT,
 *   PGSSLCERT, PGSSLKEY (libpq's defaults, read through the environment
 *   registry, which the library does not do).
 * - sslmode allow (try without TLS, then with) and prefer's fallback are
 *   the connection's business (postgres-journal.ts, connect()).
 * - Known parameters only: `schema`, `sslmode`, `sslrootcert`, `sslcert`,
 *   `sslkey`, `application_name`, `connect_timeout` (seconds). Anything
 *   else is refused (libpq refuses unknown parameters too) rather than
 *   silently ignored; so are Unix-socket hosts. Every refusal is one
 *   sentence with a hint.
 */

import { userInfo } from "node:os";
import type { ConnectionOptions } from "node:tls";
import { parse } from "pg-connection-string";
import { UsageError } from "../../shared/errors.ts";
import { readEnv, type EnvSource } from "../../shared/config/environment.ts";

export const DEFAULT_SCHEMA = "atomic";
const SSL_MODES = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] as const;
export type SslMode = (typeof SSL_MODES)[number];
const PARAMS = ["schema", "sslmode", "sslrootcert", "sslcert", "sslkey", "application_name", "connect_timeout"] as const;

export interface PostgresTarget {
  host: string;
  port: number;
  user: string;
  /** From the URL only (undefined: the driver looks at PGPASSWORD, then ~/.pgpass). */
  password: string | undefined;
  database: string;
  schema: string;
  sslMode: SslMode;
  /** TLS options for the modes that use TLS. */
  tls: ConnectionOptions | undefined;
  applicationName: string;
  connectTimeoutMs: number;
  /** The URL as shown to people: everything but the password. */
  location: string;
}

export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}

const HINT = "write it as postgres://user@host:5432/database (optionally ?schema=NAME&sslmode=require)";

function malformed(shown: string, why: string): UsageError {
  return new UsageError("journal_url_invalid", `the journal URL ${shown} is not valid: ${why}`, { hint: HINT });
}

/** Hides a URL's password (a URL that does not even parse: everything between // and @). */
export function redactUrl(url: string): string {
  return url.replace(/\/\/([^/@]*?):[^@/]*@/, "//$1:***@");
}

export function parsePostgresUrl(url: string, env?: EnvSource): PostgresTarget {
  const shown = redactUrl(url);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw malformed(shown, "it does not parse as a URL");
  }
  if (!/^postgres(ql)?:$/i.test(u.protocol)) throw malformed(shown, "it must start with postgres://");
  const host = decodeURIComponent(u.hostname).replace(/^\[(.*)\]$/, "$1") || readEnv("PGHOST", env) || "";
  if (!host) throw malformed(shown, "it names no host");
  if (host.startsWith("/")) throw malformed(shown, "Unix-socket hosts are not supported; use a TCP host");
  const pgPort = readEnv("PGPORT", env);
  const port = u.port ? Number(u.port) : pgPort ? Number(pgPort) : 5432;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw malformed(shown, `the port ${u.port || pgPort} is not a port number`);
  const user = decode(u.username, shown, "user") || readEnv("PGUSER", env) || safeLogin();
  if (!user) throw malformed(shown, "it names no user");
  const password = u.password ? decode(u.password, shown, "password") : undefined;
  const path = u.pathname.replace(/^\//, "");
  if (path.includes("/")) throw malformed(shown, "the database name contains a slash");
  const database = decode(path, shown, "database") || readEnv("PGDATABASE", env) || user;

  for (const key of u.searchParams.keys()) {
    if (!(PARAMS as readonly string[]).includes(key)) {
      throw malformed(shown, `unknown parameter "${key}" (known: ${PARAMS.join(", ")})`);
    }
  }
  const q = (k: (typeof PARAMS)[number]) => u.searchParams.get(k) ?? undefined;
  const schema = q("schema") ?? DEFAULT_SCHEMA;
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw malformed(shown, `the schema "${schema}" must be lower-case letters, digits and underscores (at most 63, not starting with a digit)`);
  }
  const sslMode = (q("sslmode") ?? readEnv("PGSSLMODE", env) ?? "prefer") as SslMode;
  if (!(SSL_MODES as readonly string[]).includes(sslMode)) throw malformed(shown, `sslmode must be one of ${SSL_MODES.join(", ")}`);
  const timeout = q("connect_timeout") ?? readEnv("PGCONNECT_TIMEOUT", env);
  const connectTimeoutS = timeout === undefined ? 10 : Number(timeout);
  if (!Number.isFinite(connectTimeoutS) || connectTimeoutS < 0) throw malformed(shown, "connect_timeout must be a number of seconds");
  const tls = tlsOptions(u, sslMode, env, shown);
  return {
    host,
    port,
    user,
    password,
    database,
    schema,
    sslMode,
    tls,
    applicationName: q("application_name") ?? "atomic",
    // libpq: 0 means wait forever; pg: 0 too.
    connectTimeoutMs: Math.round(connectTimeoutS * 1000),
    location: locationOf(u, user, database),
  };
}

function decode(text: string, shown: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw malformed(shown, `the ${what} is not valid percent-encoding`);
  }
}

function safeLogin(): string {
  try {
    return userInfo().username;
  } catch {
    return "";
  }
}

function locationOf(u: URL, user: string, database: string): string {
  const params = [...u.searchParams.entries()].map(([k, v]) => `${k}=${encodeURIComponent(v)}`);
  const port = u.port ? `:${u.port}` : "";
  return `postgres://${encodeURIComponent(user)}@${u.host.replace(/:\d+$/, "")}${port}/${encodeURIComponent(database)}${params.length ? `?${params.join("&")}` : ""}`;
}

/**
 * TLS options for the URL's sslmode (undefined: no TLS), from
 * pg-connection-string with libpq compatibility: require encrypts without
 * checking the certificate (unless sslrootcert is given: then as
 * verify-ca), verify-ca checks the chain against sslrootcert, verify-full
 * also the host name (pg checks it). allow starts without TLS (connect()
 * tries with it when the server insists).
 */
function tlsOptions(u: URL, mode: SslMode, env: EnvSource | undefined, shown: string): ConnectionOptions | undefined {
  if (mode === "disable" || mode === "allow") return undefined;
  const libpq = new URL(u.toString());
  libpq.searchParams.delete("schema");
  libpq.searchParams.set("sslmode", mode);
  for (const [param, variable] of [["sslrootcert", "PGSSLROOTCERT"], ["sslcert", "PGSSLCERT"], ["sslkey", "PGSSLKEY"]] as const) {
    const fromEnv = readEnv(variable, env);
    if (!libpq.searchParams.has(param) && fromEnv) libpq.searchParams.set(param, fromEnv);
  }
  let ssl: unknown;
  try {
    ssl = parse(libpq.toString(), { useLibpqCompat: true }).ssl;
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { path?: string };
    if (e.code && e.path) {
      throw new UsageError("journal_url_invalid", `cannot read ${e.path}, named by the journal URL ${shown} (${e.code})`, { hint: "check the certificate paths in the URL" });
    }
    if (mode === "verify-ca") throw malformed(shown, "sslmode=verify-ca needs sslrootcert (the CA to check the server's certificate against)");
    throw malformed(shown, e.message);
  }
  return typeof ssl === "object" && ssl !== null ? { ...(ssl as ConnectionOptions) } : {};
}
