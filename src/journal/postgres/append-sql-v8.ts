/**
 * The append functions as migrations 8 and 9 replace them (migration 1's are in
 * append-sql.ts, which says what an append does and in which order; this
 * file says only what changed and why).
 *
 * Measured with pg_stat_statements (track = all) over 4,000 single-entry
 * appends of no-op steps, Postgres 15, fsync on: the call spent about
 * 266 µs in the server where a raw single-row INSERT spends 15 µs. Its
 * statements: the change-number UPDATE of the run's row 47 µs (not HOT: it
 * changes an indexed column, so every index of `runs` gets an entry), the
 * event INSERT 25, the run's row UPDATE of last_seq 23, the change clock 12,
 * the receipt INSERT 11, the lease FOR SHARE 9, the receipt lookup 9, the
 * aggregate of touched runs 8, the run row's lock 6; the rest, about
 * 115 µs, was PL/pgSQL's own work around them (each SQL statement is an
 * executor start and end). What this version does instead:
 *
 * - One UPDATE of a run's row per batch, not two per entry: an entry
 *   without a patch no longer writes `last_seq` itself; `append_entries`
 *   passes each entry the seq it gave the run's previous entry of the
 *   batch (the row's `last_seq` is only read, under the lock, for the
 *   first), and its last statement writes last_seq, updated_at and the
 *   change number of every touched run at once. The change clock is still
 *   taken last (the lock order stays lease, rows, clock), each touched run
 *   gets one number in the order of its last change. An entry with a patch
 *   still updates the row itself (the patch's columns, in entry order).
 * - No receipt lookup on the first call: a batch id is fresh (a random
 *   UUID) until the caller sends it again, and then the caller looks the
 *   receipt up first (append.ts). A retry racing the first call still
 *   waits on, then fails on, the receipt's primary key (23505), as before.
 * - The touched runs kept in arrays (id, last seq, time, order) and the
 *   outcomes built as one jsonb array, rather than aggregated by a query.
 * - The commonest call, one entry that only records an event (every step's
 *   checkpoint, a resume's run_resumed; since migration 9 not one that
 *   patches its run, like a run's end), is not a function call at all but one statement,
 *   APPEND_EVENT_SQL below, sent by append.ts: the same locks in the same
 *   order (the lease FOR SHARE, then the run's row, by its update since
 *   migration 9), the event, the row written once, the receipt. Measured: the
 *   function costs about 50 µs of PL/pgSQL around the same work (its
 *   statements are planned and run one by one through SPI), the statement
 *   about 90 µs in all. When the run's row is missing or belongs to another
 *   root the statement writes nothing and append.ts calls the function,
 *   which says which (an "error" outcome).
 *
 * Migration 9 (APPEND_FUNCTIONS_V9 below): only a run's creation and its
 * patches take change numbers, so a step's update of its run's row changes
 * no indexed column (HOT) and leaves the change clock alone, and events
 * lose their foreign key to runs. Measured against a raw insert, 1,500
 * calls each, the lone-event statement's parts that remain: the receipt
 * about 20 µs, the run row's update 20, the lease FOR SHARE 10.
 */

const FAULT_TEST = `(left(v_state, 2) in ('08', '40', '53', '54', '55', '57', '58', 'XX') or v_state = 'AT001')`;

/** The columns of a run's row that patch `pa` (a jsonb expression; null: none) names, the others as they are. */
function patchSet(pa: string): string {
  return `status = coalesce(${pa}->>'status', status),
      outputs = case when ${pa} ? 'outputs' then ${pa}->>'outputs' else outputs end,
      error = case when ${pa} ? 'error' then ${pa}->>'error' else error end,
      ended_at = case when ${pa} ? 'endedAt' then (${pa}->>'endedAt')::bigint else ended_at end,
      control = case when coalesce((${pa}->>'clearControl')::boolean, false) then null else control end,
      workflow_digest = coalesce(${pa}->>'workflowDigest', workflow_digest),
      control_ack = greatest(control_ack, coalesce((${pa}->>'controlAck')::bigint, 0))`;
}

/** `p_last`: the seq this batch gave the run last (null: none yet, read the row's). Outcome "appended" carries `at`. */
const APPEND_ENTRY = `
create or replace function append_entry(p_root text, p_epoch bigint, e jsonb, p_now bigint, p_last bigint) returns jsonb
language plpgsql as $fn$
declare
  v_run text := e->>'run';
  v_idem text := e->>'idem';
  v_at bigint := coalesce((e->>'at')::bigint, p_now);
  v_expected bigint := (e->>'expected')::bigint;
  n jsonb := e->'newRun';
  pa jsonb := e->'patch';
  v_root text;
  v_last bigint;
  v_found boolean;
  v_seq bigint;
  ev record;
begin
  select root_id, last_seq into v_root, v_last from runs where id = v_run for update;
  v_found := found;
  if v_found then
    if v_root <> p_root then
      raise exception 'run % belongs to root run %, not to % whose lease this append holds', v_run, v_root, p_root using detail = 'run_outside_lease';
    end if;
    v_last := coalesce(p_last, v_last);
    if v_idem is not null then
      select seq, type, key, idempotency_key, payload, at into ev from events where run_id = v_run and idempotency_key = v_idem;
      if found then
        return jsonb_build_object('status', 'exists', 'seq', ev.seq, 'type', ev.type, 'key', ev.key, 'idem', ev.idempotency_key, 'payload', ev.payload, 'at', ev.at);
      end if;
    end if;
  end if;
  if n is not null then
    if v_found then
      raise exception 'run % already exists', v_run using detail = 'run_exists';
    end if;
    if n->>'rootId' <> p_root then
      raise exception 'run % belongs to root run %, not to % whose lease this append holds', v_run, n->>'rootId', p_root using detail = 'run_outside_lease';
    end if;
    if v_expected is not null and v_expected <> 0 then
      return jsonb_build_object('status', 'conflict', 'lastSeq', 0, 'expectedSeq', v_expected);
    end if;
    insert into runs (id, root_id, parent_id, parent_key, depth, workflow_name, workflow_path, workflow_digest, inputs, status, created_at, updated_at, last_seq)
    values (v_run, n->>'rootId', n->>'parentId', n->>'parentKey', (n->>'depth')::integer, n->>'workflowName', n->>'workflowPath', n->>'workflowDigest', n->>'inputs', 'running', v_at, v_at, 0);
    v_root := n->>'rootId';
    v_last := 0;
  elsif not v_found then
    raise exception 'run % does not exist', v_run using detail = 'run_not_found';
  end if;
  if v_expected is not null and v_expected <> v_last then
    return jsonb_build_object('status', 'conflict', 'lastSeq', v_last, 'expectedSeq', v_expected);
  end if;
  v_seq := v_last + 1;
  insert into events (run_id, seq, type, key, idempotency_key, payload, at) values (v_run, v_seq, e->>'type', e->>'key', v_idem, e->>'payload', v_at);
  if pa is not null then
    update runs set last_seq = v_seq, updated_at = v_at, ${patchSet("pa")} where id = v_run;
  end if;
  if e ? 'work' then
    -- The appending lease's epoch: only this drive's pool may claim the item (ClaimScope in ../types.ts).
    insert into work_items (id, root_id, run_id, root_epoch, stage_key, attempt, descriptor, state, generation, epoch, ready_at, created_at, updated_at)
    values (e->'work'->>'id', v_root, v_run, p_epoch, e->'work'->>'stageKey', (e->'work'->>'attempt')::integer, e->'work'->>'descriptor', 'ready', 1, 0, v_at, v_at, v_at);
  end if;
  if e ? 'abandonWork' then
    update work_items set state = 'abandoned', updated_at = v_at where id = e->>'abandonWork' and root_id = v_root and state in ('ready', 'leased');
  end if;
  if e ? 'stage' then
    perform upsert_stage(v_root, v_run, e->'stage', v_at);
  end if;
  if e ? 'prompt' then
    insert into prompts (root_id, id, run_id, stage_key, question, choices, state, deadline, created_at)
    values (v_root, e->'prompt'->>'id', v_run, coalesce(e->>'key', ''), e->'prompt'->>'question', e->'prompt'->>'choices', 'open', (e->'prompt'->>'deadline')::bigint, v_at);
  end if;
  return jsonb_build_object('status', 'appended', 'seq', v_seq, 'at', v_at);
end
$fn$`;

/**
 * The same signature as migration 1's: callers do not change. `changesOnly`
 * (migration 9): only the touched runs that an entry created or patched
 * take a change number (JournalViews.changesSince); the others get last_seq
 * and updated_at alone, an update Postgres keeps HOT (no indexed column
 * changes), and a batch of plain appends leaves the change clock alone.
 */
function appendEntries(changesOnly: boolean): string {
  return `
create or replace function append_entries(p_root text, p_holder text, p_epoch bigint, p_batch text, p_sync text, p_now bigint, p_entries jsonb, p_isolate boolean) returns jsonb
language plpgsql as $fn$
declare
  v_n integer := jsonb_array_length(p_entries);
  v_result jsonb := '[]'::jsonb;
  v_o jsonb;
  e jsonb;
  v_k integer;
  -- The touched runs: id, the seq and time of its last entry here, the index of that entry (orders change numbers).
  v_runs text[] := array[]::text[];
  v_seqs bigint[] := array[]::bigint[];
  v_ats bigint[] := array[]::bigint[];
  v_ords integer[] := array[]::integer[];${changesOnly ? "\n  v_chgs boolean[] := array[]::boolean[];" : ""}
  v_top bigint;
  v_state text;
  v_msg text;
  v_code text;
begin
  if p_sync is not null then
    perform set_config('synchronous_commit', p_sync, true);
  end if;
  perform 1 from leases where run_id = p_root and holder_id = p_holder and epoch = p_epoch and released = 0 for share;
  if not found then
    raise exception 'the lease on run % at epoch % is lost', p_root, p_epoch using errcode = 'AT001';
  end if;
  for i in 0 .. v_n - 1 loop
    e := p_entries->i;
    v_k := array_position(v_runs, e->>'run');
    if not p_isolate then
      v_o := append_entry(p_root, p_epoch, e, p_now, v_seqs[v_k]);
    else
      begin
        v_o := append_entry(p_root, p_epoch, e, p_now, v_seqs[v_k]);
      exception when others then
        get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_code = pg_exception_detail;
        if ${FAULT_TEST} then
          raise;
        end if;
        v_o := jsonb_build_object('status', 'error', 'code', case when v_state = 'P0001' and v_code <> '' then v_code else 'pg_' || v_state end, 'message', v_msg);
      end;
    end if;
    if v_o->>'status' = 'appended' then
      if v_k is null then
        v_runs := v_runs || (e->>'run');
        v_k := cardinality(v_runs);
      end if;
      v_seqs[v_k] := (v_o->>'seq')::bigint;
      v_ats[v_k] := (v_o->>'at')::bigint;
      v_ords[v_k] := i;${changesOnly ? "\n      v_chgs[v_k] := coalesce(v_chgs[v_k], false) or e ? 'patch' or e ? 'newRun';" : ""}
      v_o := v_o - 'at';
    end if;
    v_result := v_result || jsonb_build_array(v_o);
  end loop;
  if cardinality(v_runs) > 0 then
    -- Last, and held to the commit: change numbers in commit order (append-sql.ts, step 5).${changesOnly ? CHANGED_RUNS_UPDATE : ALL_RUNS_UPDATE}
  end if;
  if p_batch is not null then
    insert into append_batches (id, outcomes, at) values (p_batch, v_result::text, p_now);
  end if;
  return v_result;
end
$fn$`;
}

const ALL_RUNS_UPDATE = `
    update change_clock set n = n + cardinality(v_runs) where id = 1 returning n into v_top;
    update runs r set last_seq = t.seq, updated_at = t.at, change_seq = v_top - cardinality(v_runs) + t.rank
      from (select id, seq, at, row_number() over (order by ord) as rank from unnest(v_runs, v_seqs, v_ats, v_ords) as u(id, seq, at, ord)) t
     where r.id = t.id;`;

/** Migration 9: numbers only for the runs created or patched here, the clock taken only when there are any. */
const CHANGED_RUNS_UPDATE = `
    v_top := null;
    if true = any(v_chgs) then
      update change_clock set n = n + (select count(*) from unnest(v_chgs) as c where c) where id = 1 returning n into v_top;
    end if;
    update runs r set last_seq = t.seq, updated_at = t.at,
           change_seq = case when t.chg then v_top - t.changed + t.rank else r.change_seq end
      from (select id, seq, at, chg, count(*) filter (where chg) over () as changed,
                   row_number() over (partition by chg order by ord) as rank
              from unnest(v_runs, v_seqs, v_ats, v_ords, v_chgs) as u(id, seq, at, ord, chg)) t
     where r.id = t.id;`;

/**
 * One event appended, in one statement (see the file note): $1 root, $2
 * holder, $3 epoch, $4 batch id, $5 synchronous_commit for this
 * transaction (null: as configured), $6 run, $7 type, $8 key, $9 payload,
 * $10 the event's time, $11 now (a durable append, $5 null, sets nothing:
 * a transaction-local setting costs its save and restore). One column, `seq`: the event's; 0: the
 * lease is lost (nothing written); null: no such run of this root (nothing
 * written). One column, not three: pg decodes a row description on every
 * call (measured about 30 µs of a 2,000-step run's client time per step
 * for three columns). Data-modifying WITH clauses run exactly once, each
 * after the ones it reads from: lease, row, event, receipt. The run's row
 * is not locked first and then updated: its UPDATE takes the row lock and
 * hands back the seq it set (one tuple written, not a lock and then a new
 * version); appends to one run are one lease holder's, one batch at a
 * time, and the events' primary key would refuse a second writer's seq.
 * An event with a patch of its run's row goes to append_entries instead
 * (append.ts): it takes a change number from the change clock
 * (JournalViews.changesSince), and without a patch this update changes no
 * indexed column, so Postgres keeps it HOT.
 */
export const APPEND_EVENT_SQL = `
with s as (select case when $5::text is not null then set_config('synchronous_commit', $5::text, true) end),
     l as (select 1 from leases, s where run_id = $1 and holder_id = $2 and epoch = $3 and released = 0 for share of leases),
     w as (update runs x set last_seq = x.last_seq + 1, updated_at = $10
            where x.id = $6 and x.root_id = $1 and exists (select from l) returning x.id, x.last_seq),
     ev as (insert into events (run_id, seq, type, key, payload, at) select w.id, w.last_seq, $7, $8, $9, $10 from w returning seq),
     b as (insert into append_batches (id, outcomes, at)
           select $4, jsonb_build_array(jsonb_build_object('status', 'appended', 'seq', ev.seq))::text, $11 from ev returning 1)
select case when exists (select from l) then (select seq from ev) else 0 end as seq`;

/** Migration 8's statements: the new append_entry (another signature: the old one is dropped) and append_entries; run again, they change nothing. */
export const APPEND_FUNCTIONS_V8: readonly string[] = [`drop function if exists append_entry(text, bigint, jsonb, bigint)`, APPEND_ENTRY, appendEntries(false)];

/**
 * Migration 9's: append_entries numbering only the runs a batch created or
 * patched (appendEntries above), and events without their foreign key to
 * runs. Every insert of an event follows its run's row, locked or created
 * by the same statement or function, so the key's check (a trigger and a
 * query per event, about 10 µs of each append) proved nothing; retention
 * deletes a tree's events itself before its runs (retention.ts), so its
 * cascade was never used.
 */
export const APPEND_FUNCTIONS_V9: readonly string[] = [appendEntries(true), `alter table events drop constraint if exists events_run_id_fkey`];
