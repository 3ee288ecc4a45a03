/**
 * What a run's usage adds to the run-stop D1 batch (issue 25 §2, D-078): its usage columns on the run's index row
 * (no statement of its own) and, for each budget alert watching it, the alert's claim — statements that ride the index
 * outbox's one batch (src/sessions/index-outbox.ts), never a D1 call of their own.
 */
import { runCallerKey } from "../runs/caller";
import { type RunIndexRow, type RunUsageColumns, runIndexStatement } from "../runs/index-d1";
import type { RunSpec } from "../runs/spec";
import { type AlertClaim, type AlertSpec, alertClaims } from "./alerts";
import { alertClaimStatement, type ClaimedAlert } from "./store";

/** The run fields the usage columns are built from (the SessionDO's runs row, schema v20). */
export type RunUsageSource = {
  agent_id: string;
  caller_id: string | null;
  source: string;
  created_at: string;
  spec: string | null;
  model_calls: number;
  unreported_calls: number;
  uncosted_calls: number;
  reported_prompt_tokens: number;
  reported_completion_tokens: number;
  cached_tokens: number;
  cost_pico: number;
};

/** A statement for the batch, with the alert it claims (if it is a claim). */
export interface PlannedStatement {
  statement: D1PreparedStatement;
  alert?: AlertClaim & { alert: AlertSpec };
}

/** The run's usage columns: its caller key and job (from its spec), its model, and what its calls reported and cost. */
export function runUsageColumns(r: RunUsageSource, spec: RunSpec | null): RunUsageColumns {
  const caller = runCallerKey({ agentId: r.agent_id, ...(spec?.caller !== undefined ? { caller: spec.caller } : {}) }, r);
  return {
    caller,
    job_id: r.source === "job" && caller.startsWith("job:") ? caller.slice(4) : "",
    model: spec ? spec.model.ref : "",
    requests: r.model_calls,
    unreported_requests: r.unreported_calls,
    uncosted_requests: r.uncosted_calls,
    prompt_tokens: r.reported_prompt_tokens,
    completion_tokens: r.reported_completion_tokens,
    cached_tokens: r.cached_tokens,
    cost_pico: r.cost_pico,
  };
}

/**
 * The run's index row with its usage and, after it (so the totals its triggers moved include it), the claims of the
 * alerts watching it — none before its first model call.
 */
export function runStatements(db: D1Database, row: RunIndexRow, r: RunUsageSource, now = new Date()): PlannedStatement[] {
  const spec = r.spec ? (JSON.parse(r.spec) as RunSpec) : null;
  const usage = runUsageColumns(r, spec);
  const claims = usage.requests > 0 ? alertClaims(spec?.usageAlerts, row, usage) : [];
  const firedAt = now.toISOString();
  return [
    { statement: runIndexStatement(db, row, usage) },
    ...claims.map((a) => ({ statement: alertClaimStatement(db, a, firedAt), alert: a })),
  ];
}

/** An alert a batch claimed: which, for which period and run, and the period's totals when it was claimed. */
export interface FiredAlert {
  alert: AlertSpec;
  runId: string;
  period: string;
  tokens: number;
  costPico: string;
}

/** The alerts the batch's claims fired (a claim's statement answered a row), in statement order. */
export function firedAlerts(planned: readonly PlannedStatement[], results: readonly D1Result[]): FiredAlert[] {
  return planned.flatMap((p, i) => {
    const row = results[i]?.results?.[0] as ClaimedAlert | undefined;
    if (!p.alert || !row) return [];
    return [{ alert: p.alert.alert, runId: p.alert.claimant, period: p.alert.period, tokens: row.tokens, costPico: String(row.cost_pico) }];
  });
}
