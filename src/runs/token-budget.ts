/**
 * Per-agent token budgets (DESIGN §5): provider tokens per agent per UTC day,
 * in D1 so that every session of the agent draws on the same budget. Before a
 * model call the run reserves its worst case (estimated input + the model's
 * maxOutputTokens) with one conditional UPDATE, so concurrent sessions cannot
 * overspend; after the call it settles to the provider's reported usage.
 * A crash between the two leaves the reservation in place: the budget errs on
 * the side of spending less, never more.
 */

export const utcDay = (now: Date): string => now.toISOString().slice(0, 10);

export type Reservation = { ok: true; reserved: number; day: string } | { ok: false; used: number; limit: number; day: string };

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
