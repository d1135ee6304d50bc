/**
 * Why a Postgres journal could not be opened, in one sentence and a hint:
 * the user named something that is not there or not theirs (exit 2, a
 * UsageError or a non-retryable StorageError), never a driver stack trace.
 * The URL shown is always `target.location` (no password).
 */

import { AtomicError, StorageError, UsageError } from "../../shared/errors.ts";
import { describe, sqlState } from "./connection.ts";
import type { PostgresTarget } from "./url.ts";

export function openError(err: unknown, t: PostgresTarget): AtomicError {
  if (err instanceof AtomicError) return err;
  const where = `${t.host}:${t.port}`;
  const state = sqlState(err);
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  const usage = (c: string, m: string, hint: string) => new UsageError(c, m, { hint, cause: err });

  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_NONAME" || /getaddrinfo|could not resolve|DNS/i.test(message)) {
    return usage("journal_unreachable", `cannot find the journal's Postgres host ${t.host}: the name does not resolve`, "check the host name in the journal URL");
  }
  if (code === "ECONNREFUSED") {
    return usage("journal_unreachable", `Postgres at ${where} refused the connection`, "check that Postgres is running there and listening on that port (pg_isready -h HOST -p PORT)");
  }
  if (code === "ETIMEDOUT" || code === "EHOSTUNREACH" || code === "ENETUNREACH" || /timeout expired|connection timeout|timeout exceeded/i.test(message)) {
    return usage("journal_unreachable", `could not reach Postgres at ${where} within ${Math.round(t.connectTimeoutMs / 1000)} s`, "check the host and port in the journal URL and the network (connect_timeout=SECONDS to wait longer)");
  }
  if (state === "28P01" || (state === "28000" && /password/i.test(message)) || /password must be a string|SASL|no password was provided|client password/i.test(message)) {
    return usage("journal_auth", `Postgres at ${where} refused user ${t.user}: password authentication failed`, "check the password (in the URL, PGPASSWORD or ~/.pgpass) and the user name");
  }
  if (state === "28000") {
    return usage("journal_auth", `Postgres at ${where} refused user ${t.user} for database ${t.database} (${message})`, "ask the database's administrator for access (pg_hba.conf), or check the user in the journal URL");
  }
  if (state === "3D000") {
    return usage("journal_database_missing", `the database ${t.database} does not exist on Postgres at ${where}`, `create it (createdb ${t.database}) or name another database in the journal URL`);
  }
  if (state === "42501") {
    return usage("journal_permission", `user ${t.user} lacks a permission the journal needs in database ${t.database} at ${where} (${message})`, `grant it (grant usage, create on schema ${t.schema} to ${t.user}), or use another user`);
  }
  if (state === "53300") {
    return new StorageError("storage_unavailable", `Postgres at ${where} has no free connection slots`, { hint: "try again later, or raise max_connections", cause: err });
  }
  if (/self[- ]signed|unable to verify|certificate|Hostname\/IP does not match|ERR_TLS|UNABLE_TO_GET_ISSUER/i.test(message) || (typeof code === "string" && /CERT|TLS/.test(code))) {
    return usage("journal_tls", `the TLS certificate of Postgres at ${where} is not trusted (${describe(err)})`, "give its CA with sslrootcert=FILE, or use sslmode=require to encrypt without checking it");
  }
  if (/does not support SSL/i.test(message)) {
    return usage("journal_tls", `Postgres at ${where} does not accept TLS, which sslmode=${t.sslMode} requires`, "enable ssl on the server, or use sslmode=prefer or disable");
  }
  // The answer to the TLS request was neither yes nor no, or the startup message got something that is not a Postgres message.
  if (!state && /error establishing an SSL connection|Connection terminated|unexpected|ECONNRESET|Unknown message|invalid|protocol|EPIPE/i.test(`${message} ${String(code)}`)) {
    return usage("journal_not_postgres", `the server at ${where} does not answer like Postgres (${describe(err)})`, "check the host and port in the journal URL: is Postgres listening there?");
  }
  return new StorageError("storage_unavailable", `cannot open the journal at ${t.location} (${describe(err)})`, {
    hint: "check the journal URL and that Postgres is reachable",
    cause: err,
  });
}
