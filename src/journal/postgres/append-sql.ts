/**
 * The append, as two PL/pgSQL functions in the journal's schema (created by
 * migration 1; a change is a new migration that replaces them). Migration 8
 * replaced them (append-sql-v8.ts: the same steps with fewer statements,
 * and a lone event in one statement without a function); what follows is
 * still what an append does and in which order, except that step 1's
 * receipt lookup moved to the caller's retry (append.ts).
 *
 * Why in the database: an append on Postgres costs round trips, not rows.
 * A transaction of separate statements (BEGIN, lease check, run row, event
 * insert, projection update, COMMIT) is six round trips; as one function
 * call in its own implicit transaction it is one, which is what keeps a
 * durable step near the cost of a raw single-row commit.
 *
 * `append_entries(root, holder, epoch, batch, sync, now, entries jsonb,
 * isolate)` returns the outcomes (a jsonb array, in entry order):
 * 1. A known batch id returns the outcomes recorded with it (the caller
 *    asks again after a COMMIT whose outcome it could not see).
 * 2. `sync` sets synchronous_commit for this transaction only
 *    (`off` for progress-only batches).
 * 3. The lease row is locked FOR SHARE and must be the caller's (holder,
 *    epoch, not released): held to the commit, so a takeover (which
 *    updates the row) waits for this append and then fences the next one;
 *    lost: SQLSTATE AT001, nothing written.
 * 4. Without `isolate`, the entries one after another with no
 *    subtransaction: a bad entry fails the whole call (nothing written), and
 *    the caller (append.ts) calls again with `isolate`: then every entry runs
 *    in a subtransaction (savepoint) of its own, so a bad entry yields an
 *    "error" outcome alone. The SQLite journal does the same, for the same
 *    reason: savepoints cost (here a third of a single-entry append,
 *    measured), bad entries are rare. Faults (serialization, deadlock,
 *    resources, shutdown, I/O) fail the call in either mode.
 * 5. The touched runs take their change numbers from the change clock (its
 *    row lock held to the commit orders them by commit), and the batch's
 *    receipt is recorded.
 *
 * `append_entry(root, epoch, entry jsonb, now)` is one entry inside the
 * caller's transaction (the lease already checked): the runs row locked FOR
 * UPDATE (appends to one run serialise; seqs stay gapless), the
 * idempotency key, newRun, the compare-and-set, the event, the projection
 * patch, and the work item, abandoned item, stage row (`upsert_stage`,
 * also called alone by the message store) and prompt the entry carries. A bad entry raises P0001 with our error code in DETAIL.
 */

const UPSERT_STAGE = `
create function upsert_stage(p_root text, p_run text, s jsonb, p_at bigint) returns void
language sql as $fn$
  -- A stage's row follows its latest record: an attempt never moves it back to an older one; usage adds up.
  insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, child_run_id, updated_at, outcome,
                           input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, turns, has_usage)
  values (p_root, p_run, s->>'key', s->>'path', s->>'name', s->>'kind', s->>'state', (s->>'attempt')::integer, s->>'childRunId', p_at, s->>'outcome',
          (s->>'i')::bigint, (s->>'o')::bigint, (s->>'cr')::bigint, (s->>'cw')::bigint, (s->>'c')::bigint, (s->>'t')::bigint, (s->>'u')::integer)
  on conflict (run_id, stage_key) do update set
    path = excluded.path, name = excluded.name, kind = excluded.kind, state = excluded.state,
    attempt = greatest(stage_index.attempt, excluded.attempt), child_run_id = coalesce(excluded.child_run_id, stage_index.child_run_id),
    updated_at = excluded.updated_at, outcome = excluded.outcome,
    input_tokens = stage_index.input_tokens + excluded.input_tokens, output_tokens = stage_index.output_tokens + excluded.output_tokens,
    cache_read_tokens = stage_index.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = stage_index.cache_write_tokens + excluded.cache_write_tokens,
    cost_micro_usd = stage_index.cost_micro_usd + excluded.cost_micro_usd, turns = stage_index.turns + excluded.turns,
    has_usage = greatest(stage_index.has_usage, excluded.has_usage)
$fn$`;

const APPEND_ENTRY = `
create function append_entry(p_root text, p_epoch bigint, e jsonb, p_now bigint) returns jsonb
language plpgsql as $fn$
declare
  v_run text := e->>'run';
  v_idem text := e->>'idem';
  v_at bigint := coalesce((e->>'at')::bigint, p_now);
  v_expected bigint := (e->>'expected')::bigint;
  n jsonb := e->'newRun';
  pa jsonb := e->'patch';
  w jsonb := e->'work';
  s jsonb := e->'stage';
  pr jsonb := e->'prompt';
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
  if pa is null then
    update runs set last_seq = v_seq, updated_at = v_at where id = v_run;
  else
    update runs set
      last_seq = v_seq,
      updated_at = v_at,
      status = coalesce(pa->>'status', status),
      outputs = case when pa ? 'outputs' then pa->>'outputs' else outputs end,
      error = case when pa ? 'error' then pa->>'error' else error end,
      ended_at = case when pa ? 'endedAt' then (pa->>'endedAt')::bigint else ended_at end,
      control = case when coalesce((pa->>'clearControl')::boolean, false) then null else control end,
      workflow_digest = coalesce(pa->>'workflowDigest', workflow_digest),
      control_ack = greatest(control_ack, coalesce((pa->>'controlAck')::bigint, 0))
    where id = v_run;
  end if;
  if w is not null then
    -- The appending lease's epoch: only this drive's pool may claim the item (ClaimScope in ../types.ts).
    insert into work_items (id, root_id, run_id, root_epoch, stage_key, attempt, descriptor, state, generation, epoch, ready_at, created_at, updated_at)
    values (w->>'id', v_root, v_run, p_epoch, w->>'stageKey', (w->>'attempt')::integer, w->>'descriptor', 'ready', 1, 0, v_at, v_at, v_at);
  end if;
  if e ? 'abandonWork' then
    update work_items set state = 'abandoned', updated_at = v_at where id = e->>'abandonWork' and root_id = v_root and state in ('ready', 'leased');
  end if;
  if s is not null then
    perform upsert_stage(v_root, v_run, s, v_at);
  end if;
  if pr is not null then
    insert into prompts (root_id, id, run_id, stage_key, question, choices, state, deadline, created_at)
    values (v_root, pr->>'id', v_run, coalesce(e->>'key', ''), pr->>'question', pr->>'choices', 'open', (pr->>'deadline')::bigint, v_at);
  end if;
  return jsonb_build_object('status', 'appended', 'seq', v_seq);
end
$fn$`;

/** SQLSTATE classes that are the database's trouble, not the entry's: they fail the whole call. */
const FAULT_TEST = `(left(v_state, 2) in ('08', '40', '53', '54', '55', '57', '58', 'XX') or v_state = 'AT001')`;

const APPEND_ENTRIES = `
create function append_entries(p_root text, p_holder text, p_epoch bigint, p_batch text, p_sync text, p_now bigint, p_entries jsonb, p_isolate boolean) returns jsonb
language plpgsql as $fn$
declare
  v_n integer := jsonb_array_length(p_entries);
  v_outs jsonb[] := array[]::jsonb[];
  v_o jsonb;
  v_result jsonb;
  v_touched text[] := array[]::text[];
  v_ids text[];
  v_top bigint;
  v_state text;
  v_msg text;
  v_code text;
begin
  if p_batch is not null then
    select outcomes::jsonb into v_result from append_batches where id = p_batch;
    if found then
      return v_result;
    end if;
  end if;
  if p_sync is not null then
    perform set_config('synchronous_commit', p_sync, true);
  end if;
  perform 1 from leases where run_id = p_root and holder_id = p_holder and epoch = p_epoch and released = 0 for share;
  if not found then
    raise exception 'the lease on run % at epoch % is lost', p_root, p_epoch using errcode = 'AT001';
  end if;
  if not p_isolate then
    for i in 0 .. v_n - 1 loop
      v_o := append_entry(p_root, p_epoch, p_entries->i, p_now);
      v_outs := v_outs || v_o;
      if v_o->>'status' = 'appended' then
        v_touched := v_touched || (p_entries->i->>'run');
      end if;
    end loop;
  else
    for i in 0 .. v_n - 1 loop
      begin
        v_o := append_entry(p_root, p_epoch, p_entries->i, p_now);
        if v_o->>'status' = 'appended' then
          v_touched := v_touched || (p_entries->i->>'run');
        end if;
      exception when others then
        get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_code = pg_exception_detail;
        if ${FAULT_TEST} then
          raise;
        end if;
        v_o := jsonb_build_object('status', 'error', 'code', case when v_state = 'P0001' and v_code <> '' then v_code else 'pg_' || v_state end, 'message', v_msg);
      end;
      v_outs := v_outs || v_o;
    end loop;
  end if;
  if cardinality(v_touched) > 0 then
    -- Each touched run once, in the order of its last change.
    select array_agg(id order by last) into v_ids from (select id, max(ord) as last from unnest(v_touched) with ordinality as t(id, ord) group by id) x;
    update change_clock set n = n + cardinality(v_ids) where id = 1 returning n into v_top;
    update runs r set change_seq = v_top - cardinality(v_ids) + t.ord from unnest(v_ids) with ordinality as t(id, ord) where r.id = t.id;
  end if;
  v_result := to_jsonb(v_outs);
  if p_batch is not null then
    insert into append_batches (id, outcomes, at) values (p_batch, v_result::text, p_now);
  end if;
  return v_result;
end
$fn$`;

export const APPEND_FUNCTIONS: readonly string[] = [UPSERT_STAGE, APPEND_ENTRY, APPEND_ENTRIES];
