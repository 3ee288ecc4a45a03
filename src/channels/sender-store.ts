/**
 * The D1 side of channel sender policies (issue 24 §3, D-074; migrations/0017_channel_senders.sql): which senders
 * an admin paired, how many messages each refused sender sent, the once-per-window answer to a refused sender, and
 * the pairing codes. Every write that races (two deliveries at once, two approvals at once) is one statement or one
 * batch, so the claim, the code and the approval each happen once.
 */

/** A pending pairing code as the admin API lists it. */
export interface PairingRow {
  code: string;
  agent_id: string;
  channel: string;
  sender: string;
  created_at: string;
  expires_at: string;
}

/** A refused or paired sender as the admin API lists it. */
export interface SenderRow {
  agent_id: string;
  channel: string;
  sender: string;
  refused: number;
  last_refused_at: string | null;
  paired_at: string | null;
}

/** Who: one sender of one agent's channel. */
export interface SenderKey {
  agentId: string;
  channel: string;
  sender: string;
}

/** How long an expired, unapproved code is kept (an approval then answers 410 rather than 404). */
const PURGE_AFTER_MS = 86_400_000;

/** Whether an admin approved a pairing for this sender. */
export async function senderPaired(db: D1Database, k: SenderKey): Promise<boolean> {
  const row = await db
    .prepare("SELECT paired_at FROM channel_senders WHERE agent_id = ?1 AND channel = ?2 AND sender = ?3")
    .bind(k.agentId, k.channel, k.sender)
    .first<{ paired_at: string | null }>();
  return row?.paired_at != null;
}

/**
 * Counts one refused message and claims the answer to it when none was given in the last `windowMs`: true for
 * exactly one of any number of concurrent deliveries in a window (the claim is a random token set in the same
 * statement that counts). `codePending`: the sender holds a pairing code that is neither approved nor expired — read
 * in the same statement, so a refusal inside the window can say so without another D1 call.
 */
export async function countRefusal(
  db: D1Database,
  k: SenderKey,
  nowMs: number,
  windowMs: number,
): Promise<{ claim: string | null; codePending: boolean }> {
  const claim = crypto.randomUUID();
  const row = await db
    .prepare(
      `INSERT INTO channel_senders (agent_id, channel, sender, refused, last_refused_at, replied_at, reply_claim)
       VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6)
       ON CONFLICT (agent_id, channel, sender) DO UPDATE SET
         refused = refused + 1,
         last_refused_at = excluded.last_refused_at,
         replied_at = CASE WHEN replied_at IS NULL OR replied_at <= ?7 THEN excluded.replied_at ELSE replied_at END,
         reply_claim = CASE WHEN replied_at IS NULL OR replied_at <= ?7 THEN excluded.reply_claim ELSE reply_claim END
       RETURNING reply_claim,
         EXISTS (SELECT 1 FROM channel_pairings p WHERE p.agent_id = ?1 AND p.channel = ?2 AND p.sender = ?3
                 AND p.approved_at IS NULL AND p.expires_at > ?5) AS code_pending`,
    )
    .bind(k.agentId, k.channel, k.sender, new Date(nowMs).toISOString(), nowMs, claim, nowMs - windowMs)
    .first<{ reply_claim: string | null; code_pending: number }>();
  return { claim: row?.reply_claim === claim ? claim : null, codePending: row?.code_pending === 1 };
}

/** Gives back a claimed answer that could not be sent, so the sender's next message is answered. */
export async function releaseClaim(db: D1Database, k: SenderKey, claim: string): Promise<void> {
  await db
    .prepare(
      "UPDATE channel_senders SET replied_at = NULL, reply_claim = NULL WHERE agent_id = ?1 AND channel = ?2 AND sender = ?3 AND reply_claim = ?4",
    )
    .bind(k.agentId, k.channel, k.sender, claim)
    .run();
}

/**
 * The sender's pending pairing code: the one still valid if there is one, else `fresh` (recorded, valid `ttlMs`).
 * Null only if `fresh` collided with another sender's code (the caller tries again later).
 */
export async function pendingCode(db: D1Database, k: SenderKey, fresh: string, nowMs: number, ttlMs: number): Promise<string | null> {
  const [, , , found] = await db.batch([
    // Codes nobody approved are kept a day past expiry (an approval then says 410, not 404), then dropped.
    db.prepare("DELETE FROM channel_pairings WHERE approved_at IS NULL AND expires_at <= ?1").bind(nowMs - PURGE_AFTER_MS),
    db
      .prepare(
        "DELETE FROM channel_pairings WHERE agent_id = ?1 AND channel = ?2 AND sender = ?3 AND approved_at IS NULL AND expires_at <= ?4",
      )
      .bind(k.agentId, k.channel, k.sender, nowMs),
    db
      .prepare(
        "INSERT OR IGNORE INTO channel_pairings (code, agent_id, channel, sender, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
      )
      .bind(fresh, k.agentId, k.channel, k.sender, nowMs, nowMs + ttlMs),
    db
      .prepare("SELECT code FROM channel_pairings WHERE agent_id = ?1 AND channel = ?2 AND sender = ?3 AND approved_at IS NULL")
      .bind(k.agentId, k.channel, k.sender),
  ]);
  return (found?.results[0] as { code?: string } | undefined)?.code ?? null;
}

/** What approving a code did: `approved` (the sender is now allowed), or why nothing changed. */
export type ApproveOutcome =
  | { status: "approved"; pairing: PairingRow & { approved_at: string } }
  | { status: "unknown" | "used" | "expired" };

/** Approves a pending, unexpired code once: its sender becomes paired for the code's agent and channel. */
export async function approvePairing(db: D1Database, code: string, now: Date): Promise<ApproveOutcome> {
  const at = now.toISOString();
  const [updated] = await db.batch([
    db
      .prepare(
        `UPDATE channel_pairings SET approved_at = ?2 WHERE code = ?1 AND approved_at IS NULL AND expires_at > ?3
         RETURNING code, agent_id, channel, sender, created_at, expires_at`,
      )
      .bind(code, at, now.getTime()),
    db
      .prepare(
        `INSERT INTO channel_senders (agent_id, channel, sender, paired_at)
         SELECT agent_id, channel, sender, approved_at FROM channel_pairings WHERE code = ?1 AND approved_at = ?2
         ON CONFLICT (agent_id, channel, sender) DO UPDATE SET paired_at = excluded.paired_at`,
      )
      .bind(code, at),
  ]);
  const row = updated?.results[0] as { created_at: number; expires_at: number } | undefined;
  if (row) {
    const pairing = { ...(row as unknown as PairingRow), approved_at: at };
    return { status: "approved", pairing: { ...pairing, created_at: iso(row.created_at), expires_at: iso(row.expires_at) } };
  }
  const existing = await db
    .prepare("SELECT approved_at, expires_at FROM channel_pairings WHERE code = ?1")
    .bind(code)
    .first<{ approved_at: string | null; expires_at: number }>();
  if (!existing) return { status: "unknown" };
  return { status: existing.approved_at !== null ? "used" : "expired" };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Pending, unexpired pairing codes, oldest first (at most `limit`), optionally of one agent. */
export async function pendingPairings(db: D1Database, nowMs: number, limit: number, agentId?: string): Promise<PairingRow[]> {
  const { results } = await db
    .prepare(
      `SELECT code, agent_id, channel, sender, created_at, expires_at FROM channel_pairings
       WHERE approved_at IS NULL AND expires_at > ?1 AND (?2 IS NULL OR agent_id = ?2) ORDER BY created_at, code LIMIT ?3`,
    )
    .bind(nowMs, agentId ?? null, limit)
    .all<{ code: string; agent_id: string; channel: string; sender: string; created_at: number; expires_at: number }>();
  return results.map((r) => ({ ...r, created_at: iso(r.created_at), expires_at: iso(r.expires_at) }));
}

/** A refused sender's row is kept this long after its last refusal (D-083); a paired sender's row is kept for good. */
export const SENDER_RETENTION_MS = 30 * 86_400_000;
/** Rows one prune pass deletes at most: a huge backlog goes over several cron ticks, each statement short. */
export const SENDER_PRUNE_LIMIT = 1_000;

/**
 * Deletes up to `limit` refused senders' rows whose last refusal is older than `SENDER_RETENTION_MS`, oldest first;
 * returns how many. Never a paired row (`paired_at` is the sender's permission), and never a row whose answer claim
 * is still inside `windowMs` (its once-per-window answer still holds). One statement, so a concurrent refusal (which
 * moves `last_refused_at` forward) or approval (which sets `paired_at`) is either seen or keeps the row.
 */
export async function pruneRefusedSenders(db: D1Database, nowMs: number, windowMs: number, limit = SENDER_PRUNE_LIMIT): Promise<number> {
  const r = await db
    .prepare(
      `DELETE FROM channel_senders WHERE rowid IN (
         SELECT rowid FROM channel_senders
         WHERE paired_at IS NULL AND last_refused_at < ?1 AND (replied_at IS NULL OR replied_at <= ?2)
         ORDER BY last_refused_at LIMIT ?3)`,
    )
    .bind(new Date(nowMs - SENDER_RETENTION_MS).toISOString(), nowMs - windowMs, limit)
    .run();
  return r.meta.changes ?? 0;
}

/** Refused and paired senders, most recently refused first (at most `limit`), optionally of one agent. */
export async function listSenders(db: D1Database, limit: number, agentId?: string): Promise<SenderRow[]> {
  const { results } = await db
    .prepare(
      `SELECT agent_id, channel, sender, refused, last_refused_at, paired_at FROM channel_senders
       WHERE (?1 IS NULL OR agent_id = ?1) ORDER BY last_refused_at DESC, agent_id, channel, sender LIMIT ?2`,
    )
    .bind(agentId ?? null, limit)
    .all<SenderRow>();
  return results;
}
