/**
 * Minted sandbox tokens and their revocation (issue 20 §5): the mint route records each token's id (never the
 * token), an admin revokes one by id, and every tool callback asks here whether the token it carries was
 * revoked. There is no per-isolate cache — a revocation holds from the next callback on, in every isolate.
 * Tokens minted before this table existed are not in it: they cannot be revoked one by one (they expire, or
 * SANDBOX_TOKEN_SECRET is rotated).
 */

/** A minted token as the admin API shows it. */
export interface SandboxTokenRecord {
  token_id: string;
  session_id: string;
  expires_at: string;
  revoked_at: string | null;
}

/** How long a row outlives its token's expiry before it is purged (a revocation is moot by then). */
const PURGE_AFTER_SECONDS = 86_400;

/** Records a minted token (and purges rows of tokens long expired). */
export async function recordMintedToken(
  db: D1Database,
  t: { tokenId: string; sessionId: string; mintedAt: Date; expiresAtSeconds: number },
): Promise<void> {
  const nowSeconds = Math.floor(t.mintedAt.getTime() / 1000);
  await db.batch([
    db.prepare("DELETE FROM sandbox_tokens WHERE expires_at < ?1").bind(nowSeconds - PURGE_AFTER_SECONDS),
    db
      .prepare("INSERT INTO sandbox_tokens (token_id, session_id, minted_at, expires_at) VALUES (?1, ?2, ?3, ?4)")
      .bind(t.tokenId, t.sessionId, t.mintedAt.toISOString(), t.expiresAtSeconds),
  ]);
}

/**
 * Revokes a token by id (idempotent: a second call keeps the first time; `fresh` says whether this call revoked
 * it); null when no such token was minted.
 */
export async function revokeSandboxToken(
  db: D1Database,
  tokenId: string,
  now: Date,
): Promise<(SandboxTokenRecord & { revoked_at: string; fresh: boolean }) | null> {
  const row = await db
    .prepare(
      `UPDATE sandbox_tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE token_id = ?1
       RETURNING token_id, session_id, expires_at, revoked_at`,
    )
    .bind(tokenId, now.toISOString())
    .first<{ token_id: string; session_id: string; expires_at: number; revoked_at: string }>();
  return row ? { ...row, expires_at: new Date(row.expires_at * 1000).toISOString(), fresh: row.revoked_at === now.toISOString() } : null;
}

/** Whether the token with this id was revoked (a token never recorded was not). */
export async function sandboxTokenRevoked(db: D1Database, tokenId: string): Promise<boolean> {
  const row = await db
    .prepare("SELECT revoked_at FROM sandbox_tokens WHERE token_id = ?1")
    .bind(tokenId)
    .first<{ revoked_at: string | null }>();
  return row?.revoked_at != null;
}
