/**
 * The session's audit stream (S3 §3): events queued in the object's outbox in the same transaction as the change
 * they record, and the capability that ships the outbox to R2 later (create-only segments, hash-chained per day).
 * Queueing is work a turn does before it replies; shipping is not.
 */
import { auditEvent } from "../audit/event";
import { enqueueAudit, flushAudit, nextFlushAt } from "../audit/outbox";
import { recordAuditStream } from "../audit/streams";
import { secretValuesFromEnv } from "../security/redact";
import { type AlarmCapability, alarmNow } from "./capabilities";
import type { SessionContext } from "./context";
import { currentSession, ensureSession, type SessionIdentity } from "./session-state";
import { nextAuditSeq, readSession } from "./session-store";

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

/** Records an admin action on this session as an audit event (S3 §3), and makes sure the alarm will ship it. */
export async function auditAdmin(cx: SessionContext, eventType: string, payload: Record<string, unknown>): Promise<void> {
  cx.storage.transactionSync(() => enqueueSessionAudit(cx, eventType, "admin", payload));
  await alarmNow(cx.storage);
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
  await alarmNow(cx.storage);
}

/** Capability: sends the audit outbox to R2 (retried with backoff after a failure, per the outbox's own record). */
export function auditFlush(cx: SessionContext): AlarmCapability {
  return {
    name: "audit-flush",
    nextAlarmAt: (now) => nextFlushAt(cx.sql, now),
    onAlarm: async () => {
      const session = readSession(cx.sql);
      if (!session) return;
      await flushAudit({
        sql: cx.sql,
        storage: cx.storage,
        bucket: cx.env.AUDIT,
        stream: cx.objectId,
        agentId: session.agentId,
        onFirstSegment: (day) => recordAuditStream(cx.env.DB, session.agentId, day, cx.objectId),
      });
    },
  };
}
