/**
 * The D1 session index (migrations/0002_sessions.sql): which sessions exist,
 * for listing with filters, and which session key a `session_id` belongs to. Shipped by the SessionDO's index
 * outbox (src/sessions/index-outbox.ts); the statements here are the rows of its batches.
 */
import { parseSessionKey } from "./keys";

/** The insert that records a generation (session_id → session key), for a batch (idempotent). */
export function generationIndexStatement(
  db: D1Database,
  g: { sessionKey: string; agentId: string; sessionId: string; startedAt: string },
): D1PreparedStatement {
  return db
    .prepare(
      "INSERT INTO session_generations (session_id, session_key, agent_id, started_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (session_id) DO NOTHING",
    )
    .bind(g.sessionId, g.sessionKey, g.agentId, g.startedAt);
}

/** The upsert of a session's index row pointing at its current generation, for a batch (idempotent). */
export function sessionIndexStatement(db: D1Database, sessionKey: string, sessionId: string): D1PreparedStatement {
  const parsed = parseSessionKey(sessionKey);
  if (!parsed.ok) throw new Error(parsed.error);
  const k = parsed.key;
  const [channel, accountId, scope, peerId] = k.kind === "main" ? ["main", "", "main", ""] : [k.channel, k.accountId, k.scope, k.peerId];
  const now = new Date().toISOString();
  return db
    .prepare(
      `INSERT INTO sessions (session_key, agent_id, channel, account_id, scope, peer_id, session_id, created_at, updated_at)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)
       ON CONFLICT (session_key) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at`,
    )
    .bind(sessionKey, k.agentId, channel, accountId, scope, peerId, sessionId, now);
}

/** The session key a session_id belongs to, if any. */
export async function findSessionKey(db: D1Database, sessionId: string): Promise<{ sessionKey: string; agentId: string } | null> {
  const row = await db
    .prepare("SELECT session_key, agent_id FROM session_generations WHERE session_id = ?1")
    .bind(sessionId)
    .first<{ session_key: string; agent_id: string }>();
  return row ? { sessionKey: row.session_key, agentId: row.agent_id } : null;
}

export interface SessionFilters {
  agentId?: string | undefined;
  userId?: string | undefined;
  roomId?: string | undefined;
  channel?: string | undefined;
  /** Keyset cursor: only sessions after this (created_at, session_key) in list order. */
  after?: readonly [createdAt: string, sessionKey: string] | undefined;
  limit: number;
}

export interface SessionSummary {
  session_key: string;
  agent_id: string;
  channel: string;
  room_id: string;
  user_id: string;
  scope: string;
  session_id: string;
  created_at: string;
  updated_at: string;
}

/**
 * The room of a session row: its account id, or for an HTTP chat (`{callerId}~{roomId}`, src/sessions/keys.ts) the
 * part after the `~` (no other account id contains one), so a room filter finds that room's chats of every caller,
 * legacy room-only keys included.
 */
const ROOM_ID = "substr(account_id, instr(account_id, '~') + 1)";

/**
 * Sessions matching the filters, newest first: (created_at, session_key) descending, a stable and unique order
 * (`updated_at` moves with activity, so paging on it would repeat or skip sessions active meanwhile).
 */
export async function listSessions(db: D1Database, f: SessionFilters): Promise<SessionSummary[]> {
  const rows = await db
    .prepare(
      `SELECT session_key, agent_id, channel, ${ROOM_ID} AS room_id, peer_id AS user_id, scope, session_id, created_at, updated_at
       FROM sessions
       WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR peer_id = ?2) AND (?3 IS NULL OR ${ROOM_ID} = ?3) AND (?4 IS NULL OR channel = ?4)
         AND (?5 IS NULL OR (created_at, session_key) < (?5, ?6))
       ORDER BY created_at DESC, session_key DESC LIMIT ?7`,
    )
    .bind(f.agentId ?? null, f.userId ?? null, f.roomId ?? null, f.channel ?? null, f.after?.[0] ?? null, f.after?.[1] ?? null, f.limit)
    .all<SessionSummary>();
  return rows.results;
}

export interface GenerationFilters extends Omit<SessionFilters, "after"> {
  sessionKey?: string | undefined;
  status?: "current" | "archived" | undefined;
  /** Keyset cursor: only generations after this (started_at, session_id) in list order. */
  after?: readonly [startedAt: string, sessionId: string] | undefined;
}

/** One generation (session_id) of a session key, `current` when the key's index row points at it. */
export interface GenerationSummary {
  session_id: string;
  session_key: string;
  status: "current" | "archived";
  agent_id: string;
  channel: string;
  room_id: string;
  user_id: string;
  scope: string;
  started_at: string;
}

/**
 * Every generation matching the filters, newest first: (started_at, session_id) descending, unique and never
 * changing for a generation. A generation is `current` when its key's `sessions` row names it (`/new` and `/resume`
 * move that pointer), else `archived` (what `/resume` can bring back).
 */
export async function listGenerations(db: D1Database, f: GenerationFilters): Promise<GenerationSummary[]> {
  const rows = await db
    .prepare(
      `SELECT g.session_id, g.session_key, CASE WHEN s.session_id = g.session_id THEN 'current' ELSE 'archived' END AS status,
              g.agent_id, s.channel, ${ROOM_ID.replaceAll("account_id", "s.account_id")} AS room_id, s.peer_id AS user_id, s.scope, g.started_at
       FROM session_generations g JOIN sessions s ON s.session_key = g.session_key
       WHERE (?1 IS NULL OR g.agent_id = ?1) AND (?2 IS NULL OR s.peer_id = ?2)
         AND (?3 IS NULL OR ${ROOM_ID.replaceAll("account_id", "s.account_id")} = ?3) AND (?4 IS NULL OR s.channel = ?4)
         AND (?5 IS NULL OR g.session_key = ?5)
         AND (?6 IS NULL OR (CASE WHEN s.session_id = g.session_id THEN 'current' ELSE 'archived' END) = ?6)
         AND (?7 IS NULL OR (g.started_at, g.session_id) < (?7, ?8))
       ORDER BY g.started_at DESC, g.session_id DESC LIMIT ?9`,
    )
    .bind(
      f.agentId ?? null,
      f.userId ?? null,
      f.roomId ?? null,
      f.channel ?? null,
      f.sessionKey ?? null,
      f.status ?? null,
      f.after?.[0] ?? null,
      f.after?.[1] ?? null,
      f.limit,
    )
    .all<GenerationSummary>();
  return rows.results;
}
