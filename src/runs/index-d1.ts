/**
 * The D1 run index (migrations/0003_runs.sql): which runs exist, for listing.
 * Shipped by the SessionDO's index outbox (src/sessions/index-outbox.ts) within a second of a run's change;
 * reading one run never needs it (the run id names its object).
 */

export interface RunIndexRow {
  run_id: string;
  agent_id: string;
  session_key: string;
  session_id: string;
  caller_id: string | null;
  source: string;
  status: string;
  created_at: string;
  updated_at: string;
}

/**
 * Issue 25 §2 (migrations/0020_usage.sql, D-078): the run's usage so far, carried by its index row. The table's
 * triggers add each change of `requests` to the usage rollups, so the usage costs the run-stop batch no statement.
 */
export interface RunUsageColumns {
  /** The caller key (src/runs/caller.ts); null before the run is known to the shipper. */
  caller: string | null;
  /** '' for runs no job started. */
  job_id: string;
  /** `provider:model`. */
  model: string;
  requests: number;
  unreported_requests: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** Pico-USD (10^-12 USD) of the costed requests. */
  cost_pico: number;
}

/** Usage columns of a run with no model call yet. */
export const NO_RUN_USAGE: RunUsageColumns = {
  caller: null,
  job_id: "",
  model: "",
  requests: 0,
  unreported_requests: 0,
  uncosted_requests: 0,
  prompt_tokens: 0,
  completion_tokens: 0,
  cached_tokens: 0,
  cost_pico: 0,
};

/** Creates or updates a run's index row (without usage: a run that made no model call, or a test's listing). */
export async function indexRun(db: D1Database, r: RunIndexRow): Promise<void> {
  await runIndexStatement(db, r, NO_RUN_USAGE).run();
}

/**
 * The upsert of a run's index row (with its usage), for a batch. Idempotent, and never moves a row back to an older
 * state: a batch retried (or delivered late by an evicted instance) after a newer one changes nothing — nor, then,
 * do the usage triggers, which count a change of `requests` only.
 */
export function runIndexStatement(db: D1Database, r: RunIndexRow, u: RunUsageColumns): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO runs (run_id, agent_id, session_key, session_id, caller_id, source, status, created_at, updated_at,
                         caller, job_id, model, requests, unreported_requests, uncosted_requests, prompt_tokens,
                         completion_tokens, cached_tokens, cost_pico)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
       ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at,
         caller = excluded.caller, job_id = excluded.job_id, model = excluded.model, requests = excluded.requests,
         unreported_requests = excluded.unreported_requests, uncosted_requests = excluded.uncosted_requests,
         prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
         cached_tokens = excluded.cached_tokens, cost_pico = excluded.cost_pico
       WHERE excluded.updated_at >= runs.updated_at AND excluded.requests >= runs.requests`,
    )
    .bind(
      r.run_id,
      r.agent_id,
      r.session_key,
      r.session_id,
      r.caller_id,
      r.source,
      r.status,
      r.created_at,
      r.updated_at,
      u.caller,
      u.job_id,
      u.model,
      u.requests,
      u.unreported_requests,
      u.uncosted_requests,
      u.prompt_tokens,
      u.completion_tokens,
      u.cached_tokens,
      u.cost_pico,
    );
}

export interface RunFilters {
  agentId?: string | undefined;
  status?: string | undefined;
  callerId?: string | undefined;
  /** Keyset cursor: only runs after this (created_at, run_id) in list order. */
  after?: readonly [createdAt: string, runId: string] | undefined;
  limit: number;
}

/** Runs matching the filters, newest first: (created_at, run_id) descending, a stable and unique order. */
export async function listRuns(db: D1Database, f: RunFilters): Promise<RunIndexRow[]> {
  const rows = await db
    .prepare(
      `SELECT run_id, agent_id, session_key, session_id, caller_id, source, status, created_at, updated_at FROM runs
       WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR caller_id = ?3)
         AND (?4 IS NULL OR (created_at, run_id) < (?4, ?5))
       ORDER BY created_at DESC, run_id DESC LIMIT ?6`,
    )
    .bind(f.agentId ?? null, f.status ?? null, f.callerId ?? null, f.after?.[0] ?? null, f.after?.[1] ?? null, f.limit)
    .all<RunIndexRow>();
  return rows.results;
}
