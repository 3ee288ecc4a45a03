/**
 * The audit outbox of a SessionDO (DESIGN §1): audit events are inserted in the same storage transaction as
 * the state change they describe, then flushed — from the alarm, in batches — to create-only R2 segments.
 * A segment is prepared (key, bytes, hash) and recorded before it is written, so a retry writes the very same
 * object: a failed or repeated flush can neither lose nor duplicate an event. A failing R2 write leaves
 * everything in place and is retried with exponential backoff.
 */
import type { Sql } from "../storage/sql";
import type { AuditEvent } from "./event";
import { GENESIS, segmentBody, segmentKey, segmentSha256 } from "./segments";

/** Events per segment, at most. */
export const MAX_SEGMENT_EVENTS = 500;
const MAX_BACKOFF_MS = 5 * 60_000;

export function enqueueAudit(sql: Sql, event: AuditEvent): void {
  sql.run`INSERT INTO audit_outbox (day, event) VALUES (${event.ts.slice(0, 10)}, ${JSON.stringify(event)})`;
}

export function outboxSize(sql: Sql): number {
  return sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM audit_outbox`?.n ?? 0;
}

/** When the next flush attempt is due: now if events wait, later after a failure, null if nothing waits. */
export function nextFlushAt(sql: Sql, now: number): number | null {
  const pending = sql.one<{ next_attempt_at: number }>`SELECT next_attempt_at FROM audit_pending WHERE id = 1`;
  if (pending) return Math.max(now, pending.next_attempt_at);
  return outboxSize(sql) > 0 ? now : null;
}

export function auditHead(sql: Sql, day: string): { counter: number; sha256: string } {
  return (
    sql.one<{ counter: number; sha256: string }>`SELECT counter, sha256 FROM audit_heads WHERE day = ${day}` ?? {
      counter: 0,
      sha256: GENESIS,
    }
  );
}

type Pending = {
  day: string;
  key: string;
  body: string;
  counter: number;
  sha256: string;
  seqs: string;
  attempts: number;
  next_attempt_at: number;
};

/**
 * Writes waiting events to R2, segment by segment. Returns what was flushed and, after a failure, when to
 * try again. `onFirstSegment` is told when a stream writes its first segment of a day (for the stream index).
 */
export async function flushAudit(o: {
  sql: Sql;
  storage: DurableObjectStorage;
  bucket: R2Bucket;
  stream: string;
  agentId: string;
  now?: () => number;
  onFirstSegment?: (day: string) => Promise<void>;
}): Promise<{ flushed: number; retryAt: number | null }> {
  const { sql, storage } = o;
  const now = o.now ?? (() => Date.now());
  let flushed = 0;
  for (;;) {
    let pending = sql.one<Pending & Record<string, SqlStorageValue>>`SELECT * FROM audit_pending WHERE id = 1`;
    if (!pending) {
      const oldest = sql.one<{ day: string }>`SELECT day FROM audit_outbox ORDER BY seq LIMIT 1`;
      if (!oldest) return { flushed, retryAt: null };
      const rows = sql.all<{ seq: number; event: string }>`
        SELECT seq, event FROM audit_outbox WHERE day = ${oldest.day} ORDER BY seq LIMIT ${MAX_SEGMENT_EVENTS}`;
      const head = auditHead(sql, oldest.day);
      const counter = head.counter + 1;
      const body = segmentBody(
        { stream: o.stream, counter, prev_sha256: head.sha256, events: rows.length },
        rows.map((r) => JSON.parse(r.event) as AuditEvent),
      );
      const prepared: Pending = {
        day: oldest.day,
        key: segmentKey(o.agentId, oldest.day, now(), o.stream, counter),
        body,
        counter,
        sha256: await segmentSha256(body),
        seqs: JSON.stringify(rows.map((r) => r.seq)),
        attempts: 0,
        next_attempt_at: 0,
      };
      sql.run`INSERT INTO audit_pending (id, day, key, body, counter, sha256, seqs, attempts, next_attempt_at)
              VALUES (1, ${prepared.day}, ${prepared.key}, ${prepared.body}, ${prepared.counter}, ${prepared.sha256}, ${prepared.seqs}, 0, 0)`;
      pending = prepared as Pending & Record<string, SqlStorageValue>;
    }
    if (pending.next_attempt_at > now()) return { flushed, retryAt: pending.next_attempt_at };
    try {
      const written = await o.bucket.put(pending.key, pending.body, {
        onlyIf: { etagDoesNotMatch: "*" },
        httpMetadata: { contentType: "application/x-ndjson" },
      });
      if (written === null) {
        // The key exists: an earlier attempt wrote it and its confirmation was lost — or someone else did.
        const existing = await o.bucket.get(pending.key);
        if (!existing || (await segmentSha256(await existing.text())) !== pending.sha256)
          throw new Error("segment key holds other content");
      }
    } catch {
      const attempts = pending.attempts + 1;
      const retryAt = now() + Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (attempts - 1));
      sql.run`UPDATE audit_pending SET attempts = ${attempts}, next_attempt_at = ${retryAt} WHERE id = 1`;
      return { flushed, retryAt };
    }
    const seqs = JSON.parse(pending.seqs) as number[];
    const done = pending;
    storage.transactionSync(() => {
      for (const seq of seqs) sql.run`DELETE FROM audit_outbox WHERE seq = ${seq}`;
      sql.run`INSERT INTO audit_heads (day, counter, sha256) VALUES (${done.day}, ${done.counter}, ${done.sha256})
              ON CONFLICT (day) DO UPDATE SET counter = excluded.counter, sha256 = excluded.sha256`;
      sql.run`DELETE FROM audit_pending WHERE id = 1`;
    });
    flushed += seqs.length;
    if (done.counter === 1) await o.onFirstSegment?.(done.day).catch(() => {});
  }
}
