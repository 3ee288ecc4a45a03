/**
 * DESIGN "Approvals": too many pending → 429. While an agent has `tools.policy.approvals.maxPendingPerAgent`
 * approvals waiting for a human, new runs of that agent are refused (`rate.limited`, with a retry hint)
 * rather than queued behind a backlog nobody is clearing. Issue 20 §4: the same per caller
 * (`maxPendingPerCaller`, src/runs/caller.ts), so one caller's backlog refuses that caller only.
 *
 * This check is the early answer, not the guarantee: requests racing past it are held to the limits when
 * their approval is indexed (`reserveApprovalSlot`, one atomic D1 statement; the call is then refused).
 */

import { GatewayError } from "../errors";
import { pendingApprovalCounts } from "../runs/approvals";

/** Throws 429 `rate.limited` when the agent, or `caller` on it, has as many approvals pending as allowed. */
export async function refuseWhenApprovalsBacklogged(
  db: D1Database,
  agentId: string,
  maxPending: number,
  caller?: { key: string; maxPending: number },
): Promise<void> {
  let pending: { agent: number; caller: number };
  try {
    pending = await pendingApprovalCounts(db, agentId, caller?.key ?? "", new Date());
  } catch {
    return; // the index is unavailable: the early check cannot run; the atomic one at approval time still holds
  }
  if (pending.agent >= maxPending)
    throw new GatewayError(
      "rate.limited",
      `agent "${agentId}" has ${pending.agent} tool calls waiting for approval (limit ${maxPending}); decide them at /api/admin/approvals first`,
      { retryAfterSeconds: 60 },
    );
  if (caller && pending.caller >= caller.maxPending)
    throw new GatewayError(
      "rate.limited",
      `caller "${caller.key}" has ${pending.caller} tool calls waiting for approval on agent "${agentId}" (limit ${caller.maxPending} per caller); wait until an admin decides them`,
      { retryAfterSeconds: 60 },
    );
}
