/**
 * Per-agent token budgets (DESIGN §5): provider tokens per agent per UTC day,
 * in D1 so that every session of the agent draws on the same budget. Before a
 * model call the run reserves its worst case (estimated input + the model's
 * maxOutputTokens) with one conditional UPDATE, so concurrent sessions cannot
 * overspend; after the call it settles to the provider's reported usage.
 * A crash between the two leaves the reservation in place: the budget errs on
 * the side of spending less, never more.
 *
 * Issue 20 §4: with `tokensPerCallerPerDay`, the caller's own row (src/runs/caller.ts) is reserved in the same D1
 * batch — a transaction — and the agent's row is charged only if the caller's row took this very reservation, so
 * neither row moves without the other and one caller cannot spend the agent's whole day for everyone.
 */

export const utcDay = (now: Date): string => now.toISOString().slice(0, 10);

export type Reservation = { ok: true; reserved: number; day: string } | { ok: false; used: number; limit: number; day: string };

export type CallerReservation =
  | { ok: true; reserved: number; day: string; caller: string | null }
  | { ok: false; scope: "agent" | "caller"; used: number; limit: number; day: string };

/**
 * Reserves `tokens` against the agent's daily limit and, when `callerLimit` is set, `caller`'s own daily limit on
 * the agent, both or neither; a null limit is no limit. Reports which limit refused.
 */
export async function reserveCallerTokens(
  db: D1Database,
  o: { agentId: string; caller: string; tokens: number; agentLimit: number | null; callerLimit: number | null; now: Date },
): Promise<CallerReservation> {
  if (o.callerLimit === null) {
    const r = await reserveTokens(db, o.agentId, o.tokens, o.agentLimit ?? Number.MAX_SAFE_INTEGER, o.now);
    return r.ok ? { ...r, caller: null } : { ...r, scope: "agent" };
  }
  const day = utcDay(o.now);
  const agentLimit = o.agentLimit ?? Number.MAX_SAFE_INTEGER;
  const nonce = crypto.randomUUID();
  const [, , mine, agent] = await db.batch([
    db.prepare("INSERT INTO agent_token_usage (agent_id, day, tokens) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING").bind(o.agentId, day),
    db
      .prepare("INSERT INTO caller_token_usage (agent_id, caller, day, tokens) VALUES (?1, ?2, ?3, 0) ON CONFLICT DO NOTHING")
      .bind(o.agentId, o.caller, day),
    db
      .prepare(
        `UPDATE caller_token_usage SET tokens = tokens + ?4, reservation = ?6
         WHERE agent_id = ?1 AND caller = ?2 AND day = ?3 AND tokens + ?4 <= ?5
           AND (SELECT tokens FROM agent_token_usage WHERE agent_id = ?1 AND day = ?3) + ?4 <= ?7`,
      )
      .bind(o.agentId, o.caller, day, o.tokens, o.callerLimit, nonce, agentLimit),
    db
      .prepare(
        `UPDATE agent_token_usage SET tokens = tokens + ?3 WHERE agent_id = ?1 AND day = ?2
           AND EXISTS (SELECT 1 FROM caller_token_usage WHERE agent_id = ?1 AND caller = ?4 AND day = ?2 AND reservation = ?5)`,
      )
      .bind(o.agentId, day, o.tokens, o.caller, nonce),
  ]);
  if ((mine?.meta.changes ?? 0) === 1 && (agent?.meta.changes ?? 0) === 1) return { ok: true, reserved: o.tokens, day, caller: o.caller };
  const agentUsed = await tokensUsed(db, o.agentId, day);
  if (agentUsed + o.tokens > agentLimit) return { ok: false, scope: "agent", used: agentUsed, limit: agentLimit, day };
  return { ok: false, scope: "caller", used: await callerTokensUsed(db, o.agentId, o.caller, day), limit: o.callerLimit, day };
}

/** Replaces a reservation by the tokens actually used, on the agent's row and (if it had one) the caller's. */
export async function settleCallerTokens(
  db: D1Database,
  agentId: string,
  r: { day: string; reserved: number; caller: string | null },
  used: number,
): Promise<void> {
  await settleTokens(db, agentId, r.day, r.reserved, used);
  if (r.caller === null) return;
  await db
    .prepare("UPDATE caller_token_usage SET tokens = MAX(0, tokens - ?4 + ?5) WHERE agent_id = ?1 AND caller = ?2 AND day = ?3")
    .bind(agentId, r.caller, r.day, r.reserved, used)
    .run();
}

/** Tokens `caller` has used (or reserved) of `agentId` on `day`. */
export async function callerTokensUsed(db: D1Database, agentId: string, caller: string, day: string): Promise<number> {
  const row = await db
    .prepare("SELECT tokens FROM caller_token_usage WHERE agent_id = ?1 AND caller = ?2 AND day = ?3")
    .bind(agentId, caller, day)
    .first<{ tokens: number }>();
  return row?.tokens ?? 0;
}

/** Reserves `tokens` of `agentId`'s budget for `now`'s day, or reports what is left. */
export async function reserveTokens(db: D1Database, agentId: string, tokens: number, limit: number, now: Date): Promise<Reservation> {
  const day = utcDay(now);
  const [, update] = await db.batch([
    db.prepare("INSERT INTO agent_token_usage (agent_id, day, tokens) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING").bind(agentId, day),
    db
      .prepare("UPDATE agent_token_usage SET tokens = tokens + ?3 WHERE agent_id = ?1 AND day = ?2 AND tokens + ?3 <= ?4")
      .bind(agentId, day, tokens, limit),
  ]);
  if ((update?.meta.changes ?? 0) === 1) return { ok: true, reserved: tokens, day };
  return { ok: false, used: await tokensUsed(db, agentId, day), limit, day };
}

/** Replaces a reservation by the tokens actually used (never below zero). */
export async function settleTokens(db: D1Database, agentId: string, day: string, reserved: number, used: number): Promise<void> {
  await db
    .prepare("UPDATE agent_token_usage SET tokens = MAX(0, tokens - ?3 + ?4) WHERE agent_id = ?1 AND day = ?2")
    .bind(agentId, day, reserved, used)
    .run();
}

/** Tokens `agentId` has used (or reserved) on `day`. */
export async function tokensUsed(db: D1Database, agentId: string, day: string): Promise<number> {
  const row = await db
    .prepare("SELECT tokens FROM agent_token_usage WHERE agent_id = ?1 AND day = ?2")
    .bind(agentId, day)
    .first<{ tokens: number }>();
  return row?.tokens ?? 0;
}
