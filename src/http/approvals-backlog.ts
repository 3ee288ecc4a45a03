/**
 * DESIGN "Approvals": too many pending → 429. While an agent has `tools.policy.approvals.maxPendingPerAgent`
 * approvals waiting for a human, new runs of that agent are refused (`rate.limited`, with a retry hint)
 * rather than queued behind a backlog nobody is clearing.
 */
import { pendingApprovals } from "../runs/approvals";
import { GatewayError } from "./errors";

export async function refuseWhenApprovalsBacklogged(db: D1Database, agentId: string, maxPending: number): Promise<void> {
  let pending: number;
  try {
    pending = await pendingApprovals(db, agentId, new Date());
  } catch {
    return; // the index is unavailable: the limit cannot be checked, and it guards a backlog, not safety
  }
  if (pending >= maxPending)
    throw new GatewayError(
      "rate.limited",
      `agent "${agentId}" has ${pending} tool calls waiting for approval (limit ${maxPending}); decide them at /api/admin/approvals first`,
      { retryAfterSeconds: 60 },
    );
}
