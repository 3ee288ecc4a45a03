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
 *
 * Issue 25 §1 (D-077): a run of an API key record with `limits.tokensPerDay` reserves the key's row too
 * (`api_key_token_usage`, across every agent of the key), in the same batch: the key's row is the one whose
 * conditional UPDATE checks all three limits, and the caller's and agent's rows are charged only if it took this very
 * reservation — so two sessions (or isolates) spending one key's budget at once never overspend it.
 */

export const utcDay = (now: Date): string => now.toISOString().slice(0, 10);

export type Reservation = { ok: true; reserved: number; day: string } | { ok: false; used: number; limit: number; day: string };

export type CallerReservation =
  | { ok: true; reserved: number; day: string; caller: string | null; keyId?: string }
  | { ok: false; scope: "agent" | "caller" | "key"; used: number; limit: number; day: string };

/** An API key's own daily budget (issue 25 §1). */
export interface KeyBudget {
  keyId: string;
  tokensPerDay: number;
}

/**
 * Reserves `tokens` against the agent's daily limit and, when `callerLimit` is set, `caller`'s own daily limit on
 * the agent, both or neither; a null limit is no limit. Reports which limit refused.
 */
export async function reserveCallerTokens(
  db: D1Database,
  o: { agentId: string; caller: string; tokens: number; agentLimit: number | null; callerLimit: number | null; now: Date; key?: KeyBudget },
): Promise<CallerReservation> {
  if (o.key) return reserveKeyTokens(db, { ...o, key: o.key });
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

/** The three rows (key, caller, agent) reserved together, the key's row checking every limit; reports which refused. */
async function reserveKeyTokens(
  db: D1Database,
  o: { agentId: string; caller: string; tokens: number; agentLimit: number | null; callerLimit: number | null; now: Date; key: KeyBudget },
): Promise<CallerReservation> {
  const day = utcDay(o.now);
  const agentLimit = o.agentLimit ?? Number.MAX_SAFE_INTEGER;
  const callerLimit = o.callerLimit ?? Number.MAX_SAFE_INTEGER;
  const nonce = crypto.randomUUID();
  const results = await db.batch([
    db.prepare("INSERT INTO agent_token_usage (agent_id, day, tokens) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING").bind(o.agentId, day),
    db
      .prepare("INSERT INTO caller_token_usage (agent_id, caller, day, tokens) VALUES (?1, ?2, ?3, 0) ON CONFLICT DO NOTHING")
      .bind(o.agentId, o.caller, day),
    db.prepare("INSERT INTO api_key_token_usage (key_id, day, tokens) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING").bind(o.key.keyId, day),
    db
      .prepare(
        `UPDATE api_key_token_usage SET tokens = tokens + ?4, reservation = ?6
         WHERE key_id = ?5 AND day = ?3 AND tokens + ?4 <= ?7
           AND (SELECT tokens FROM caller_token_usage WHERE agent_id = ?1 AND caller = ?2 AND day = ?3) + ?4 <= ?8
           AND (SELECT tokens FROM agent_token_usage WHERE agent_id = ?1 AND day = ?3) + ?4 <= ?9`,
      )
      .bind(o.agentId, o.caller, day, o.tokens, o.key.keyId, nonce, o.key.tokensPerDay, callerLimit, agentLimit),
    db
      .prepare(
        `UPDATE caller_token_usage SET tokens = tokens + ?4 WHERE agent_id = ?1 AND caller = ?2 AND day = ?3
           AND EXISTS (SELECT 1 FROM api_key_token_usage WHERE key_id = ?5 AND day = ?3 AND reservation = ?6)`,
      )
      .bind(o.agentId, o.caller, day, o.tokens, o.key.keyId, nonce),
    db
      .prepare(
        `UPDATE agent_token_usage SET tokens = tokens + ?3 WHERE agent_id = ?1 AND day = ?2
           AND EXISTS (SELECT 1 FROM api_key_token_usage WHERE key_id = ?4 AND day = ?2 AND reservation = ?5)`,
      )
      .bind(o.agentId, day, o.tokens, o.key.keyId, nonce),
  ]);
  if (results.slice(3).every((r) => (r?.meta.changes ?? 0) === 1))
    return { ok: true, reserved: o.tokens, day, caller: o.caller, keyId: o.key.keyId };
  const agentUsed = await tokensUsed(db, o.agentId, day);
  if (agentUsed + o.tokens > agentLimit) return { ok: false, scope: "agent", used: agentUsed, limit: agentLimit, day };
  const callerUsed = await callerTokensUsed(db, o.agentId, o.caller, day);
  if (callerUsed + o.tokens > callerLimit) return { ok: false, scope: "caller", used: callerUsed, limit: callerLimit, day };
  return { ok: false, scope: "key", used: await keyTokensUsed(db, o.key.keyId, day), limit: o.key.tokensPerDay, day };
}

/** Tokens the API key `keyId` has used (or reserved) on `day`, over every agent. */
export async function keyTokensUsed(db: D1Database, keyId: string, day: string): Promise<number> {
  const row = await db
    .prepare("SELECT tokens FROM api_key_token_usage WHERE key_id = ?1 AND day = ?2")
    .bind(keyId, day)
    .first<{ tokens: number }>();
  return row?.tokens ?? 0;
}

/**
 * Replaces a reservation by the tokens actually used, on the agent's row and (if it had them) the caller's and the
 * key's: one D1 batch, so the rows settle together and the call pays one round trip, not three.
 */
export async function settleCallerTokens(
  db: D1Database,
  agentId: string,
  r: { day: string; reserved: number; caller: string | null; keyId?: string },
  used: number,
): Promise<void> {
  const statements = [settleStatement(db, agentId, r.day, r.reserved, used)];
  if (r.keyId !== undefined)
    statements.push(
      db
        .prepare("UPDATE api_key_token_usage SET tokens = MAX(0, tokens - ?3 + ?4) WHERE key_id = ?1 AND day = ?2")
        .bind(r.keyId, r.day, r.reserved, used),
    );
  if (r.caller !== null)
    statements.push(
      db
        .prepare("UPDATE caller_token_usage SET tokens = MAX(0, tokens - ?4 + ?5) WHERE agent_id = ?1 AND caller = ?2 AND day = ?3")
        .bind(agentId, r.caller, r.day, r.reserved, used),
    );
  if (statements.length === 1) await statements[0]?.run();
  else await db.batch(statements);
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

/** The agent row's settlement: the reservation replaced by the tokens actually used (never below zero). */
function settleStatement(db: D1Database, agentId: string, day: string, reserved: number, used: number): D1PreparedStatement {
  return db
    .prepare("UPDATE agent_token_usage SET tokens = MAX(0, tokens - ?3 + ?4) WHERE agent_id = ?1 AND day = ?2")
    .bind(agentId, day, reserved, used);
}

/** Tokens `agentId` has used (or reserved) on `day`. */
export async function tokensUsed(db: D1Database, agentId: string, day: string): Promise<number> {
  const row = await db
    .prepare("SELECT tokens FROM agent_token_usage WHERE agent_id = ?1 AND day = ?2")
    .bind(agentId, day)
    .first<{ tokens: number }>();
  return row?.tokens ?? 0;
}
