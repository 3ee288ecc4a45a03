/**
 * Who the session is and where it is listed: creating the session on first use (its row and its first generation;
 * their D1 index rows are queued in the same transaction by the index outbox's triggers and shipped before the
 * call answers, best effort, so a D1 failure can neither fail the call nor leave the session unlisted), reading it
 * back, its S5 type, and keeping the D1 index row's `updated_at` roughly current. Everything that needs "the
 * session" asks here.
 */
import type { SessionType } from "../tools/registry";
import type { SessionContext } from "./context";
import { newId } from "./context";
import { insertGeneration } from "./generation-store";
import { listSessionNow, shipIndexNow } from "./index-outbox";
import { queueIndexRow } from "./index-outbox-store";
import { parseSessionKey } from "./keys";
import { insertSession, metaValue, readSession, readSessionType, type SessionRef, setMeta } from "./session-store";
import { openShippingWindow } from "./ship-window";

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

/**
 * A new session's D1 listing, per object (by its storage): "deferred" until the call that created it is about to
 * answer (`sessionListed`), or its enqueue failed (`startSessionListing`), then under way; see `ensureSession`.
 */
const listings = new WeakMap<DurableObjectStorage, Promise<void> | "deferred">();

/**
 * Starts the D1 listing of the session this call created, if it waits. `streams`: the turn's wait is over, so the
 * batch lists its audit streams too (index-outbox.ts `listSessionNow`). Its rows' deletes: the turn's shipping pass.
 */
export function startSessionListing(cx: SessionContext, streams = false): void {
  if (listings.get(cx.storage) === "deferred") listings.set(cx.storage, listSessionNow(cx, streams));
}

/**
 * Resolves once the session this object created in this call is listed in D1 (at once when nothing is pending). A
 * waited turn calls it when its wait is over (`waited`; its run has stopped, as a rule): the session, its generation,
 * the run and its audit stream go in one D1 batch, and the turn's shipping pass is left with its R2 puts (D-069).
 */
export async function sessionListed(cx: SessionContext, waited = false): Promise<void> {
  startSessionListing(cx, waited);
  const pending = listings.get(cx.storage);
  listings.delete(cx.storage);
  await pending;
}

/**
 * The current generation, creating the session (and its D1 index rows) on first use. A new session is listed
 * before this returns, or — `listing: "background"` (a turn, issue 23) — by `sessionListed`, which the caller awaits
 * before it answers: a first turn's listing joins its run's index rows in one D1 batch (D-069), and no I/O falls
 * between the session's rows and the turn's message (one commit for both).
 */
export async function ensureSession(
  cx: SessionContext,
  identity: SessionIdentity,
  listing: "now" | "background" = "now",
): Promise<SessionRef> {
  const row = readSession(cx.sql);
  if (row) {
    if (row.sessionKey !== identity.sessionKey) throw new Error("session key does not match this object");
    return row;
  }
  if (!parseSessionKey(identity.sessionKey).ok) throw new Error("invalid session key");
  const ref = { sessionKey: identity.sessionKey, agentId: identity.agentId, sessionId: newId("ses") };
  const now = new Date().toISOString();
  // A turn's message, stored before the next I/O, joins this commit (issue 23, D-066: a transactionSync is a
  // savepoint of the event-loop turn's implicit transaction).
  cx.storage.transactionSync(() => {
    // Their triggers queue the session and generation index rows in this same transaction.
    insertSession(cx.sql, ref, identity.sessionType ?? "ordinary");
    insertGeneration(cx.sql, ref.sessionId, now);
    setMeta(cx.sql, "indexed_at", String(Date.now()));
  });
  // Listed before the caller answers, as before issue 23 — but a D1 failure leaves the rows queued for the shipping
  // window to retry instead of failing the call (and leaving the session unlisted for good).
  if (listing === "now") await shipIndexNow(cx);
  else listings.set(cx.storage, "deferred");
  return ref;
}

/**
 * A new generation is listed in D1 (sessions and generations index): its insert queued the rows (triggers); this
 * notes when and ships them before the admin action answers (rare, so no window; a failure is retried later).
 */
export async function indexGeneration(cx: SessionContext, _ref: SessionRef): Promise<void> {
  setMeta(cx.sql, "indexed_at", String(Date.now()));
  await shipIndexNow(cx);
}

/**
 * Keeps the D1 index row's `updated_at` roughly current without a D1 statement on every message: queues the
 * session row at most once per INDEX_REFRESH_MS, or at once when forced (a resumed generation's pointer moved —
 * its trigger has queued it too). The row carries the current generation when it ships.
 */
export async function refreshIndex(cx: SessionContext, _sessionKey: string, _sessionId: string, force = false): Promise<void> {
  const now = Date.now();
  const last = Number(metaValue(cx.sql, "indexed_at") ?? 0);
  if (!force && now - last < INDEX_REFRESH_MS) return;
  cx.storage.transactionSync(() => {
    queueIndexRow(cx.sql, "session", "");
    setMeta(cx.sql, "indexed_at", String(now));
  });
  // Forced: a resumed generation, shipped before the admin action answers (like indexGeneration).
  await (force ? shipIndexNow(cx) : openShippingWindow(cx.storage));
}
