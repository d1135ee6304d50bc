/**
 * `upsert_stage` as migration 10 replaces it (migration 1's is in
 * append-sql.ts): a stage's row only moves forward (../stage-index.ts,
 * stageRecordMovesRow). A record of an older attempt, or of the same attempt
 * in an earlier state, leaves the row's state, outcome and time as they are;
 * its usage still adds up. Before, the row took the state of whatever record
 * came last, and a pooled stage's progress record (stage_running) that
 * reached the journal after the attempt's checkpoint on a busy machine left
 * a finished stage "running" in a completed run (the run list counted it
 * stopped).
 */

import { stageRecordMovesRow } from "../stage-index.ts";

const moves = stageRecordMovesRow("stage_index", "excluded");

export const UPSERT_STAGE_V10 = `
create or replace function upsert_stage(p_root text, p_run text, s jsonb, p_at bigint) returns void
language sql as $fn$
  insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, child_run_id, updated_at, outcome,
                           input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, turns, has_usage)
  values (p_root, p_run, s->>'key', s->>'path', s->>'name', s->>'kind', s->>'state', (s->>'attempt')::integer, s->>'childRunId', p_at, s->>'outcome',
          (s->>'i')::bigint, (s->>'o')::bigint, (s->>'cr')::bigint, (s->>'cw')::bigint, (s->>'c')::bigint, (s->>'t')::bigint, (s->>'u')::integer)
  on conflict (run_id, stage_key) do update set
    path = excluded.path, name = excluded.name, kind = excluded.kind,
    state = case when ${moves} then excluded.state else stage_index.state end,
    attempt = greatest(stage_index.attempt, excluded.attempt), child_run_id = coalesce(excluded.child_run_id, stage_index.child_run_id),
    updated_at = case when ${moves} then excluded.updated_at else stage_index.updated_at end,
    outcome = case when ${moves} then excluded.outcome else stage_index.outcome end,
    input_tokens = stage_index.input_tokens + excluded.input_tokens, output_tokens = stage_index.output_tokens + excluded.output_tokens,
    cache_read_tokens = stage_index.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = stage_index.cache_write_tokens + excluded.cache_write_tokens,
    cost_micro_usd = stage_index.cost_micro_usd + excluded.cost_micro_usd, turns = stage_index.turns + excluded.turns,
    has_usage = greatest(stage_index.has_usage, excluded.has_usage)
$fn$`;
