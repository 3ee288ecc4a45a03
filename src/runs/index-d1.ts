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

/** Creates or updates a run's index row. */
export async function indexRun(db: D1Database, r: RunIndexRow): Promise<void> {
  await runIndexStatement(db, r).run();
}

/**
 * The upsert of a run's index row, for a batch. Idempotent, and never moves a row back to an older state: a batch
 * retried (or delivered late by an evicted instance) after a newer one changes nothing.
 */
export function runIndexStatement(db: D1Database, r: RunIndexRow): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO runs (run_id, agent_id, session_key, session_id, caller_id, source, status, created_at, updated_at)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
       ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
       WHERE excluded.updated_at >= runs.updated_at`,
    )
    .bind(r.run_id, r.agent_id, r.session_key, r.session_id, r.caller_id, r.source, r.status, r.created_at, r.updated_at);
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
