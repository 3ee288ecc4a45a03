/**
 * The D1 side of usage and cost (migrations/0020_usage.sql, D-078): an alert's claim (in the run-stop batch, after the
 * run's index row whose usage triggers moved the totals — src/runs/index-d1.ts), and the totals GET /api/admin/usage
 * reads from the rollups. The only module with SQL for these tables.
 */

/** One alert to check for one period, claimed for `claimant` (the run whose batch this is). */
export interface AlertClaim {
  key: string;
  scope: "agent" | "caller";
  scopeId: string;
  /** `YYYY-MM-DD` or `YYYY-MM`. */
  period: string;
  metric: "cost" | "tokens";
  /** Pico-USD or tokens. */
  threshold: number;
  claimant: string;
}

/** What a claim answers when it fired (for this claimant): the period's totals when it was claimed. */
export interface ClaimedAlert {
  alert_key: string;
  period: string;
  tokens: number;
  cost_pico: string;
}

/**
 * Claims the alert for the period if the period's total has reached the threshold, atomically: the (alert, period)
 * key admits one row, so of concurrent batches crossing it at once exactly one claims it. The claimant's own batch,
 * sent again, reads its claim back (a repeated no-op update returns the row); any other claimant gets nothing.
 */
export function alertClaimStatement(db: D1Database, a: AlertClaim, firedAt: string): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO usage_alerts (alert_key, period, claimant, fired_at, tokens, cost_pico)
       SELECT ?1, ?2, ?3, ?4, t.tokens, t.cost_pico FROM usage_totals t
       WHERE t.scope = ?5 AND t.scope_id = ?6 AND t.period = ?2
         AND (CASE WHEN ?7 = 'tokens' THEN t.tokens ELSE t.cost_pico END) >= ?8
       ON CONFLICT (alert_key, period) DO UPDATE SET claimant = usage_alerts.claimant WHERE usage_alerts.claimant = excluded.claimant
       RETURNING alert_key, period, tokens, CAST(cost_pico AS TEXT) AS cost_pico`,
    )
    .bind(a.key, a.period, a.claimant, firedAt, a.scope, a.scopeId, a.metric, a.threshold);
}

/** What GET /api/admin/usage groups by, and the rollup column of each. */
export const USAGE_GROUPS = { caller: "caller", agent: "agent_id", model: "model", job: "job_id", day: "day" } as const;
export type UsageGroupBy = keyof typeof USAGE_GROUPS;

/** One group's totals from the rollups; `cost_pico` as exact decimal text. */
export interface UsageGroupRow {
  key: string;
  requests: number;
  runs: number;
  unreported_requests: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  cost_pico: string;
}

/** Totals per group over the UTC days `from`..`to` (inclusive), from the rollups alone (their key starts with the day). */
export async function usageTotals(db: D1Database, from: string, to: string, groupBy: UsageGroupBy): Promise<UsageGroupRow[]> {
  const col = USAGE_GROUPS[groupBy];
  const rows = await db
    .prepare(
      `SELECT ${col} AS key, SUM(requests) AS requests, SUM(runs) AS runs, SUM(unreported_requests) AS unreported_requests,
              SUM(uncosted_requests) AS uncosted_requests, SUM(prompt_tokens) AS prompt_tokens,
              SUM(completion_tokens) AS completion_tokens, SUM(cached_tokens) AS cached_tokens,
              CAST(SUM(cost_pico) AS TEXT) AS cost_pico
       FROM usage_rollups WHERE day >= ?1 AND day <= ?2 GROUP BY ${col} ORDER BY ${col}`,
    )
    .bind(from, to)
    .all<UsageGroupRow>();
  return rows.results;
}

/** One group's totals on one UTC day (GET /api/admin/usage?series=day, the dashboard's chart). */
export interface UsageDayRow extends UsageGroupRow {
  day: string;
}

/**
 * Totals per (UTC day, group) over `from`..`to`, from the same range of the rollups as usageTotals: what a chart of
 * each day split by caller, agent or model needs, in one statement. Ordered by day, then group.
 */
export async function usageSeries(db: D1Database, from: string, to: string, groupBy: UsageGroupBy): Promise<UsageDayRow[]> {
  const col = USAGE_GROUPS[groupBy];
  const rows = await db
    .prepare(
      `SELECT day, ${col} AS key, SUM(requests) AS requests, SUM(runs) AS runs, SUM(unreported_requests) AS unreported_requests,
              SUM(uncosted_requests) AS uncosted_requests, SUM(prompt_tokens) AS prompt_tokens,
              SUM(completion_tokens) AS completion_tokens, SUM(cached_tokens) AS cached_tokens,
              CAST(SUM(cost_pico) AS TEXT) AS cost_pico
       FROM usage_rollups WHERE day >= ?1 AND day <= ?2 GROUP BY day, ${col} ORDER BY day, ${col}`,
    )
    .bind(from, to)
    .all<UsageDayRow>();
  return rows.results;
}
