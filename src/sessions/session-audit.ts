/**
 * The session's audit stream (S3 §3): events queued in the object's outbox in the same transaction as the change
 * they record, and the flush that ships the outbox to R2 later (create-only segments, hash-chained per day), from
 * the shipping pass (shipping.ts). Queueing is work a turn does before it replies; shipping is not.
 */
import { auditEvent } from "../audit/event";
import { type AuditShipment, enqueueAudit, putAuditSegments } from "../audit/outbox";
import { secretValuesFromEnv } from "../security/redact";
import type { SessionContext } from "./context";
import { currentSession, ensureSession, type SessionIdentity } from "./session-state";
import { nextAuditSeq, readSession } from "./session-store";
import { openShippingWindow } from "./ship-window";

/** Queues an audit event outside a run's lifecycle (its own per-session seq); call inside a transaction. */
export function enqueueSessionAudit(
  cx: SessionContext,
  eventType: string,
  actor: string,
  payload: Record<string, unknown>,
  runId?: string,
): void {
  const session = currentSession(cx);
  const seq = nextAuditSeq(cx.sql);
  enqueueAudit(
    cx.sql,
    auditEvent(
      { event_type: eventType, agent_id: session.agentId, actor, seq, payload, ...(runId ? { run_id: runId } : {}) },
      secretValuesFromEnv(cx.env),
    ),
  );
}

/** Records an admin action on this session as an audit event (S3 §3), and opens a shipping window for it. */
export async function auditAdmin(cx: SessionContext, eventType: string, payload: Record<string, unknown>): Promise<void> {
  cx.storage.transactionSync(() => enqueueSessionAudit(cx, eventType, "admin", payload));
  await openShippingWindow(cx.storage);
}

/**
 * Records an agent-level event in this session's audit stream (the scheduler uses the agent's main
 * session for job changes and firings that start no run). Creates the session if needed.
 */
export async function recordAuditEvent(
  cx: SessionContext,
  identity: SessionIdentity,
  eventType: string,
  actor: string,
  payload: Record<string, unknown>,
): Promise<void> {
  await ensureSession(cx, identity);
  cx.storage.transactionSync(() => enqueueSessionAudit(cx, eventType, actor, payload));
  await openShippingWindow(cx.storage);
}

/**
 * Puts the audit outbox to R2 (one segment per day's worth of waiting events; backoff after a failure, per the
 * outbox's own record) and answers what it wrote, for the shipping pass to record in its one commit
 * (`recordAuditShipment`; a day's first segment inserts its chain head there, whose trigger queues the
 * audit-stream index row — the pass has already sent that row in its D1 batch). Null when there is no session.
 */
export async function putSessionAudit(cx: SessionContext): Promise<AuditShipment | null> {
  const session = readSession(cx.sql);
  if (!session) return null;
  return putAuditSegments({ sql: cx.sql, bucket: cx.env.AUDIT, stream: cx.objectId, agentId: session.agentId });
}
