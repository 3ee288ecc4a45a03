/** Deciding an approval: the one call both the approvals view and a waiting run's view make. */
import { ADMIN_API } from "../api-routes.ts";
import { ApiError } from "./api.mts";
import type { ViewContext } from "./view.mts";

/** How a decision went: the approval's status now and who decided it, or null when the call failed (already shown in the view). */
export type DecisionResult = { status: string; decided_by: string | null } | null;

/**
 * Approves or denies `approvalId` (with the trimmed `reason`, if any); the run resumes either way. When it was
 * decided elsewhere (409) or has expired (410) the error is shown and the approval read again, so the caller can
 * show what it is now.
 */
export async function decideApproval(
  ctx: ViewContext,
  approvalId: string,
  decision: "approve" | "deny",
  reason: string,
): Promise<DecisionResult> {
  ctx.clearError();
  const text = reason.trim();
  try {
    const res = await ctx.call<{ status: string; decided_by?: string | null }>(ADMIN_API.decide, {
      params: { approval_id: approvalId },
      body: { decision, ...(text ? { reason: text } : {}) },
    });
    return { status: res.body.status, decided_by: res.body.decided_by ?? null };
  } catch (err) {
    if (!ctx.alive()) return null;
    ctx.fail(err);
    if (err instanceof ApiError && (err.status === 409 || err.status === 410)) return rereadApproval(ctx, approvalId);
    return null;
  }
}

/** The approval's status as the gateway has it now; null when that read fails (the failure already shown is the useful one). */
export async function rereadApproval(ctx: ViewContext, approvalId: string): Promise<DecisionResult> {
  try {
    const res = await ctx.call<{ status: string; decided_by?: string | null }>(ADMIN_API.approval, { params: { approval_id: approvalId } });
    return { status: res.body.status, decided_by: res.body.decided_by ?? null };
  } catch {
    return null;
  }
}
