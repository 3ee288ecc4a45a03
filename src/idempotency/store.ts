/**
 * The durable idempotency store (DESIGN "Idempotency"; S5 §Gateway Callback
 * Contract and §6.3, with S5 §9's two limitations fixed: it is durable, and
 * keys are scoped). Pure functions over a Durable Object's SQLite:
 *
 *   (scope, key) → request hash, status (`in_flight` | `done`), the stored response, expiry
 *
 * - `begin` records a key as in flight before the work starts — in its own
 *   committed write, so an eviction or crash afterwards still finds it;
 * - the same key again: in flight → the caller waits for (or is refused with)
 *   the first one's answer; done within the retention → the stored response is
 *   replayed; a different request under the same key → `mismatch`;
 * - `complete` stores the answer with its expiry; `abandon` forgets a key whose
 *   work failed before it could have had an effect (so a retry may run it);
 * - a `done` row past its expiry counts as absent (the key may be used again)
 *   and `purgeExpired` removes such rows a batch at a time.
 *
 * Scopes name what the key is for: `tool:<canonical tool name>` for tool calls
 * (S5 `tool_call_id`, one session per Durable Object), `http:<route>` for the
 * `Idempotency-Key` header. Responses are stored as text (JSON), redacted by
 * the caller.
 */
import type { Sql } from "../storage/sql";

export const IDEMPOTENCY_SCHEMA = `CREATE TABLE idempotency (
     scope TEXT NOT NULL,
     key TEXT NOT NULL,
     request_sha256 TEXT NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('in_flight', 'done')),
     response TEXT,
     created_at INTEGER NOT NULL,
     completed_at INTEGER,
     expires_at INTEGER,
     PRIMARY KEY (scope, key)
   ) WITHOUT ROWID;
   CREATE INDEX idempotency_expiry ON idempotency (expires_at) WHERE status = 'done';`;

export type Begin =
  /** Recorded as in flight: do the work, then `complete` (or `abandon`). */
  | { kind: "new" }
  /** Done within the retention: answer with this. */
  | { kind: "replay"; response: string; completedAt: number }
  /** The first request with this key has not finished. */
  | { kind: "in_flight"; since: number }
  /** The key was used for a different request. */
  | { kind: "mismatch" };

interface Row extends Record<string, SqlStorageValue> {
  request_sha256: string;
  status: "in_flight" | "done";
  response: string | null;
  created_at: number;
  completed_at: number | null;
  expires_at: number | null;
}

/** SHA-256 (hex) of a request, for comparing a repeat with the first use of its key. */
export async function requestHash(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** JSON with object keys sorted at every level: equal values give equal text whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** Looks a key up without writing: what `begin` would answer, or null when the key is free. */
export function peek(sql: Sql, scope: string, key: string, hash: string, now: number): Exclude<Begin, { kind: "new" }> | null {
  const row = sql.one<Row>`SELECT request_sha256, status, response, created_at, completed_at, expires_at
                           FROM idempotency WHERE scope = ${scope} AND key = ${key}`;
  const live = row && !(row.status === "done" && row.expires_at !== null && row.expires_at <= now);
  if (!live) return null;
  if (row.request_sha256 !== hash) return { kind: "mismatch" };
  if (row.status === "in_flight") return { kind: "in_flight", since: row.created_at };
  return { kind: "replay", response: row.response ?? "", completedAt: row.completed_at ?? row.created_at };
}

/** Looks a key up and, when it is free, records it as in flight. Synchronous: call it with nothing awaited in between. */
export function begin(sql: Sql, scope: string, key: string, hash: string, now: number): Begin {
  const found = peek(sql, scope, key, hash, now);
  if (found) return found;
  sql.run`INSERT INTO idempotency (scope, key, request_sha256, status, created_at) VALUES (${scope}, ${key}, ${hash}, 'in_flight', ${now})
          ON CONFLICT (scope, key) DO UPDATE SET request_sha256 = excluded.request_sha256, status = 'in_flight', response = NULL,
            created_at = excluded.created_at, completed_at = NULL, expires_at = NULL`;
  return { kind: "new" };
}

/** Stores the answer of an in-flight key, replayable until `now + retentionMs`. */
export function complete(sql: Sql, scope: string, key: string, response: string, now: number, retentionMs: number): void {
  sql.run`UPDATE idempotency SET status = 'done', response = ${response}, completed_at = ${now}, expires_at = ${now + retentionMs}
          WHERE scope = ${scope} AND key = ${key}`;
}

/** A key's answer recorded at once, for work that kept no in-flight record (as `begin` then `complete`, in one statement). */
export function recordDone(sql: Sql, scope: string, key: string, hash: string, response: string, now: number, retentionMs: number): void {
  sql.run`INSERT INTO idempotency (scope, key, request_sha256, status, response, created_at, completed_at, expires_at)
          VALUES (${scope}, ${key}, ${hash}, 'done', ${response}, ${now}, ${now}, ${now + retentionMs})
          ON CONFLICT (scope, key) DO UPDATE SET request_sha256 = excluded.request_sha256, status = 'done',
            response = excluded.response, created_at = excluded.created_at, completed_at = excluded.completed_at,
            expires_at = excluded.expires_at`;
}

/** Forgets an in-flight key whose work failed before it could have had an effect. */
export function abandon(sql: Sql, scope: string, key: string): void {
  sql.run`DELETE FROM idempotency WHERE scope = ${scope} AND key = ${key} AND status = 'in_flight'`;
}

/** Keys in flight (after a restart: work that was interrupted), oldest first. */
export function inFlight(sql: Sql, limit = 100): { scope: string; key: string; created_at: number }[] {
  return sql.all<{ scope: string; key: string; created_at: number }>`
    SELECT scope, key, created_at FROM idempotency WHERE status = 'in_flight' ORDER BY created_at LIMIT ${limit}`;
}

/** Removes up to `limit` expired answers; returns how many. */
export function purgeExpired(sql: Sql, now: number, limit = 500): number {
  const rows = sql.all<{ scope: string; key: string }>`
    SELECT scope, key FROM idempotency WHERE status = 'done' AND expires_at <= ${now} ORDER BY expires_at LIMIT ${limit}`;
  for (const r of rows) sql.run`DELETE FROM idempotency WHERE scope = ${r.scope} AND key = ${r.key}`;
  return rows.length;
}

/** When the next stored answer expires (for the alarm), or null. */
export function nextExpiry(sql: Sql): number | null {
  return sql.one<{ at: number | null }>`SELECT MIN(expires_at) AS at FROM idempotency WHERE status = 'done'`?.at ?? null;
}
