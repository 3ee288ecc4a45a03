/**
 * Audit events (S3 §3): `event_id, event_type, ts, run_id, agent_id, actor, seq, payload, redactions`,
 * redacted before they are written — `redactions` lists the JSON paths whose values were replaced.
 * Run lifecycle events (S3 §2) become audit events one for one (same id, type, seq); admin actions on a
 * session (capability changes) are audit events of their own, with `run_id: null`.
 */
import { z } from "zod";
import type { RunEvent } from "../runs/events";
import { redactJson } from "../security/redact";

export const AuditEvent = z.strictObject({
  event_id: z.string().min(1),
  event_type: z.string().regex(/^[a-z]+(\.[a-z_]+)+$/),
  ts: z.iso.datetime(),
  run_id: z.string().min(1).nullable(),
  agent_id: z.string().min(1),
  actor: z.string().min(1),
  seq: z.int().positive(),
  payload: z.record(z.string(), z.unknown()),
  redactions: z.array(z.string()),
});
export type AuditEvent = z.infer<typeof AuditEvent>;

/** The audit form of a lifecycle event, redacted. */
export function auditFromRunEvent(e: RunEvent, actor: string, secrets: readonly string[]): AuditEvent {
  const { value, paths } = redactJson(e.payload, secrets, "payload");
  return {
    event_id: e.event_id,
    event_type: e.event_type,
    ts: e.ts,
    run_id: e.run_id,
    agent_id: e.agent_id,
    actor,
    seq: e.seq,
    payload: value as Record<string, unknown>,
    redactions: paths,
  };
}

/** An audit event outside a run's lifecycle: an admin action, a scheduler job change, a run's notification. */
export function auditEvent(
  e: { event_type: string; agent_id: string; actor: string; seq: number; payload: Record<string, unknown>; now?: Date; run_id?: string },
  secrets: readonly string[],
): AuditEvent {
  const { value, paths } = redactJson(e.payload, secrets, "payload");
  return {
    event_id: `evt_${crypto.randomUUID().replaceAll("-", "")}`,
    event_type: e.event_type,
    ts: (e.now ?? new Date()).toISOString(),
    run_id: e.run_id ?? null,
    agent_id: e.agent_id,
    actor: e.actor,
    seq: e.seq,
    payload: value as Record<string, unknown>,
    redactions: paths,
  };
}
