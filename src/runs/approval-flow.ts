/**
 * An approval's flow through a run (S1 §3.3 Phase 1): the gate's approval step (request one, taking its place
 * under the pending limits first, and pause; wait while pending; once decided, let the call run only with the
 * arguments it was granted for), a human's decision, and the expiry of overdue approvals. The rows and the D1
 * index themselves are in approvals.ts.
 */
import { queueOutcomeEdit } from "../channels/approval-outcomes";
import type { GateDecision } from "../tools/policy";
import type { ToolOutcome } from "../tools/registry";
import {
  type ApprovalRow,
  type ApprovalSlot,
  approvalForCall,
  argsDigest,
  decideApprovalRow,
  decidedVia,
  getApproval,
  insertApproval,
  mintApprovalId,
  overdueApprovals,
  reserveApprovalSlot,
} from "./approvals";
import { runCallerKey } from "./caller";
import { emit, type RunContext } from "./host";
import { shipApprovalIndex } from "./ship";
import type { RunSpec } from "./spec";
import {
  getRun,
  isTerminal,
  markAwaitingApproval,
  type RunRow,
  resumeAfterApproval,
  setToolDecision,
  type ToolExecutionRow,
} from "./store";

/**
 * What the gate says of a call: the run pauses for a human, or goes on with the decision and either an outcome
 * (the call is answered without running) or none (it runs; `honeypotSend` names a reserved honeypot send). Defined
 * here, beside the approval step that answers most of them, so the gate (gate.ts) imports this module and not back.
 */
export type GateResult =
  | { paused: true }
  | { paused: false; decision: GateDecision | null; outcome: ToolOutcome | null; honeypotSend?: number };

/** Pending-approval limits for runs accepted before their spec carried them (the config defaults). */
const DEFAULT_MAX_PENDING_PER_AGENT = 20;
const DEFAULT_MAX_PENDING_PER_CALLER = 5;

/** The approval step of a call the policy sends to a human: request, wait, or apply the decision. */
export async function approvalStep(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  call: ToolExecutionRow,
  decision: GateDecision,
): Promise<GateResult> {
  const approval = approvalForCall(ctx.host.sql, run.id, call.round, call.tool_call_id);
  const digest = await argsDigest(call.args);
  if (!approval) return requestApproval(ctx, run, spec, call, decision, digest);
  if (approval.status === "pending") {
    markAwaitingApproval(ctx.host.sql, run.id);
    return { paused: true };
  }
  const denied = (message: string): GateResult => ({
    paused: false,
    decision,
    outcome: { ok: false, error: { code: "policy.denied", message } },
  });
  if (approval.status === "approved") {
    if (approval.args_sha256 !== digest)
      return denied(`the arguments changed after approval ${approval.id} was requested; the call was not run`);
    return { paused: false, decision, outcome: null };
  }
  return denied(
    approval.status === "expired"
      ? `approval ${approval.id} expired before anyone decided; the call was not run`
      : `denied by ${approval.decided_by ?? "an admin"}${approval.decision_reason ? `: ${approval.decision_reason}` : ""}`,
  );
}

/**
 * Issue 20 §4: the approval takes its place under the pending limits (agent, caller) atomically in D1 first;
 * with no place, the call is refused and the run goes on. A crash after this leaves a pending index row that
 * expires with the approval's TTL, so a reservation is never held for longer than an approval would be.
 */
async function requestApproval(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  call: ToolExecutionRow,
  decision: GateDecision,
  digest: string,
): Promise<GateResult> {
  const { sql, storage } = ctx.host;
  const now = new Date();
  const id = mintApprovalId(ctx.host.objectId());
  const expiresAt = new Date(now.getTime() + spec.approvalTtlSeconds * 1000).toISOString();
  // Issue 24 §2: asked in the run's chat too, when its agent has approvers there; the buttons ride the reservation.
  const prompt = spec.chatApprovals ? (ctx.host.chatApprovalPrompt?.(run.id) ?? null) : null;
  const buttons = prompt
    ? await prompt.buttons(ctx.host.env.DB, { approvalId: id, agentId: spec.agentId, createdAt: now.toISOString(), expiresAt })
    : [];
  const slot = await reserveSlot(ctx, run, spec, { id, tool: decision.tool, now, expiresAt }, buttons);
  if (!slot.ok)
    return {
      paused: false,
      decision: { ...decision, outcome: "denied", code: "policy.denied", reason: slot.message },
      outcome: { ok: false, error: { code: "policy.denied", message: slot.message } },
    };
  storage.transactionSync(() => {
    insertApproval(sql, {
      id,
      run_id: run.id,
      round: call.round,
      tool_call_id: call.tool_call_id,
      tool: decision.tool,
      args: call.args,
      args_sha256: digest,
      requester: run.caller_id ?? `agent:${spec.agentId}`,
      channel: decision.channel,
      reason: decision.reason,
      created_at: now.toISOString(),
      expires_at: expiresAt,
    });
    setToolDecision(sql, { runId: run.id, round: call.round, toolCallId: call.tool_call_id }, JSON.stringify(decision));
    markAwaitingApproval(sql, run.id, now.toISOString());
    emit(ctx, run, "approval.requested", {
      approval_id: id,
      tool: decision.tool,
      tool_call_id: call.tool_call_id,
      args_sha256: digest,
      reason: decision.reason,
      expires_at: expiresAt,
    });
    prompt?.enqueue({ id, run_id: run.id, tool: decision.tool, args: call.args, expires_at: expiresAt });
  });
  await shipApprovalIndex(ctx.host, id);
  return { paused: true };
}

/** An approval's place under the pending limits (issue 20 §4); fails closed when the index cannot be written. */
async function reserveSlot(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  a: { id: string; tool: string; now: Date; expiresAt: string },
  alongside: readonly D1PreparedStatement[],
): Promise<{ ok: true } | { ok: false; message: string }> {
  const caller = runCallerKey(spec, run);
  const limits = {
    perAgent: spec.maxPendingPerAgent ?? DEFAULT_MAX_PENDING_PER_AGENT,
    perCaller: spec.maxPendingPerCaller ?? DEFAULT_MAX_PENDING_PER_CALLER,
  };
  let slot: ApprovalSlot;
  try {
    slot = await reserveApprovalSlot(
      ctx.host.env.DB,
      {
        approval_id: a.id,
        agent_id: spec.agentId,
        run_id: run.id,
        session_key: ctx.host.session().sessionKey,
        tool: a.tool,
        created_at: a.now.toISOString(),
        expires_at: a.expiresAt,
        caller,
      },
      limits,
      a.now,
      alongside,
    );
  } catch {
    return { ok: false, message: "not run: the approval request could not be recorded, so the call cannot wait for one; try again later" };
  }
  if (slot.ok) return slot;
  const who = slot.limit === "agent" ? `agent "${spec.agentId}"` : `caller "${caller}"`;
  const key = slot.limit === "agent" ? "maxPendingPerAgent" : "maxPendingPerCaller";
  return {
    ok: false,
    message: `not run: ${who} already has ${slot.pending} tool calls waiting for approval (tools.policy.approvals.${key} = ${slot.max}); try again once they are decided`,
  };
}

/** What deciding an approval answers (see RunEngine.decideApproval). */
export type ApprovalDecision =
  | { ok: true; approval: ApprovalRow }
  | { ok: false; reason: "not_found" | "decided" | "expired"; approval?: ApprovalRow };

/** Records a human decision on a pending approval and puts its run back in the queue. */
export function decideApproval(
  ctx: RunContext,
  approvalId: string,
  decision: "approve" | "deny",
  by: string,
  reason: string | null,
  now: Date,
): ApprovalDecision {
  const { sql, storage } = ctx.host;
  const approval = getApproval(sql, approvalId);
  if (!approval) return { ok: false, reason: "not_found" };
  if (approval.status === "expired") return { ok: false, reason: "expired", approval };
  if (approval.status !== "pending") return { ok: false, reason: "decided", approval };
  if (Date.parse(approval.expires_at) <= now.getTime()) {
    expireOverdue(ctx, now);
    return { ok: false, reason: "expired", approval: getApproval(sql, approvalId) as ApprovalRow };
  }
  const status = decision === "approve" ? "approved" : "denied";
  const run = getRun(sql, approval.run_id) as RunRow;
  storage.transactionSync(() => {
    decideApprovalRow(sql, approvalId, status, by, reason, now);
    queueOutcomeEdit(sql, approvalId, { status, by }); // the chat's Approve / Deny message follows (D-081)
    // A run that ended meanwhile (cancelled) keeps its log closed: the decision is recorded on the approval only.
    if (isTerminal(run.status)) return;
    // Issue 24 §2: a decision from a chat says so (`decided_via`); an admin's event is as it always was.
    const via = decidedVia(by);
    const payload = { approval_id: approvalId, decision: status, decided_by: by, ...(via !== "admin" ? { decided_via: via } : {}) };
    emit(ctx, run, "approval.decided", { ...payload, ...(reason ? { reason } : {}) }, by);
    if (run.status === "awaiting_approval") resumeAfterApproval(sql, run.id, now.toISOString());
  });
  void shipApprovalIndex(ctx.host, approvalId);
  return { ok: true, approval: getApproval(sql, approvalId) as ApprovalRow };
}

/** Expires pending approvals whose time is up; their runs continue (the call is denied). Returns how many. */
export function expireOverdue(ctx: RunContext, now: Date): number {
  const { sql, storage } = ctx.host;
  const overdue = overdueApprovals(sql, now);
  for (const approval of overdue) {
    const run = getRun(sql, approval.run_id) as RunRow;
    storage.transactionSync(() => {
      decideApprovalRow(sql, approval.id, "expired", null, null, now);
      queueOutcomeEdit(sql, approval.id, { status: "expired", by: null });
      if (!isTerminal(run.status)) {
        emit(ctx, run, "approval.decided", { approval_id: approval.id, decision: "expired" });
        if (run.status === "awaiting_approval") resumeAfterApproval(sql, run.id, now.toISOString());
      }
    });
    void shipApprovalIndex(ctx.host, approval.id);
  }
  return overdue.length;
}
