/**
 * Our Kysely dialect over bun:sqlite: transactions begin IMMEDIATE (they
 * hold the write lock before their first statement), Kysely's savepoint API
 * works, and a failed transaction leaves the connection usable.
 */

import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { Kysely } from "kysely";
import { BunSqliteDialect } from "../../src/journal/sqlite/dialect.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

interface Tables {
  items: { id: number; name: string };
}

const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  removeTempDirs();
});

async function setup(): Promise<{ kysely: Kysely<Tables>; file: string }> {
  const file = join(makeTempDir(), "dialect.db");
  const db = new Database(file);
  db.run("pragma journal_mode = wal");
  db.run("create table items (id integer primary key, name text not null unique)");
  const kysely = new Kysely<Tables>({ dialect: new BunSqliteDialect(db) });
  cleanups.push(async () => {
    await kysely.destroy();
    db.close();
  });
  return { kysely, file };
}

async function names(kysely: Kysely<Tables>): Promise<string[]> {
  return (await kysely.selectFrom("items").select("name").orderBy("id").execute()).map((r) => r.name);
}

test("sqlite dialect: a transaction holds the write lock from its start", async () => {
  const { kysely, file } = await setup();
  const other = new Database(file);
  cleanups.push(() => other.close());
  other.run("pragma busy_timeout = 0");

  const trx = await kysely.startTransaction().execute();
  // A deferred BEGIN would not have locked anything yet.
  expect(() => other.run("begin immediate")).toThrow(/locked|busy/i);
  await trx.insertInto("items").values({ id: 1, name: "a" }).execute();
  await trx.commit().execute();

  other.run("begin immediate");
  other.run("rollback");
  expect(await names(kysely)).toEqual(["a"]);
});

test("sqlite dialect: savepoints roll back and release", async () => {
  const { kysely } = await setup();
  const trx = await kysely.startTransaction().execute();
  await trx.insertInto("items").values({ id: 1, name: "kept" }).execute();
  const sp = await trx.savepoint("before_b").execute();
  await sp.insertInto("items").values({ id: 2, name: "undone" }).execute();
  await sp.rollbackToSavepoint("before_b").execute();
  await sp.releaseSavepoint("before_b").execute();
  await trx.insertInto("items").values({ id: 3, name: "after" }).execute();
  await trx.commit().execute();
  expect(await names(kysely)).toEqual(["kept", "after"]);
});

test("sqlite dialect: a failed transaction rolls back and the connection stays usable", async () => {
  const { kysely } = await setup();
  await kysely.insertInto("items").values({ id: 1, name: "a" }).execute();
  const failed = kysely.transaction().execute(async (trx) => {
    await trx.insertInto("items").values({ id: 2, name: "b" }).execute();
    await trx.insertInto("items").values({ id: 3, name: "a" }).execute(); // unique violation
  });
  await expect(failed).rejects.toThrow(/UNIQUE/);
  expect(await names(kysely)).toEqual(["a"]);

  const result = await kysely.insertInto("items").values({ id: 4, name: "d" }).executeTakeFirst();
  expect(result.numInsertedOrUpdatedRows).toBe(1n);
  expect(await names(kysely)).toEqual(["a", "d"]);
});

test("sqlite dialect: streams select queries", async () => {
  const { kysely } = await setup();
  await kysely.insertInto("items").values([{ id: 1, name: "a" }, { id: 2, name: "b" }]).execute();
  const seen: string[] = [];
  for await (const row of kysely.selectFrom("items").select("name").orderBy("id").stream()) seen.push(row.name);
  expect(seen).toEqual(["a", "b"]);
});
