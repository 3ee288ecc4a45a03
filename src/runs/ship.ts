/**
 * What a run ships outside its SessionDO after a commit: the D1 index rows of runs and approvals. Neither is
 * needed to answer the turn (the run's own rows are the truth; the index is for listing and the pending
 * limits), so a failed write is only noted and the next one brings the index up to date. Issue 23 moves these
 * writes to an outbox the alarm ships in batches; this module is the one place that change touches.
 */
import { getApproval, indexApproval } from "./approvals";
import type { RunHost } from "./host";
import { indexRun } from "./index-d1";
import { getRun, setRunIndexed } from "./store";

/** Writes the run's D1 index row now, and notes whether it succeeded (`runs.indexed`). */
export async function shipRunIndex(host: RunHost, runId: string): Promise<void> {
  const { sql, env } = host;
  const run = getRun(sql, runId);
  if (!run) return;
  const session = host.session();
  try {
    await indexRun(env.DB, {
      run_id: run.id,
      agent_id: run.agent_id,
      session_key: session.sessionKey,
      session_id: run.session_id,
      caller_id: run.caller_id,
      source: run.source,
      status: run.status,
      created_at: run.created_at,
      updated_at: run.updated_at,
    });
    setRunIndexed(sql, runId, true);
  } catch {
    // The index is for listing only; the run itself is safe here. The next index write brings it up to date.
    setRunIndexed(sql, runId, false);
  }
}

/** Writes the approval's D1 index row now. */
export async function shipApprovalIndex(host: RunHost, id: string): Promise<void> {
  const approval = getApproval(host.sql, id);
  if (!approval) return;
  const run = getRun(host.sql, approval.run_id);
  try {
    await indexApproval(host.env.DB, {
      approval_id: approval.id,
      agent_id: run?.agent_id ?? "",
      run_id: approval.run_id,
      session_key: host.session().sessionKey,
      tool: approval.tool,
      status: approval.status,
      created_at: approval.created_at,
      expires_at: approval.expires_at,
      decided_at: approval.decided_at,
    });
  } catch {
    // The index serves listing and the pending limit; the approval itself is safe in this object.
  }
}
