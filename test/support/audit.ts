/**
 * The audit outbox flushed on its own, for tests of src/audit/outbox.ts: what the shipping pass does with the audit
 * part of its work (src/sessions/shipping.ts) — put the waiting segments to R2, then record them in one transaction —
 * repeated until nothing more is due. The gateway itself only ever ships the outbox inside a shipping pass.
 */
import { outboxSize, putAuditSegments, recordAuditShipment } from "../../src/audit/outbox";
import type { Sql } from "../../src/storage/sql";

/** Puts and records segments until the outbox is empty, a put fails or a retry is not due yet; what was flushed, when to retry. */
export async function flushAudit(o: {
  sql: Sql;
  storage: DurableObjectStorage;
  bucket: R2Bucket;
  stream: string;
  agentId: string;
  now?: () => number;
}): Promise<{ flushed: number; retryAt: number | null }> {
  let flushed = 0;
  for (;;) {
    const s = await putAuditSegments(o);
    o.storage.transactionSync(() => recordAuditShipment(o.sql, s));
    flushed += s.written.reduce((n, seg) => n + seg.events, 0);
    if (s.failed || s.retryAt !== null || s.written.length === 0 || outboxSize(o.sql) === 0) return { flushed, retryAt: s.retryAt };
  }
}
