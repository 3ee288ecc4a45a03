/**
 * Open event streams per API caller (issue 20 §4, `limits.maxOpenStreamsPerCaller`): leases in the caller's own
 * Durable Object (the IdempotencyDO `api:<callerId>`), so the count holds across isolates. Pure functions over its
 * SQLite, each run inside one synchronous transaction by the object.
 *
 * A lease is held while its stream is open: the stream renews it while it runs and releases it when it ends or
 * its client goes away. A lease nobody renewed for its TTL belongs to an isolate that died mid-stream; it no
 * longer counts and is removed by the next `acquire`, so a crash costs a slot for at most one TTL.
 */
import type { Sql } from "../storage/sql";

/** A lease not renewed for this long belongs to a stream whose isolate died; it stops counting. */
export const STREAM_LEASE_TTL_MS = 60_000;
/** How often a running stream renews its lease (well inside the TTL, so one failed renewal costs nothing). */
export const STREAM_LEASE_RENEW_MS = 20_000;

export const STREAM_LEASES_SCHEMA = `CREATE TABLE stream_lease (
     lease_id TEXT PRIMARY KEY,
     expires_at INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX stream_lease_expiry ON stream_lease (expires_at);`;

export type AcquireResult = { ok: true } | { ok: false; open: number };

/** Takes a slot for `leaseId` until `now + ttlMs` when fewer than `max` live leases are held; expired ones are dropped first. */
export function acquire(sql: Sql, leaseId: string, now: number, max: number, ttlMs: number): AcquireResult {
  sql.run`DELETE FROM stream_lease WHERE expires_at <= ${now}`;
  const held = sql.one<{ expires_at: number }>`SELECT expires_at FROM stream_lease WHERE lease_id = ${leaseId}`;
  if (!held) {
    const open = sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM stream_lease`?.n ?? 0;
    if (open >= max) return { ok: false, open };
  }
  sql.run`INSERT INTO stream_lease (lease_id, expires_at) VALUES (${leaseId}, ${now + ttlMs})
          ON CONFLICT (lease_id) DO UPDATE SET expires_at = excluded.expires_at`;
  return { ok: true };
}

/** Gives a slot back (a no-op for a lease already gone). */
export function release(sql: Sql, leaseId: string): void {
  sql.run`DELETE FROM stream_lease WHERE lease_id = ${leaseId}`;
}
