/**
 * Agent session slots (journal/admission-slots.ts) in a SQLite file of
 * their own, `slots.db` in the slots directory (per user and host, in the
 * user's runtime directory by default, shared/runtime-dir.ts; not the
 * journal: the journal may be a shared Postgres, the slots are this host's).
 *
 * Taking a slot is one BEGIN IMMEDIATE transaction: read every slot, delete
 * those whose holder is gone, count the rest, insert ours if there is room.
 * Two processes can never both see room for the last slot.
 */

import { Database, type Statement } from "bun:sqlite";
import { join } from "node:path";
import { ensurePrivateDir } from "../../shared/runtime-dir.ts";
import { isPidAlive, processStartTime } from "../../shared/process-info.ts";
import type { AdmissionSlots, HeldSlot } from "../admission-slots.ts";

/** Whether the process that took a slot still exists (the same one: a reused pid has another start time). */
function holderAlive(slot: { pid: number; start: number }): boolean {
  return isPidAlive(slot.pid) && (slot.start === 0 || processStartTime(slot.pid) === slot.start);
}

export class SqliteAdmissionSlots implements AdmissionSlots {
  private readonly db: Database;
  private readonly me = { pid: process.pid, start: processStartTime(process.pid) };
  private readonly begin: Statement;
  private readonly commit: Statement;
  private readonly rollback: Statement;
  private readonly held: Statement<HeldSlot, []>;
  private readonly insert: Statement<{ id: number }, [number, number, number]>;
  private readonly remove: Statement<unknown, [number]>;

  static file(dir: string): string {
    return join(dir, "slots.db");
  }

  constructor(dir: string) {
    // Another user able to write here could fill the slots and block every agent stage: refused (runtime-dir.ts).
    ensurePrivateDir(dir, "the agent session slots directory");
    this.db = new Database(SqliteAdmissionSlots.file(dir), { create: true });
    this.db.run("pragma busy_timeout = 5000");
    this.db.run("pragma journal_mode = wal");
    // No fsync per commit: a slot means something only while its holder lives, and after a power loss none does
    // (WAL keeps the file consistent either way). Otherwise every agent stage costs the root two fsyncs (take,
    // release), each blocking its event loop (bench/README.md, agent-stages).
    this.db.run("pragma synchronous = normal");
    this.db.run("create table if not exists slots (id integer primary key autoincrement, pid integer not null, start integer not null, at integer not null)");
    // Prepared once: an agent stage takes and releases a slot, and `db.run(sql)` compiles its SQL each time.
    this.begin = this.db.prepare("begin immediate");
    this.commit = this.db.prepare("commit");
    this.rollback = this.db.prepare("rollback");
    this.held = this.db.prepare("select id, pid, start, at from slots");
    this.insert = this.db.prepare("insert into slots (pid, start, at) values (?, ?, ?) returning id");
    this.remove = this.db.prepare("delete from slots where id = ?");
  }

  async take(max: number): Promise<number | undefined> {
    this.begin.run();
    try {
      let live = 0;
      for (const r of this.held.all()) {
        // This process's own slots are held by a live holder: no signal sent, no /proc read (one of each per slot, per take).
        if ((r.pid === this.me.pid && r.start === this.me.start) || holderAlive(r)) live++;
        else this.remove.run(r.id);
      }
      if (live >= max) {
        this.commit.run();
        return undefined;
      }
      const row = this.insert.get(this.me.pid, this.me.start, Date.now());
      this.commit.run();
      return row!.id;
    } catch (err) {
      this.rollback.run();
      throw err;
    }
  }

  async release(id: number): Promise<void> {
    try {
      this.remove.run(id);
    } catch {
      // a slot left behind is freed when this process is gone
    }
  }

  async list(): Promise<HeldSlot[]> {
    return this.db.query<HeldSlot, []>("select id, pid, start, at from slots order by id").all().filter(holderAlive);
  }

  close(): void {
    for (const st of [this.begin, this.commit, this.rollback, this.held, this.insert, this.remove]) st.finalize();
    this.db.close();
  }
}
