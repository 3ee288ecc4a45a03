/**
 * The audit outbox of a SessionDO (DESIGN §1): audit events are inserted in the same storage transaction as
 * the state change they describe, then flushed — from the shipping pass, in batches — to create-only R2 segments.
 * A segment's key is derived from what is durable (day, counter, first event's time), so a pass repeated after a
 * crash prepares the same key and adopts what the first attempt wrote: nothing is recorded before the put, and a
 * repeated flush can neither lose nor duplicate an event (D-064). A failing R2 write leaves everything in place and
 * is recorded (`audit_pending`: the segment's exact bytes) and retried with exponential backoff.
 */
import type { Sql } from "../storage/sql";
import type { AuditEvent } from "./event";
import { GENESIS, type SegmentHeader, segmentBody, segmentKey, segmentSha256 } from "./segments";

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

/** A segment ready to put: prepared from the outbox, or the one a failed put recorded in `audit_pending`. */
interface Segment {
  day: string;
  key: string;
  body: string;
  counter: number;
  sha256: string;
  /** The outbox rows it carries: every row of `day` from the first to the last (a segment takes them in order). */
  first: number;
  last: number;
  events: number;
  /** The SHA-256 of the segment before it (its header's `prev_sha256`). */
  prev: string;
  attempts: number;
  /** Whether `audit_pending` holds it (to be removed once it is written). */
  recorded: boolean;
}

/**
 * What one shipping pass put to R2, in order, and the put that failed (nothing after it is tried: a stream's
 * segments chain). Nothing of it is in SQLite yet: `recordAuditShipment` writes it in the pass's one commit.
 */
export interface AuditShipment {
  written: Segment[];
  failed: { segment: Segment; retryAt: number } | null;
  /** When the next attempt is due: after this failure, or a recorded one not due yet; null when nothing waits. */
  retryAt: number | null;
}

/** Segments one pass prepares at most (more events wait for the next pass, due at once). */
const MAX_SEGMENTS_PER_PASS = 8;

type OutboxRow = { seq: number; day: string; event: string };

/**
 * Puts waiting events to R2, segment by segment, and writes nothing to SQLite (issue 23: the caller records the
 * result in one commit with the rest of its pass). No record is needed before a put: a segment's key is derived
 * from what is durable — its day, its counter (the day's head + 1) and its first event's time — so a pass that
 * crashed after its put and is done again prepares the same key, finds the object there, and adopts it
 * (`putSegment`): the same events, once.
 */
export async function putAuditSegments(o: {
  sql: Sql;
  bucket: R2Bucket;
  stream: string;
  agentId: string;
  now?: () => number;
}): Promise<AuditShipment> {
  const { sql } = o;
  const now = o.now ?? (() => Date.now());
  const out: AuditShipment = { written: [], failed: null, retryAt: null };
  const heads = new Map<string, { counter: number; sha256: string }>();
  const pending = sql.one<PendingRow & Record<string, SqlStorageValue>>`SELECT * FROM audit_pending WHERE id = 1`;
  const taken = new Set<number>();
  if (pending) {
    if (pending.next_attempt_at > now()) return { ...out, retryAt: pending.next_attempt_at };
    const seqs = JSON.parse(pending.seqs) as number[];
    const header = (JSON.parse(pending.body.slice(0, pending.body.indexOf("\n"))) as SegmentHeader).segment;
    const segment: Segment = {
      ...pending,
      first: Math.min(...seqs),
      last: Math.max(...seqs),
      events: header.events,
      prev: header.prev_sha256,
      recorded: true,
    };
    if (!(await tryPut(o, segment, [], out, now))) return out;
    heads.set(segment.day, { counter: segment.counter, sha256: segment.sha256 });
    for (let seq = segment.first; seq <= segment.last; seq++) taken.add(seq);
  }
  const rows = sql.all<OutboxRow & Record<string, SqlStorageValue>>`
    SELECT seq, day, event FROM audit_outbox ORDER BY seq LIMIT ${MAX_SEGMENT_EVENTS * (MAX_SEGMENTS_PER_PASS + 1)}`;
  for (let n = 0; n < MAX_SEGMENTS_PER_PASS; n++) {
    const left = rows.filter((r) => !taken.has(r.seq));
    const day = left[0]?.day;
    if (day === undefined) break;
    const chunk = left.filter((r) => r.day === day).slice(0, MAX_SEGMENT_EVENTS);
    const head = heads.get(day) ?? auditHead(sql, day);
    const segment = await prepare(o, day, head, chunk);
    if (!(await tryPut(o, segment, chunk, out, now))) return out;
    const done = out.written[out.written.length - 1] as Segment;
    heads.set(day, { counter: done.counter, sha256: done.sha256 });
    for (const r of chunk) if (r.seq <= done.last) taken.add(r.seq);
  }
  return out;
}

/** Records a pass's shipment (call inside its transaction): written events leave the outbox, heads move, a failure backs off. */
export function recordAuditShipment(sql: Sql, s: AuditShipment): void {
  for (const seg of s.written) {
    sql.run`DELETE FROM audit_outbox WHERE day = ${seg.day} AND seq >= ${seg.first} AND seq <= ${seg.last}`;
    sql.run`INSERT INTO audit_heads (day, counter, sha256) VALUES (${seg.day}, ${seg.counter}, ${seg.sha256})
            ON CONFLICT (day) DO UPDATE SET counter = excluded.counter, sha256 = excluded.sha256`;
    if (seg.recorded) sql.run`DELETE FROM audit_pending WHERE id = 1`;
  }
  if (!s.failed) return;
  const { segment: f, retryAt } = s.failed;
  const seqs = JSON.stringify(Array.from({ length: f.last - f.first + 1 }, (_, i) => f.first + i));
  sql.run`INSERT OR REPLACE INTO audit_pending (id, day, key, body, counter, sha256, seqs, attempts, next_attempt_at)
          VALUES (1, ${f.day}, ${f.key}, ${f.body}, ${f.counter}, ${f.sha256}, ${seqs}, ${f.attempts + 1}, ${retryAt})`;
}

type PendingRow = {
  day: string;
  key: string;
  body: string;
  counter: number;
  sha256: string;
  seqs: string;
  attempts: number;
  next_attempt_at: number;
};

/** The next segment of `day`: its chunk of rows after `head`, keyed by its first event's time (durable: no record needed). */
async function prepare(
  o: { stream: string; agentId: string },
  day: string,
  head: { counter: number; sha256: string },
  chunk: OutboxRow[],
): Promise<Segment> {
  const events = chunk.map((r) => JSON.parse(r.event) as AuditEvent);
  const counter = head.counter + 1;
  const body = segmentBody({ stream: o.stream, counter, prev_sha256: head.sha256, events: events.length }, events);
  const firstAt = Date.parse(events[0]?.ts ?? "") || 0;
  return {
    day,
    key: segmentKey(o.agentId, day, firstAt, o.stream, counter),
    body,
    counter,
    sha256: await segmentSha256(body),
    first: (chunk[0] as OutboxRow).seq,
    last: (chunk[chunk.length - 1] as OutboxRow).seq,
    events: chunk.length,
    prev: head.sha256,
    attempts: 0,
    recorded: false,
  };
}

/** Puts `segment`, adding it to `out.written`; after a failure notes it (with its backoff) in `out` and answers false. */
async function tryPut(
  o: { bucket: R2Bucket; stream: string },
  segment: Segment,
  chunk: readonly OutboxRow[],
  out: AuditShipment,
  now: () => number,
): Promise<boolean> {
  try {
    out.written.push(await putSegment(o.bucket, o.stream, segment, chunk));
    return true;
  } catch {
    const retryAt = now() + Math.min(MAX_BACKOFF_MS, 1000 * 2 ** segment.attempts);
    out.failed = { segment, retryAt };
    out.retryAt = retryAt;
    return false;
  }
}

/**
 * Create-only put. A key already there is an earlier attempt whose answer was lost (the very bytes), or — after a
 * crash before the pass's commit — one prepared when fewer events of the day waited: it is adopted when it is
 * exactly the segment of this counter and head made of the first of these rows. Anything else throws (kept, retried).
 */
async function putSegment(bucket: R2Bucket, stream: string, seg: Segment, chunk: readonly OutboxRow[]): Promise<Segment> {
  const written = await bucket.put(seg.key, seg.body, {
    onlyIf: { etagDoesNotMatch: "*" },
    httpMetadata: { contentType: "application/x-ndjson" },
  });
  if (written !== null) return seg;
  const existing = await bucket.get(seg.key);
  const text = existing ? await existing.text() : null;
  if (text !== null && (await segmentSha256(text)) === seg.sha256) return seg;
  const adopted = text === null ? null : await adopt(stream, seg, chunk, text);
  if (!adopted) throw new Error("segment key holds other content");
  return adopted;
}

/** `text` as this segment's earlier, shorter version: same stream, counter and head, the first `events` rows; or null. */
async function adopt(stream: string, seg: Segment, chunk: readonly OutboxRow[], text: string): Promise<Segment | null> {
  let header: SegmentHeader["segment"];
  try {
    header = (JSON.parse(text.slice(0, text.indexOf("\n"))) as SegmentHeader).segment;
  } catch {
    return null;
  }
  const n = header?.events;
  if (!Number.isInteger(n) || n < 1 || n > chunk.length) return null;
  const rows = chunk.slice(0, n);
  const events = rows.map((r) => JSON.parse(r.event) as AuditEvent);
  const expected = segmentBody({ stream, counter: seg.counter, prev_sha256: seg.prev, events: n }, events);
  if (expected !== text) return null;
  return { ...seg, body: text, sha256: await segmentSha256(text), events: n, last: (rows[n - 1] as OutboxRow).seq };
}
