/**
 * Shipping the index outbox (index-outbox-store.ts) to D1: every queued row becomes one idempotent upsert built from
 * the state as it is now, and all of them go in ONE `db.batch` (D1 runs a batch as one transaction). Rows are
 * deleted only after D1 has answered, by id, so a failed batch, a retry or an eviction mid-batch loses nothing and
 * duplicates nothing (a repeated upsert writes the same row). A failed batch is retried with backoff until it
 * succeeds; the turn itself never waits for D1.
 */
import { auditStreamStatement } from "../audit/streams";
import { type ApprovalIndexRow, approvalIndexStatement, getApproval } from "../runs/approvals";
import { runIndexStatement } from "../runs/index-d1";
import type { SessionContext } from "./context";
import { generationIndexStatement, sessionIndexStatement } from "./index-d1";
import { deleteShippedRows, generationStartedAt, type IndexOutboxRow, queuedIndexRows, runIndexSource } from "./index-outbox-store";
import { readSession, type SessionRef } from "./session-store";
import { openShippingWindow } from "./ship-window";

/** Rows per D1 batch: a window of a busy session fits in one; more go in further batches of the same window. */
export const INDEX_BATCH_ROWS = 50;
/** Backoff after a failed batch: 1 s, doubling, at most this. */
const MAX_RETRY_MS = 60_000;

/** The D1 statement for one queued row, from the current state; null when what it names no longer exists. */
function statementFor(cx: SessionContext, session: SessionRef, row: IndexOutboxRow): D1PreparedStatement | null {
  const db = cx.env.DB;
  switch (row.kind) {
    case "session":
      return sessionIndexStatement(db, session.sessionKey, session.sessionId);
    case "generation": {
      const startedAt = generationStartedAt(cx.sql, row.key);
      return startedAt === undefined ? null : generationIndexStatement(db, { ...session, sessionId: row.key, startedAt });
    }
    case "run": {
      const run = runIndexSource(cx.sql, row.key);
      return run ? runIndexStatement(db, { run_id: row.key, session_key: session.sessionKey, ...run }) : null;
    }
    case "approval":
      return approvalStatement(cx, session, row.key);
    case "audit_stream":
      return auditStreamStatement(db, session.agentId, row.key, cx.objectId);
  }
}

function approvalStatement(cx: SessionContext, session: SessionRef, id: string): D1PreparedStatement | null {
  const a = getApproval(cx.sql, id);
  if (!a) return null;
  const row: ApprovalIndexRow = {
    approval_id: a.id,
    agent_id: runIndexSource(cx.sql, a.run_id)?.agent_id ?? session.agentId,
    run_id: a.run_id,
    session_key: session.sessionKey,
    tool: a.tool,
    status: a.status,
    created_at: a.created_at,
    expires_at: a.expires_at,
    decided_at: a.decided_at,
  };
  return approvalIndexStatement(cx.env.DB, row);
}

/** Ships the index outbox to D1 in batches; remembers (in memory) when to try again after a failure. */
export class IndexShipper {
  readonly #cx: SessionContext;
  #failures = 0;
  #retryAt: number | null = null;
  /** D1 batches sent by this instance, and statements in them (for the measurements in test/sessions). */
  readonly sent = { batches: 0, statements: 0 };

  /** The shipper of `cx`'s outbox. */
  constructor(cx: SessionContext) {
    this.#cx = cx;
  }

  /** After a failed batch, when to try again (null: no failure pending). */
  retryAt(): number | null {
    return this.#retryAt;
  }

  /** Ships every queued row (one batch per INDEX_BATCH_ROWS); false after a failed batch (kept for the retry). */
  async ship(now: number): Promise<boolean> {
    if (this.#retryAt !== null && now < this.#retryAt) return false;
    const cx = this.#cx;
    const session = readSession(cx.sql);
    if (!session) return true;
    for (;;) {
      const rows = queuedIndexRows(cx.sql, INDEX_BATCH_ROWS);
      if (rows.length === 0) break;
      const statements = rows.map((r) => statementFor(cx, session, r)).filter((s): s is D1PreparedStatement => s !== null);
      try {
        if (statements.length > 0) await cx.env.DB.batch(statements);
      } catch {
        this.#failures++;
        this.#retryAt = Date.now() + Math.min(MAX_RETRY_MS, 1000 * 2 ** (this.#failures - 1));
        return false;
      }
      this.sent.batches++;
      this.sent.statements += statements.length;
      deleteShippedRows(
        cx.sql,
        rows.map((r) => r.id),
      );
    }
    this.#failures = 0;
    this.#retryAt = null;
    return true;
  }
}

/**
 * Ships the queued index rows now, before the caller answers: a new session or generation is listed when the call
 * that made it returns (admin lists read D1). Never throws: after a failure the rows stay queued and the shipping
 * window retries them. A pass running meanwhile may send the same rows too: upserts, so nothing is duplicated.
 */
export async function shipIndexNow(cx: SessionContext): Promise<void> {
  const shipped = await new IndexShipper(cx).ship(Date.now()).catch(() => false);
  if (!shipped) await openShippingWindow(cx.storage);
}
