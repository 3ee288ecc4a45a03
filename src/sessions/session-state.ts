/**
 * Who the session is and where it is listed: creating the session on first use (its row, its first generation
 * and its D1 index rows), reading it back, its S5 type, and keeping the D1 index row's `updated_at` roughly
 * current. Everything that needs "the session" asks here.
 */
import type { SessionType } from "../tools/registry";
import type { SessionContext } from "./context";
import { newId } from "./context";
import { insertGeneration } from "./generation-store";
import { recordSessionGeneration, upsertSessionIndex } from "./index-d1";
import { parseSessionKey } from "./keys";
import { insertSession, metaValue, readSession, readSessionType, type SessionRef, setMeta } from "./session-store";

export type { SessionRef } from "./session-store";

/** Who the session is; passed by the Worker on every call that may create it. */
export interface SessionIdentity {
  sessionKey: string;
  agentId: string;
  /** S5 session type, fixed when the session is created (`ordinary` unless said). */
  sessionType?: SessionType;
}

/** How stale the D1 index row's `updated_at` may get before a message refreshes it. */
const INDEX_REFRESH_MS = 60_000;

/** The session as stored (runs exist only in a created session). */
export function currentSession(cx: Pick<SessionContext, "sql">): SessionRef {
  const row = readSession(cx.sql);
  if (!row) throw new Error("session not created");
  return row;
}

/** The session's S5 type (`ordinary` before the session exists). */
export function sessionType(cx: Pick<SessionContext, "sql">): SessionType {
  return readSessionType(cx.sql) === "setup" ? "setup" : "ordinary";
}

/** The current generation, creating the session (and its D1 index rows) on first use. */
export async function ensureSession(cx: SessionContext, identity: SessionIdentity): Promise<SessionRef> {
  const row = readSession(cx.sql);
  if (row) {
    if (row.sessionKey !== identity.sessionKey) throw new Error("session key does not match this object");
    return row;
  }
  if (!parseSessionKey(identity.sessionKey).ok) throw new Error("invalid session key");
  const ref = { sessionKey: identity.sessionKey, agentId: identity.agentId, sessionId: newId("ses") };
  const now = new Date().toISOString();
  cx.storage.transactionSync(() => {
    insertSession(cx.sql, ref, identity.sessionType ?? "ordinary");
    insertGeneration(cx.sql, ref.sessionId, now);
  });
  await indexGeneration(cx, ref);
  return ref;
}

/** Lists a new generation in D1 (sessions and generations index) and notes when. */
export async function indexGeneration(cx: SessionContext, ref: SessionRef): Promise<void> {
  await recordSessionGeneration(cx.env.DB, ref);
  setMeta(cx.sql, "indexed_at", String(Date.now()));
}

/**
 * Keeps the D1 index row's `updated_at` roughly current without a D1 write on every message: at most one
 * refresh per INDEX_REFRESH_MS, or at once when forced (a resumed generation).
 */
export async function refreshIndex(cx: SessionContext, sessionKey: string, sessionId: string, force = false): Promise<void> {
  const now = Date.now();
  const last = Number(metaValue(cx.sql, "indexed_at") ?? 0);
  if (!force && now - last < INDEX_REFRESH_MS) return;
  await upsertSessionIndex(cx.env.DB, sessionKey, sessionId);
  setMeta(cx.sql, "indexed_at", String(now));
}
