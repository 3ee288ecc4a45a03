/**
 * Environment requests (S5 `request_env_variables`; issue 21 §2): the store behind the admin routes that list
 * and fulfil them, the sandbox bootstrap's `env` and the run's "keys now available" note.
 *
 * Values are encrypted like admin secrets (src/security/secrets-store.ts `sealValue`), bound to their scope and
 * key. S5's per-key `persist` picks the scope: `session:<id>` (this session only) or `agent:<id>` (every
 * session of the agent — the agent's configuration). No function here returns a value except
 * `sessionEnvValues`, which only the sandbox bootstrap calls.
 */
import { openValue, sealValue } from "../security/secrets-store";

/** One requested key, as `request_env_variables` recorded it (never a value). */
export interface RequestedKey {
  key: string;
  type?: "env" | "secret";
  required?: boolean;
  description?: string;
  suggestions?: string[];
}

/** An env request as admins see it. */
export interface EnvRequestRecord {
  request_id: string;
  agent_id: string;
  session_id: string;
  run_id: string | null;
  keys: RequestedKey[];
  status: "open" | "fulfilled";
  created_at: string;
  fulfilled_at: string | null;
}

interface Row {
  id: string;
  agent_id: string;
  session_id: string;
  run_id: string | null;
  keys: string;
  status: "open" | "fulfilled";
  created_at: string;
  fulfilled_at: string | null;
}

const toRecord = (r: Row): EnvRequestRecord => ({
  request_id: r.id,
  agent_id: r.agent_id,
  session_id: r.session_id,
  run_id: r.run_id,
  keys: JSON.parse(r.keys) as RequestedKey[],
  status: r.status,
  created_at: r.created_at,
  fulfilled_at: r.fulfilled_at,
});

const COLUMNS = "r.id, r.agent_id, r.session_id, r.run_id, r.keys, r.status, r.created_at, f.fulfilled_at";
const FROM = "env_requests r LEFT JOIN env_request_fulfilments f ON f.request_id = r.id";

/** Requests newest first (created_at, then id, descending), filtered, after a keyset cursor. */
export async function listEnvRequests(
  db: D1Database,
  f: {
    agentId?: string | undefined;
    sessionId?: string | undefined;
    status?: string | undefined;
    after?: readonly [string, string] | undefined;
    limit: number;
  },
): Promise<EnvRequestRecord[]> {
  const rows = await db
    .prepare(
      `SELECT ${COLUMNS} FROM ${FROM}
       WHERE (?1 IS NULL OR r.agent_id = ?1) AND (?2 IS NULL OR r.session_id = ?2) AND (?3 IS NULL OR r.status = ?3)
         AND (?4 IS NULL OR (r.created_at, r.id) < (?4, ?5))
       ORDER BY r.created_at DESC, r.id DESC LIMIT ?6`,
    )
    .bind(f.agentId ?? null, f.sessionId ?? null, f.status ?? null, f.after?.[0] ?? null, f.after?.[1] ?? null, f.limit)
    .all<Row>();
  return rows.results.map(toRecord);
}

/** One request, or null. */
export async function getEnvRequest(db: D1Database, requestId: string): Promise<EnvRequestRecord | null> {
  const row = await db.prepare(`SELECT ${COLUMNS} FROM ${FROM} WHERE r.id = ?1`).bind(requestId).first<Row>();
  return row ? toRecord(row) : null;
}

/** Additional authenticated data of a stored value: its scope and key (a ciphertext cannot be moved). */
const valueName = (scope: string, key: string) => `env:${scope}:${key}`;

/** One submitted value, with where it is kept. */
export interface SubmittedValue {
  key: string;
  type: "env" | "secret";
  value: string;
  persist: boolean;
}

/**
 * Stores the values and moves the request open → fulfilled, in one transaction: the values are written only
 * while the request is still open, so of two concurrent submissions one wins. False when it was not open.
 */
export async function fulfilEnvRequest(
  db: D1Database,
  cryptoKey: CryptoKey,
  req: EnvRequestRecord,
  values: SubmittedValue[],
  now: Date,
): Promise<boolean> {
  const at = now.toISOString();
  const writes: D1PreparedStatement[] = [];
  for (const v of values) {
    const scope = v.persist ? `agent:${req.agent_id}` : `session:${req.session_id}`;
    const sealed = await sealValue(cryptoKey, valueName(scope, v.key), v.value);
    writes.push(
      db
        .prepare(
          `INSERT INTO env_values (scope, key, type, iv, ciphertext, request_id, updated_at)
           SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE EXISTS (SELECT 1 FROM env_requests WHERE id = ?6 AND status = 'open')
           ON CONFLICT (scope, key) DO UPDATE SET type = excluded.type, iv = excluded.iv, ciphertext = excluded.ciphertext,
             request_id = excluded.request_id, updated_at = excluded.updated_at`,
        )
        .bind(scope, v.key, v.type, sealed.iv, sealed.ciphertext, req.request_id, at),
    );
  }
  writes.push(
    db
      .prepare(
        `INSERT INTO env_request_fulfilments (request_id, fulfilled_at)
         SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM env_requests WHERE id = ?1 AND status = 'open')`,
      )
      .bind(req.request_id, at),
    // Last: the writes above ran only while the request was open; this moves it to fulfilled.
    db.prepare("UPDATE env_requests SET status = 'fulfilled' WHERE id = ?1 AND status = 'open'").bind(req.request_id),
  );
  const results = await db.batch(writes);
  return results[results.length - 1]?.meta.changes === 1;
}

/** The key names of the session's fulfilled requests, in request order (what the model is told). */
export async function fulfilledKeyNames(db: D1Database, sessionId: string): Promise<string[]> {
  const rows = await db
    .prepare(`SELECT r.keys FROM ${FROM} WHERE r.session_id = ?1 AND r.status = 'fulfilled' ORDER BY f.fulfilled_at, r.id`)
    .bind(sessionId)
    .all<{ keys: string }>();
  const names = rows.results.flatMap((r) => (JSON.parse(r.keys) as RequestedKey[]).map((k) => k.key));
  return [...new Set(names)];
}

/** What the model is told (inside L6) once values were supplied: the key names and where they are — never a value. */
export function envAvailableText(names: readonly string[]): string {
  return (
    `These environment variables you requested were supplied and are set in the sandbox environment: ${names.join(", ")}. ` +
    "Their values are not shown here; read them from the environment (e.g. $NAME) in the sandbox, never ask for them in chat."
  );
}

/**
 * The values in force for a session's sandbox: the agent's persisted ones, then the session's own (which win).
 * For the sandbox bootstrap only — never a log, event or transcript. Values that do not decrypt are left out.
 */
export async function sessionEnvValues(
  db: D1Database,
  cryptoKey: CryptoKey,
  agentId: string,
  sessionId: string,
): Promise<Record<string, string>> {
  const rows = await db
    .prepare("SELECT scope, key, iv, ciphertext FROM env_values WHERE scope IN (?1, ?2) ORDER BY scope = ?2, key")
    .bind(`agent:${agentId}`, `session:${sessionId}`)
    .all<{ scope: string; key: string; iv: string; ciphertext: string }>();
  const out: Record<string, string> = {};
  for (const r of rows.results) {
    const value = await openValue(cryptoKey, valueName(r.scope, r.key), r.iv, r.ciphertext);
    if (value !== null) out[r.key] = value;
  }
  return out;
}
