/**
 * Worker hosts on Postgres: the contract is ../fleet.ts; the tables are
 * migration 6's (worker_hosts, fleet_up, fleet_down, fleet_holds; the work
 * items' generated `queue` and `protocol` columns), with migration 15's
 * kinds of claim holds. A budgeted result's hold is written by the commit
 * itself (work-queue.ts), in the statement that settles the item.
 *
 * Notifications: channel names are identifiers of the whole database, not
 * of a schema, so each is derived from the journal's schema (one database
 * may hold many journals): `atomic_h_<hash>` for hosts, `atomic_r_<hash>`
 * for roots with the root id as payload; `atomic_l_<hash>` for live events
 * hosts relay and `atomic_w_<hash>` for watchers' asks for them (notifications
 * only: nothing is written). A NOTIFY is delivered at its
 * transaction's commit, so a reader woken by it sees the rows it announces.
 *
 * Reaping is one UPDATE: rows locked by the statement, the fence (state
 * leased, expiry past by the database clock) re-checked on the newest row
 * version, so a host's renewal that committed first wins and the reap skips
 * that row.
 */

import type pg from "pg";
import type { ErrorInfo } from "../../shared/errors.ts";
import { LIVE_BODY_MAX, type LiveChannel, type LiveChannelHandlers, type LiveChannelOpener } from "../../shared/live-channel.ts";
import type { RunId } from "../../shared/ids.ts";
import type { DownMessage, FleetStore, FleetWake, HostInfo, HostRecord, HostWork, QueueDemand } from "../fleet.ts";
import type { WorkItem } from "../work-queue.ts";
import { workFromRow, type WorkItemsTable as WorkRow } from "../sqlite/tables.ts";
import type { PgConnection } from "./connection.ts";
import { NOW_MS, type PgSession } from "./store-session.ts";

/** Messages down older than this are dropped whatever became of their item. */
const DOWN_KEEP_MS = 3600_000;

interface HostRow {
  host_id: string;
  version: string;
  protocol: number;
  schema_version: number;
  queues: string[];
  slots: number;
  busy: number;
  state: HostRecord["state"];
  workdir: string;
  pid: number;
  refused: string | null;
  started_at: number;
  heartbeat_at: number;
  silent_ms: number;
}

export class PgFleet implements FleetStore {
  readonly hostsChannel: string;
  readonly rootsChannel: string;
  /** Live events: relayed bodies, and watchers' asks (a JSON array of run ids). */
  readonly liveChannelName: string;
  readonly watchChannel: string;
  readonly liveChannel: LiveChannelOpener = (h) => this.openLive(h);

  constructor(
    private readonly db: PgSession,
    private readonly conn: PgConnection,
    schema: string,
  ) {
    const tag = Bun.hash(schema).toString(36);
    this.hostsChannel = `atomic_h_${tag}`;
    this.rootsChannel = `atomic_r_${tag}`;
    this.liveChannelName = `atomic_l_${tag}`;
    this.watchChannel = `atomic_w_${tag}`;
  }

  async heartbeat(h: HostInfo): Promise<void> {
    await this.db.run((q) =>
      q(
        `insert into worker_hosts (host_id, version, protocol, schema_version, queues, slots, busy, state, workdir, pid, refused, started_at, heartbeat_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, ${NOW_MS}, ${NOW_MS})
         on conflict (host_id) do update set version = excluded.version, protocol = excluded.protocol,
           schema_version = excluded.schema_version, queues = excluded.queues, slots = excluded.slots, busy = excluded.busy,
           state = excluded.state, workdir = excluded.workdir, refused = excluded.refused, heartbeat_at = excluded.heartbeat_at,
           started_at = case when worker_hosts.pid = excluded.pid then worker_hosts.started_at else excluded.started_at end,
           pid = excluded.pid`,
        [h.hostId, h.version, h.protocol, h.schemaVersion, h.queues, h.slots, h.busy, h.state, h.workdir, h.pid, h.refused],
      ),
    );
  }

  async hosts(): Promise<HostRecord[]> {
    const rows = await this.db.run((q) => q<HostRow>(`select *, ${NOW_MS} - heartbeat_at as silent_ms from worker_hosts order by host_id`));
    return rows.map((r) => ({
      hostId: r.host_id,
      version: r.version,
      protocol: r.protocol,
      schemaVersion: r.schema_version,
      queues: r.queues,
      slots: r.slots,
      busy: r.busy,
      state: r.state,
      workdir: r.workdir,
      pid: r.pid,
      refused: r.refused,
      startedAt: r.started_at,
      heartbeatAt: r.heartbeat_at,
      silentMs: Math.max(0, r.silent_ms),
    }));
  }

  async hostWork(): Promise<HostWork[]> {
    // Leased rows only (the partial index work_leased_by_expiry); a host's workers are `<worker>@<host id>`.
    const rows = await this.db.run((q) =>
      q<{ id: string; root_id: RunId; run_id: RunId; stage_key: string; stage_name: string | null; attempt: number; generation: number; queue: string; worker_id: string; lease_expires_at: number | null }>(
        `select id, root_id, run_id, stage_key, (descriptor::jsonb)->>'stageName' as stage_name, attempt, generation, queue, worker_id, lease_expires_at
           from work_items where state = 'leased' and strpos(worker_id, '@') > 0 order by worker_id, id`,
      ),
    );
    return rows.map((r) => ({
      workId: r.id,
      rootId: r.root_id,
      runId: r.run_id,
      stageKey: r.stage_key,
      stageName: r.stage_name ?? r.stage_key,
      attempt: r.attempt,
      generation: r.generation,
      queue: r.queue,
      workerId: r.worker_id,
      hostId: r.worker_id.slice(r.worker_id.indexOf("@") + 1),
      leaseExpiresAt: r.lease_expires_at,
    }));
  }

  async reapExpired(maxGenerations: number, error: ErrorInfo, rootId?: RunId): Promise<WorkItem[]> {
    const rows = await this.db.run((q) =>
      q<WorkRow>(
        `update work_items set
            state = case when generation >= $1 then 'failed' else 'ready' end,
            generation = case when generation >= $1 then generation else generation + 1 end,
            worker_id = case when generation >= $1 then worker_id else null end,
            error = case when generation >= $1 then $2 else error end,
            ready_at = case when generation >= $1 then ready_at else ${NOW_MS} end,
            lease_expires_at = null, updated_at = ${NOW_MS}
          where state = 'leased' and lease_expires_at < ${NOW_MS} and ($3::text is null or root_id = $3)
            and position('@' in worker_id) > 0
          returning *`,
        [maxGenerations, JSON.stringify(error), rootId ?? null],
      ),
    );
    const items = rows.map(workFromRow);
    if (items.some((i) => i.state === "ready")) await this.wakeHosts();
    const failed = [...new Set(items.filter((i) => i.state === "failed").map((i) => i.rootId))];
    if (failed.length > 0) await this.wakeRoots(failed);
    return items;
  }

  async schemaVersion(): Promise<number> {
    const rows = await this.db.run((q) => q<{ value: string }>("select value from meta where key = 'schema_version'"));
    return Number(rows[0]?.value ?? 0);
  }

  async journalId(): Promise<string> {
    // The insert's row, or the one there already (the select does not see a row this statement inserts).
    const rows = await this.db.run((q) =>
      q<{ value: string }>(
        `with made as (insert into meta (key, value) values ('journal_id', $1) on conflict (key) do nothing returning value)
         select value from made union all select value from meta where key = 'journal_id'`,
        [crypto.randomUUID()],
      ),
    );
    return rows[0]!.value;
  }

  async foreignProtocols(queues: readonly string[], protocol: number): Promise<number[]> {
    const rows = await this.db.run((q) =>
      q<{ protocol: number }>(
        "select distinct protocol from work_items where state = 'ready' and queue = any($1::text[]) and protocol <> $2 limit 5",
        [queues, protocol],
      ),
    );
    return rows.map((r) => r.protocol);
  }

  async postUp(rootId: RunId, bodies: readonly unknown[]): Promise<void> {
    if (bodies.length === 0) return;
    await this.db.run((q) =>
      q(
        `with i as (insert into fleet_up (root_id, body, at) select $1, b, ${NOW_MS} from unnest($2::jsonb[]) with ordinality as u(b, n) order by n)
         select pg_notify($3, $1)`,
        [rootId, bodies.map((b) => JSON.stringify(b)), this.rootsChannel],
      ),
    );
  }

  async takeUp(rootId: RunId): Promise<unknown[]> {
    const rows = await this.db.run((q) => q<{ seq: number; body: unknown }>("delete from fleet_up where root_id = $1 returning seq, body", [rootId]));
    return rows.sort((a, b) => a.seq - b.seq).map((r) => r.body);
  }

  async postDown(rootId: RunId, workId: string, body: unknown): Promise<void> {
    await this.db.run((q) =>
      q(`with i as (insert into fleet_down (root_id, work_id, body, at) values ($1, $2, $3, ${NOW_MS})) select pg_notify($4, $2)`, [
        rootId,
        workId,
        JSON.stringify(body),
        this.hostsChannel,
      ]),
    );
  }

  async downFor(workIds: readonly string[]): Promise<DownMessage[]> {
    if (workIds.length === 0) return [];
    const rows = await this.db.run((q) =>
      q<{ seq: number; root_id: RunId; work_id: string; body: unknown }>(
        "select seq, root_id, work_id, body from fleet_down where work_id = any($1::text[]) order by seq",
        [workIds],
      ),
    );
    return rows.map((r) => ({ seq: r.seq, rootId: r.root_id, workId: r.work_id, body: r.body }));
  }

  async dropDown(workIds: readonly string[]): Promise<void> {
    await this.db.run((q) => q(`delete from fleet_down where work_id = any($1::text[]) or at < ${NOW_MS} - $2`, [workIds, DOWN_KEEP_MS]));
  }

  async hold(rootId: RunId, paused: boolean): Promise<void> {
    await this.db.run((q) =>
      paused
        ? q(`insert into fleet_holds (root_id, kind, at) values ($1, 'paused', ${NOW_MS}) on conflict do nothing`, [rootId])
        : q(`with d as (delete from fleet_holds where root_id = $1 and kind = 'paused') select pg_notify($2, '')`, [rootId, this.hostsChannel]),
    );
  }

  async budgetCounted(rootId: RunId, workId: string | undefined, exhausted: boolean): Promise<void> {
    // One statement: the root is never without a hold between the result's and the spent budget's.
    await this.db.run((q) =>
      q(
        `with s as (insert into fleet_holds (root_id, kind, at) select $1, 'spent', ${NOW_MS} where $3 on conflict do nothing),
              d as (delete from fleet_holds where root_id = $1 and kind = 'result:' || $2)
         select pg_notify($4, '')`,
        [rootId, workId ?? "", exhausted, this.hostsChannel],
      ),
    );
  }

  async releaseHolds(rootId: RunId, which: "budget" | "all"): Promise<void> {
    const kinds = which === "all" ? "" : "and kind <> 'paused'";
    await this.db.run((q) => q(`with d as (delete from fleet_holds where root_id = $1 ${kinds}) select pg_notify($2, '')`, [rootId, this.hostsChannel]));
  }

  async wakeHosts(): Promise<void> {
    await this.db.run((q) => q("select pg_notify($1, '')", [this.hostsChannel]));
  }

  async wakeRoots(rootIds: readonly RunId[]): Promise<void> {
    if (rootIds.length === 0) return;
    await this.db.run((q) => q("select pg_notify($1, r) from unnest($2::text[]) as r", [this.rootsChannel, rootIds]));
  }

  async settled(ids: readonly string[]): Promise<WorkItem[]> {
    if (ids.length === 0) return [];
    const rows = await this.db.run((q) =>
      q<WorkRow>("select * from work_items where id = any($1::text[]) and state in ('completed', 'failed', 'abandoned')", [ids]),
    );
    return rows.map(workFromRow);
  }

  async demand(): Promise<QueueDemand[]> {
    const rows = await this.db.run((q) =>
      q<{ queue: string; ready: number; oldest: number }>(
        "select queue, count(*)::int as ready, min(ready_at) as oldest from work_items where state = 'ready' group by queue order by queue",
      ),
    );
    return rows.map((r) => ({ queue: r.queue, ready: r.ready, oldestReadyAt: r.oldest }));
  }

  async listen(onWake: (wake: FleetWake) => void, opts: { root?: RunId; onLost?: (err: Error) => void }): Promise<{ close(): Promise<void> }> {
    const conn = await this.listening(
      [opts.root ? this.rootsChannel : this.hostsChannel],
      (n) => {
        if (n.channel === this.hostsChannel) onWake({ kind: "hosts" });
        else if (n.channel === this.rootsChannel && n.payload && (!opts.root || n.payload === opts.root)) onWake({ kind: "root", rootId: n.payload as RunId });
      },
      opts.onLost,
      "the listening connection ended",
    );
    return { close: conn.close };
  }

  /**
   * A connection of its own that LISTENs on `channels`. A lost connection
   * (an error, or its end) is ended once and reported to `onLost`; after
   * that, and after `close`, `isClosed()` is true.
   */
  private async listening(
    channels: string[],
    onNotification: (n: pg.Notification) => void,
    onLost: ((err: Error) => void) | undefined,
    endedMessage: string,
  ): Promise<{ client: pg.Client; isClosed(): boolean; close(): Promise<void> }> {
    const client = this.conn.newClient();
    let closed = false;
    const lost = (err: Error) => {
      if (closed) return;
      closed = true;
      client.end().catch(() => {});
      onLost?.(err);
    };
    client.on("error", lost);
    client.on("end", () => lost(new Error(endedMessage)));
    client.on("notification", onNotification);
    try {
      await client.connect();
      for (const channel of channels) await client.query(`listen "${channel}"`);
    } catch (err) {
      closed = true;
      await client.end().catch(() => {});
      throw this.conn.mapError(err);
    }
    return {
      client,
      isClosed: () => closed,
      close: async () => {
        if (closed) return;
        closed = true;
        await client.end().catch(() => {});
      },
    };
  }

  /** One connection of its own: it listens for what the handlers want and sends the channel's notifications. */
  private async openLive(h: LiveChannelHandlers): Promise<LiveChannel> {
    const channels = [...(h.onBody ? [this.liveChannelName] : []), ...(h.onWatch ? [this.watchChannel] : [])];
    const { client, isClosed, close } = await this.listening(
      channels,
      (n) => {
        if (n.channel === this.liveChannelName && n.payload) h.onBody?.(n.payload);
        else if (n.channel === this.watchChannel && n.payload && h.onWatch) {
          try {
            const runs = JSON.parse(n.payload) as unknown;
            if (Array.isArray(runs)) h.onWatch(runs.filter((r): r is string => typeof r === "string"));
          } catch {
            // not an ask of this version: ignored
          }
        }
      },
      h.onLost,
      "the live events' connection ended",
    );
    const notify = async (channel: string, body: string) => {
      if (isClosed()) throw new Error("the live events' connection is closed");
      if (Buffer.byteLength(body) > LIVE_BODY_MAX) throw new Error(`a live body of more than ${LIVE_BODY_MAX} bytes`);
      await client.query("select pg_notify($1, $2)", [channel, body]);
    };
    return {
      publish: (body) => notify(this.liveChannelName, body),
      watch: async (runIds) => {
        const runs: string[] = [];
        for (const r of runIds) if (JSON.stringify([...runs, r]).length <= LIVE_BODY_MAX) runs.push(r);
        if (runs.length) await notify(this.watchChannel, JSON.stringify(runs));
      },
      close,
    };
  }
}
