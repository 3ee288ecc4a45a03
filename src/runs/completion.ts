/**
 * How an automation run ended (issue 21 §1, S5 `automation.complete`). A job run is told its `run_id` in L6; when
 * the model calls `automation.complete` with it, the run ends after that tool round with the completion's outcome
 * and summary. A job run that ends without one is recorded as `missing`. The same object appears in the run view,
 * the `run.completed` payload, the firing row (D1 `job_firings.completion`) and the notification body.
 *
 * The firing row is written from the SessionDO's alarm: each finished job run is reported once D1 takes it
 * (`runs.firing_reported`), so a D1 outage delays the record but never loses it.
 */
import { readLazy } from "../sessions/lazy-tables";
import type { Sql } from "../storage/sql";
import { isTerminal, type RunRow } from "./store";

/** A recorded completion, or the record that a job run ended without one. */
export type RunCompletion =
  | { status: "recorded"; completion_id: string; outcome: string; summary: string | null; recorded_at: string }
  | { status: "missing" };

/** The run's first recorded completion (a repeated completion_id never adds one), or null. */
export function recordedCompletion(sql: Sql, runId: string): Extract<RunCompletion, { status: "recorded" }> | null {
  // No table: no automation.complete was ever recorded in this object (D-062), so a plain turn asks nothing.
  const row = readLazy(
    sql,
    "automation_completions",
    undefined,
    () => sql.one<{ completion_id: string; outcome: string; summary: string | null; recorded_at: string }>`
    SELECT completion_id, outcome, summary, recorded_at FROM automation_completions WHERE run_id = ${runId}
    ORDER BY recorded_at, completion_id LIMIT 1`,
  );
  return row ? { status: "recorded", ...row } : null;
}

/** What a run shows about its completion: recorded; `missing` for a finished job run; nothing otherwise. */
export function completionOf(sql: Sql, run: Pick<RunRow, "id" | "source" | "status">): RunCompletion | undefined {
  const recorded = recordedCompletion(sql, run.id);
  if (recorded) return recorded;
  return run.source === "job" && isTerminal(run.status) ? { status: "missing" } : undefined;
}

/** The run's output when a completion ends it: the summary, else the outcome. */
export const completionOutput = (c: Extract<RunCompletion, { status: "recorded" }>): string => c.summary ?? c.outcome;

/** The L6 block text that tells a job run its own id. */
export const automationRunContext = (runId: string): string =>
  `run_id: ${runId}\nPass this run_id to automation.complete when the work is finished.`;

/** `job:{job_id}:{scheduled_for}` (the firing's run key; job ids hold no ':') → its parts. */
export function firingOfDispatchKey(key: string | null): { jobId: string; scheduledFor: string } | null {
  const m = key?.match(/^job:([^:]+):(.+)$/);
  return m ? { jobId: m[1] as string, scheduledFor: m[2] as string } : null;
}

/** When unreported firing outcomes are written to D1 again after a failure. */
export const FIRING_REPORT_RETRY_MS = 30_000;

/** Whether a finished job run still has its outcome to write to its firing row. */
export function hasUnreportedFirings(sql: Sql): boolean {
  const row = sql.one<{ n: number }>`
    SELECT COUNT(*) AS n FROM runs WHERE firing_reported = 0 AND dispatch_key IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')`;
  return (row?.n ?? 0) > 0;
}

/** Writes finished job runs' status and completion to their D1 firing rows; what D1 does not take stays for later. */
export async function reportFirings(sql: Sql, db: D1Database): Promise<void> {
  const runs = sql.all<Pick<RunRow, "id" | "source" | "status"> & { dispatch_key: string }>`
    SELECT id, source, status, dispatch_key FROM runs
    WHERE firing_reported = 0 AND dispatch_key IS NOT NULL AND status IN ('completed', 'failed', 'cancelled') LIMIT 50`;
  const writes = runs.flatMap((run) => {
    const firing = firingOfDispatchKey(run.dispatch_key);
    if (!firing) return [];
    const completion = completionOf(sql, run) ?? null;
    return [
      db
        // Matched on the run key alone: a quick run can end before the tick has written its run_id to the row.
        .prepare("UPDATE job_firings SET run_status = ?3, completion = ?4 WHERE job_id = ?1 AND scheduled_for = ?2")
        .bind(firing.jobId, firing.scheduledFor, run.status, completion ? JSON.stringify(completion) : null),
    ];
  });
  if (writes.length > 0) {
    try {
      await db.batch(writes);
    } catch {
      return; // D1 unavailable: the runs stay unreported and the alarm comes back.
    }
  }
  for (const run of runs) sql.run`UPDATE runs SET firing_reported = 1 WHERE id = ${run.id}`;
}
