/**
 * A small Kysely dialect over bun:sqlite.
 *
 * Why our own (docs/design/platform.md, measured on these machines): kysely-bun-sqlite
 * 0.4.0 declares a peer dependency on kysely ^0.28 (installing it next to
 * kysely 0.29 fails), does not support Kysely's savepoint API (and after
 * that error keeps the connection locked so the next query hangs), begins
 * transactions DEFERRED, and re-prepares every statement. We need all three
 * of those things:
 *
 * - Transactions start with `BEGIN IMMEDIATE`. With a deferred `BEGIN`, two
 *   processes doing read-then-write on one database failed about 30% of
 *   transactions with SQLITE_BUSY / SQLITE_BUSY_SNAPSHOT (busy_timeout does
 *   not help a read lock that has to upgrade); with IMMEDIATE the writer
 *   waits for the lock up front and busy_timeout applies.
 * - Savepoints (`trx.savepoint()`, `rollbackToSavepoint()`,
 *   `releaseSavepoint()`) work.
 * - Statements come from `db.query(sql)`, which bun:sqlite caches per SQL
 *   string, so a query compiled to the same text is prepared once.
 *
 * The caller owns the `Database`: destroying the Kysely instance does not
 * close it (the journal also runs raw prepared statements on it and closes
 * it itself). There is one connection; Kysely serializes its use because
 * the SQLite adapter reports `supportsMultipleConnections = false`.
 */

import type { Database, SQLQueryBindings } from "bun:sqlite";
import {
  CompiledQuery,
  IdentifierNode,
  RawNode,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  SelectQueryNode,
  createQueryId,
  type DatabaseConnection,
  type DatabaseIntrospector,
  type Dialect,
  type DialectAdapter,
  type Driver,
  type QueryCompiler,
  type QueryResult,
} from "kysely";

export class BunSqliteDialect implements Dialect {
  constructor(private readonly database: Database) {}

  createAdapter(): DialectAdapter {
    return new SqliteAdapter();
  }
  createDriver(): Driver {
    return new BunSqliteDriver(this.database);
  }
  createQueryCompiler(): QueryCompiler {
    return new SqliteQueryCompiler();
  }
  createIntrospector(db: Parameters<Dialect["createIntrospector"]>[0]): DatabaseIntrospector {
    return new SqliteIntrospector(db);
  }
}

type CompileQuery = QueryCompiler["compileQuery"];

class BunSqliteDriver implements Driver {
  readonly #connection: BunSqliteConnection;

  constructor(database: Database) {
    this.#connection = new BunSqliteConnection(database);
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    return this.#connection;
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("begin immediate"));
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("commit"));
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("rollback"));
  }

  async savepoint(connection: DatabaseConnection, name: string, compile: CompileQuery): Promise<void> {
    await connection.executeQuery(compile(savepointCommand("savepoint", name), createQueryId()));
  }

  async rollbackToSavepoint(connection: DatabaseConnection, name: string, compile: CompileQuery): Promise<void> {
    await connection.executeQuery(compile(savepointCommand("rollback to", name), createQueryId()));
  }

  async releaseSavepoint(connection: DatabaseConnection, name: string, compile: CompileQuery): Promise<void> {
    await connection.executeQuery(compile(savepointCommand("release", name), createQueryId()));
  }

  async releaseConnection(): Promise<void> {}

  /** The Database belongs to the caller (see the file note). */
  async destroy(): Promise<void> {}
}

/** `savepoint "name"`; the identifier node quotes the name as Kysely's own drivers do. */
function savepointCommand(command: string, name: string): RawNode {
  return RawNode.createWithChildren([RawNode.createWithSql(`${command} `), IdentifierNode.create(name)]);
}

class BunSqliteConnection implements DatabaseConnection {
  constructor(private readonly db: Database) {}

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const stmt = this.db.query<R, SQLQueryBindings[]>(compiled.sql);
    const params = compiled.parameters as SQLQueryBindings[];
    if (stmt.reader) return { rows: stmt.all(...params) };
    const { changes, lastInsertRowid } = stmt.run(...params);
    return { numAffectedRows: BigInt(changes), insertId: BigInt(lastInsertRowid), rows: [] };
  }

  async *streamQuery<R>(compiled: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    if (!SelectQueryNode.is(compiled.query)) {
      throw new Error("the bun:sqlite dialect streams select queries only");
    }
    const stmt = this.db.query<R, SQLQueryBindings[]>(compiled.sql);
    for (const row of stmt.iterate(...(compiled.parameters as SQLQueryBindings[]))) {
      yield { rows: [row] };
    }
  }
}
