/**
 * The API key records in D1 (migrations/0019_api_keys.sql, D-077): create, list, rotate, revoke, the one read a
 * presented key costs, the last-used stamp, and the per-minute request counter. Every change a running isolate
 * must see (rotate, revoke) bumps the `keys` counter in the same batch (src/storage/admin-generation.ts).
 */
import { bumpKeysGeneration } from "../storage/admin-generation";
import type { StoredSecret } from "./format";

/** Per-key limits; an absent field is no limit of that kind. */
export interface KeyLimits {
  requestsPerMinute?: number;
  tokensPerDay?: number;
}

/** A key record as the admin API shows it (no salt, no hash, never the key). */
export interface KeyRecord {
  key_id: string;
  caller_id: string;
  label: string;
  /** Agent ids the key may use; null = every agent. */
  agents: string[] | null;
  prefix: string;
  created_at: string;
  rotated_at: string | null;
  last_used_at: string | null;
  expires_at: string | null;
  revoked_at: string | null;
  limits: KeyLimits;
  /** Issue 33 (D-087): the admin shared the caller with a GATEWAY_API_TOKENS entry of the same id on purpose. */
  share_caller: boolean;
}

/** A record with what verifying a presented secret needs. */
export interface KeyWithSecret extends KeyRecord {
  salt: string;
  secret_hash: string;
}

interface Row {
  key_id: string;
  caller_id: string;
  label: string;
  agents: string | null;
  prefix: string;
  created_at: string;
  rotated_at: string | null;
  last_used_at: string | null;
  expires_at: string | null;
  revoked_at: string | null;
  requests_per_minute: number | null;
  tokens_per_day: number | null;
  share_caller: number;
  salt: string;
  secret_hash: string;
}

const PUBLIC_COLUMNS =
  "key_id, caller_id, label, agents, prefix, created_at, rotated_at, last_used_at, expires_at, revoked_at, requests_per_minute, tokens_per_day, share_caller";

function toRecord(row: Omit<Row, "salt" | "secret_hash">): KeyRecord {
  const limits: KeyLimits = {};
  if (row.requests_per_minute !== null) limits.requestsPerMinute = row.requests_per_minute;
  if (row.tokens_per_day !== null) limits.tokensPerDay = row.tokens_per_day;
  return {
    key_id: row.key_id,
    caller_id: row.caller_id,
    label: row.label,
    agents: row.agents === null ? null : (JSON.parse(row.agents) as string[]),
    prefix: row.prefix,
    created_at: row.created_at,
    rotated_at: row.rotated_at,
    last_used_at: row.last_used_at,
    expires_at: row.expires_at,
    revoked_at: row.revoked_at,
    limits,
    share_caller: row.share_caller === 1,
  };
}

/** Stores a new key record (its secret already hashed). */
export async function insertKey(
  db: D1Database,
  k: {
    keyId: string;
    callerId: string;
    label: string;
    agents: string[] | null;
    secret: StoredSecret;
    now: Date;
    expiresAt: string | null;
    limits: KeyLimits;
    shareCaller: boolean;
  },
): Promise<KeyRecord> {
  const row = await db
    .prepare(
      `INSERT INTO api_keys (key_id, caller_id, label, agents, salt, secret_hash, prefix, created_at, expires_at,
         requests_per_minute, tokens_per_day, share_caller)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING ${PUBLIC_COLUMNS}`,
    )
    .bind(
      k.keyId,
      k.callerId,
      k.label,
      k.agents === null ? null : JSON.stringify(k.agents),
      k.secret.salt,
      k.secret.secretHash,
      k.secret.prefix,
      k.now.toISOString(),
      k.expiresAt,
      k.limits.requestsPerMinute ?? null,
      k.limits.tokensPerDay ?? null,
      k.shareCaller ? 1 : 0,
    )
    .first<Row>();
  if (!row) throw new Error("the key record was not stored");
  return toRecord(row);
}

/** Key records, newest first, after the keyset position `after` ([created_at, key_id]). */
export async function listKeys(db: D1Database, o: { limit: number; after?: readonly [string, string] }): Promise<KeyRecord[]> {
  const rows = await db
    .prepare(
      `SELECT ${PUBLIC_COLUMNS} FROM api_keys
       WHERE ?1 IS NULL OR created_at < ?1 OR (created_at = ?1 AND key_id < ?2)
       ORDER BY created_at DESC, key_id DESC LIMIT ?3`,
    )
    .bind(o.after?.[0] ?? null, o.after?.[1] ?? null, o.limit)
    .all<Row>();
  return rows.results.map(toRecord);
}

/** The record of `keyId` with its salt and hash (the one read a presented key costs), or null. */
export async function findKey(db: D1Database, keyId: string): Promise<KeyWithSecret | null> {
  const row = await db.prepare(`SELECT ${PUBLIC_COLUMNS}, salt, secret_hash FROM api_keys WHERE key_id = ?1`).bind(keyId).first<Row>();
  return row ? { ...toRecord(row), salt: row.salt, secret_hash: row.secret_hash } : null;
}

/**
 * Replaces the secret of a live key (not revoked; an expired one may be rotated, its expiry stays); null when there
 * is no such live key. The old secret stops working at once here and within ADMIN_REFRESH_MS on other isolates.
 */
export async function rotateKey(db: D1Database, keyId: string, secret: StoredSecret, now: Date): Promise<KeyRecord | null> {
  const [updated] = await db.batch([
    db
      .prepare(
        `UPDATE api_keys SET salt = ?2, secret_hash = ?3, prefix = ?4, rotated_at = ?5
         WHERE key_id = ?1 AND revoked_at IS NULL RETURNING ${PUBLIC_COLUMNS}`,
      )
      .bind(keyId, secret.salt, secret.secretHash, secret.prefix, now.toISOString()),
    bumpKeysGeneration(db),
  ]);
  const row = (updated?.results as Row[] | undefined)?.[0];
  return row ? toRecord(row) : null;
}

/** What an update may change; an absent field stays as it is (`limits` replaces the whole object). */
export interface KeyChanges {
  label?: string;
  agents?: string[] | null;
  expiresAt?: string | null;
  limits?: KeyLimits;
  shareCaller?: boolean;
}

/**
 * Changes a live key's label, agents, expiry, limits or caller sharing (never its caller or secret); null when there is no such live
 * key. Like rotation, it bumps the keys generation: every isolate applies it within ADMIN_REFRESH_MS.
 */
export async function updateKey(db: D1Database, keyId: string, c: KeyChanges): Promise<KeyRecord | null> {
  const has = (v: unknown) => (v === undefined ? 0 : 1);
  const [updated] = await db.batch([
    db
      .prepare(
        `UPDATE api_keys SET
           label = CASE WHEN ?2 THEN ?3 ELSE label END,
           agents = CASE WHEN ?4 THEN ?5 ELSE agents END,
           expires_at = CASE WHEN ?6 THEN ?7 ELSE expires_at END,
           requests_per_minute = CASE WHEN ?8 THEN ?9 ELSE requests_per_minute END,
           tokens_per_day = CASE WHEN ?8 THEN ?10 ELSE tokens_per_day END,
           share_caller = CASE WHEN ?11 THEN ?12 ELSE share_caller END
         WHERE key_id = ?1 AND revoked_at IS NULL RETURNING ${PUBLIC_COLUMNS}`,
      )
      .bind(
        keyId,
        has(c.label),
        c.label ?? null,
        has(c.agents),
        c.agents ? JSON.stringify(c.agents) : null,
        has(c.expiresAt),
        c.expiresAt ?? null,
        has(c.limits),
        c.limits?.requestsPerMinute ?? null,
        c.limits?.tokensPerDay ?? null,
        has(c.shareCaller),
        c.shareCaller ? 1 : 0,
      ),
    bumpKeysGeneration(db),
  ]);
  const row = (updated?.results as Row[] | undefined)?.[0];
  return row ? toRecord(row) : null;
}

/** Revokes a key (idempotent: a second call keeps the first time; `fresh` says whether this call revoked it); null if unknown. */
export async function revokeKey(db: D1Database, keyId: string, now: Date): Promise<(KeyRecord & { fresh: boolean }) | null> {
  const [updated] = await db.batch([
    db
      .prepare(`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE key_id = ?1 RETURNING ${PUBLIC_COLUMNS}`)
      .bind(keyId, now.toISOString()),
    bumpKeysGeneration(db),
  ]);
  const row = (updated?.results as Row[] | undefined)?.[0];
  return row ? { ...toRecord(row), fresh: row.revoked_at === now.toISOString() } : null;
}

/** Stamps `last_used_at`, unless another isolate did within `minIntervalMs` (at most once a minute per key). */
export async function touchKey(db: D1Database, keyId: string, now: Date, minIntervalMs: number): Promise<void> {
  await db
    .prepare("UPDATE api_keys SET last_used_at = ?2 WHERE key_id = ?1 AND (last_used_at IS NULL OR last_used_at <= ?3)")
    .bind(keyId, now.toISOString(), new Date(now.getTime() - minIntervalMs).toISOString())
    .run();
}

/**
 * Counts one request of `keyId` in the current minute and says whether it fits `limit`: one upsert, atomic in D1,
 * so N concurrent requests admit exactly `limit` of them (a refused request is not counted).
 */
export async function admitKeyRequest(db: D1Database, keyId: string, limit: number, nowMs: number): Promise<boolean> {
  const minute = Math.floor(nowMs / 60_000);
  const row = await db
    .prepare(
      `INSERT INTO api_key_requests (key_id, minute, count) VALUES (?1, ?2, 1)
       ON CONFLICT (key_id) DO UPDATE SET count = CASE WHEN minute = ?2 THEN count + 1 ELSE 1 END, minute = ?2
         WHERE minute <> ?2 OR count < ?3
       RETURNING count`,
    )
    .bind(keyId, minute, limit)
    .first<{ count: number }>();
  return row !== null;
}
