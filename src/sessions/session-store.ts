/**
 * The session's own rows, as named statements: who the session is (`session_state`, one row) and the small
 * key/value facts kept beside it (`session_meta`: creation time, the audit sequence, when the D1 index was last
 * refreshed, each generation's inline system prompt). The only module that writes SQL for these two tables.
 */
import { databaseOf, type Sql } from "../storage/sql";

/** The session as stored: its key, agent and current generation. */
export interface SessionRef {
  sessionKey: string;
  agentId: string;
  sessionId: string;
}

/**
 * The session row per object, kept once read (D-065: a turn with one tool round read it 32 times). Only this
 * module writes the row: a write forgets the copy, and nothing is kept again until a timer has fired, by when
 * the writer's transaction has committed or rolled back — a rolled-back write is never remembered.
 */
const kept = new WeakMap<object, { ref: SessionRef; type: string }>();
const writing = new WeakSet<object>();

function forget(sql: Sql): void {
  const db = databaseOf(sql);
  kept.delete(db);
  writing.add(db);
  setTimeout(() => writing.delete(db), 0);
}

function sessionRow(sql: Sql): { ref: SessionRef; type: string } | undefined {
  const db = databaseOf(sql);
  const hit = kept.get(db);
  if (hit) return hit;
  const row = sql.one<{ session_key: string; agent_id: string; session_id: string; session_type: string }>`
    SELECT session_key, agent_id, session_id, session_type FROM session_state WHERE id = 1`;
  if (!row) return undefined;
  const found = { ref: { sessionKey: row.session_key, agentId: row.agent_id, sessionId: row.session_id }, type: row.session_type };
  if (!writing.has(db)) kept.set(db, found);
  return found;
}

/** The session row, or undefined before the session is created. */
export function readSession(sql: Sql): SessionRef | undefined {
  const ref = sessionRow(sql)?.ref;
  return ref && { ...ref };
}

/** The stored S5 session type (undefined before the session exists). */
export function readSessionType(sql: Sql): string | undefined {
  return sessionRow(sql)?.type;
}

/** Creates the session row (once: the row's id is fixed to 1). */
export function insertSession(sql: Sql, ref: SessionRef, sessionType: string): void {
  forget(sql);
  sql.run`INSERT INTO session_state (id, session_key, agent_id, session_id, session_type)
          VALUES (1, ${ref.sessionKey}, ${ref.agentId}, ${ref.sessionId}, ${sessionType})`;
}

/** Points the session at another generation. */
export function setCurrentGeneration(sql: Sql, sessionId: string): void {
  forget(sql);
  sql.run`UPDATE session_state SET session_id = ${sessionId} WHERE id = 1`;
}

/** One `session_meta` value, if set. */
export function metaValue(sql: Sql, key: string): string | undefined {
  return sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = ${key}`?.value;
}

/** Sets (or replaces) one `session_meta` value. */
export function setMeta(sql: Sql, key: string, value: string): void {
  sql.run`INSERT INTO session_meta (key, value) VALUES (${key}, ${value}) ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
}

/** Removes one `session_meta` value. */
export function deleteMeta(sql: Sql, key: string): void {
  sql.run`DELETE FROM session_meta WHERE key = ${key}`;
}

/** Records when this object's storage was first created (kept from the first call on). */
export function markCreated(sql: Sql, at: string): void {
  sql.run`INSERT INTO session_meta (key, value) VALUES ('created_at', ${at}) ON CONFLICT (key) DO NOTHING`;
}

/** The storage schema version in force and when this session's storage was first created. */
export function describeStorage(sql: Sql): { schemaVersion: number; createdAt: string } {
  const version = sql.one<{ version: number }>`SELECT version FROM _schema WHERE id = 1`?.version ?? 0;
  return { schemaVersion: version, createdAt: metaValue(sql, "created_at") ?? "" };
}

/** The next number of the session's own audit sequence (events outside a run's lifecycle); call inside a transaction. */
export function nextAuditSeq(sql: Sql): number {
  const seq = Number(metaValue(sql, "audit_seq") ?? 0) + 1;
  setMeta(sql, "audit_seq", String(seq));
  return seq;
}
