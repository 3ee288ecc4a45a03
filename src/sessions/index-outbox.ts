/**
 * Shipping the index outbox (index-outbox-store.ts) to D1: every queued row becomes one idempotent upsert built from
 * the state as it is now, and all of them go in ONE `db.batch` (D1 runs a batch as one transaction). Rows are
 * deleted only after D1 has answered, by id, so a failed batch, a retry or an eviction mid-batch loses nothing and
 * duplicates nothing (a repeated upsert writes the same row). A failed batch is retried with backoff until it
 * succeeds; the turn itself never waits for D1.
 */
import { auditStreamStatement } from "../audit/streams";
import { type ApprovalIndexRow, approvalIndexStatement, decidedVia, getApproval } from "../runs/approvals";
import { runIndexRow } from "../runs/index-d1";
import { firedAlerts, type PlannedStatement, runStatements } from "../usage/ship";
import { alarmNow } from "./capabilities";
import type { SessionContext } from "./context";
import { generationIndexStatement, sessionIndexStatement } from "./index-d1";
import {
  daysAwaitingStream,
  deleteQueuedStream,
  deleteShippedRows,
  generationStartedAt,
  type IndexOutboxRow,
  queuedIndexRows,
  runIndexSource,
} from "./index-outbox-store";
import { readSession, type SessionRef } from "./session-store";
import { openShippingWindow } from "./ship-window";
import { recordFiredAlerts } from "./usage-alerts";

/** Rows per D1 batch: a window of a busy session fits in one; more go in further batches of the same window. */
export const INDEX_BATCH_ROWS = 50;
/** Backoff after a failed batch: 1 s, doubling, at most this. */
const MAX_RETRY_MS = 60_000;

/**
 * The D1 statements for one queued row, from the current state; none when what it names no longer exists. A run's
 * row brings its usage row and its budget alerts' claims (issue 25 §2, D-078): they ride the same batch.
 */
function statementsFor(cx: SessionContext, session: SessionRef, row: IndexOutboxRow): PlannedStatement[] {
  if (row.kind !== "run") {
    const one = statementFor(cx, session, row.kind, row.key);
    return one ? [{ statement: one }] : [];
  }
  const run = runIndexSource(cx.sql, row.key);
  if (!run) return [];
  return runStatements(cx.env.DB, runIndexRow(row.key, session.sessionKey, run), run);
}

/** The D1 statement for one queued row other than a run's, from the current state; null when it no longer exists. */
function statementFor(
  cx: SessionContext,
  session: SessionRef,
  kind: Exclude<IndexOutboxRow["kind"], "run">,
  key: string,
): D1PreparedStatement | null {
  const db = cx.env.DB;
  switch (kind) {
    case "session":
      return sessionIndexStatement(db, session.sessionKey, session.sessionId);
    case "generation": {
      const startedAt = generationStartedAt(cx.sql, key);
      return startedAt === undefined ? null : generationIndexStatement(db, { ...session, sessionId: key, startedAt });
    }
    case "approval":
      return approvalStatement(cx, session, key);
    case "audit_stream":
      return auditStreamStatement(db, session.agentId, key, cx.objectId);
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
    decided_by: a.decided_by,
    decided_via: decidedVia(a.decided_by),
  };
  return approvalIndexStatement(cx.env.DB, row);
}

/**
 * What this object shipped ahead of its shipping pass (per object, by its storage): a new session's listing sends its
 * rows before the call answers and leaves their deletes to the turn's shipping pass, which commits anyway (issue 23,
 * D-064). `ids`: queued rows D1 has; `days`: audit streams listed before the first segment's head — whose trigger
 * queues their row — exists (D-069); `sending`: the listing under way, which the pass waits for instead of sending
 * the same rows. Lost with the instance: the rows are then shipped again — upserts, nothing doubles.
 */
interface ShippedEarly {
  ids: Set<number>;
  days: Set<string>;
  sending: Promise<unknown> | null;
}
const shippedEarly = new WeakMap<DurableObjectStorage, ShippedEarly>();

function early(storage: DurableObjectStorage): ShippedEarly {
  let e = shippedEarly.get(storage);
  if (!e) {
    e = { ids: new Set(), days: new Set(), sending: null };
    shippedEarly.set(storage, e);
  }
  return e;
}

/** Resolves once a new session's listing under way here (if any) has D1's answer. */
export async function listingSettled(storage: DurableObjectStorage): Promise<void> {
  await early(storage).sending;
}

/** What one `send` shipped, for the caller's commit (`recordIndexSend`). */
export interface IndexSend {
  /** False when a batch failed (its rows stay queued; retried after the backoff). */
  ok: boolean;
  /** Queued rows D1 has (those of earlier sends not yet deleted included). */
  ids: number[];
  /** Days whose audit-stream row D1 has though it was not queued (see `send`): their queued row goes at the commit. */
  streamDays: string[];
}

/** Records a send (call inside a transaction): the shipped rows leave the outbox, and so do the streams' rows. */
export function recordIndexSend(cx: SessionContext, sent: IndexSend): void {
  deleteSentRows(cx, sent);
  deleteSentStreams(cx, sent);
}

/** The shipped queued rows leave the outbox. */
export function deleteSentRows(cx: SessionContext, sent: IndexSend): void {
  deleteShippedRows(cx.sql, sent.ids);
  const { ids } = early(cx.storage);
  for (const id of sent.ids) ids.delete(id);
}

/** The stream rows D1 has unqueued leave the outbox: call after the chain heads whose trigger queues them. */
export function deleteSentStreams(cx: SessionContext, sent: IndexSend): void {
  const { days } = early(cx.storage);
  for (const day of sent.streamDays) {
    deleteQueuedStream(cx.sql, day);
    days.delete(day);
  }
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

  /** Ships every queued row and deletes what D1 has, in a commit of its own; false after a failed batch. */
  async ship(now: number): Promise<boolean> {
    const sent = await this.send(now);
    if (sent.ids.length > 0) this.#cx.storage.transactionSync(() => recordIndexSend(this.#cx, sent));
    return sent.ok;
  }

  /**
   * Sends every queued row not shipped yet (one batch per INDEX_BATCH_ROWS) and deletes nothing: the caller records
   * the result in its own commit. `streamDays` are days whose first audit segment this pass wrote (or, for a new
   * session's listing, will write): their stream rows go in the first batch now, though the chain head whose trigger
   * queues them is only inserted in that commit — unless a listing sent them already.
   */
  async send(now: number, streamDays: readonly string[] = []): Promise<IndexSend> {
    const cx = this.#cx;
    const { ids: done, days: listed } = early(cx.storage);
    const out: IndexSend = { ok: true, ids: [...done], streamDays: streamDays.filter((d) => listed.has(d)) };
    if (this.#retryAt !== null && now < this.#retryAt) return { ...out, ok: false };
    const session = readSession(cx.sql);
    if (!session) return out;
    let extra = streamDays.filter((d) => !listed.has(d));
    for (let after = 0; ; ) {
      const page = queuedIndexRows(cx.sql, INDEX_BATCH_ROWS, after);
      if (page.length === 0 && extra.length === 0) break;
      after = page[page.length - 1]?.id ?? after;
      const rows = page.filter((r) => !done.has(r.id));
      const days = extra.filter((d) => !rows.some((r) => r.kind === "audit_stream" && r.key === d));
      const planned = [
        ...rows.flatMap((r) => statementsFor(cx, session, r)),
        ...days.map((d) => ({ statement: auditStreamStatement(cx.env.DB, session.agentId, d, cx.objectId) })),
      ];
      const statements = planned.map((p) => p.statement);
      let results: D1Result[] = [];
      try {
        if (statements.length > 0) results = await cx.env.DB.batch(statements);
      } catch {
        this.#failures++;
        this.#retryAt = Date.now() + Math.min(MAX_RETRY_MS, 1000 * 2 ** (this.#failures - 1));
        return { ...out, ok: false };
      }
      // Issue 25 §2: an alert this batch claimed is recorded (audit event, webhook) before its rows can leave the outbox.
      if (await recordFiredAlerts(cx, firedAlerts(planned, results))) await alarmNow(cx.storage);
      this.sent.batches++;
      this.sent.statements += statements.length;
      out.ids.push(...rows.map((r) => r.id));
      out.streamDays.push(...days);
      extra = [];
      if (page.length < INDEX_BATCH_ROWS) break; // the last page: a row queued since goes in the next pass (its writer opened a window)
    }
    this.#failures = 0;
    this.#retryAt = null;
    return out;
  }
}

/**
 * Ships the queued index rows now, before the caller answers: a new generation, a decision or a cancellation is
 * listed when the call that made it returns (admin lists read D1). Never throws: after a failure the rows stay queued
 * and the shipping window retries them. A pass running meanwhile may send the same rows too: upserts, so nothing is
 * duplicated.
 */
export async function shipIndexNow(cx: SessionContext): Promise<void> {
  const shipped = await new IndexShipper(cx).ship(Date.now()).catch(() => false);
  if (!shipped) await openShippingWindow(cx.storage);
}

/**
 * A new session's listing (issue 23): every queued row — the session, its generation and, once the turn's run has
 * stopped, the run — in one D1 batch before the call answers, their deletes left to the turn's shipping pass (one
 * commit fewer per fresh turn, D-064). With `streams` (the turn's run has stopped, D-069) the batch also lists the
 * audit streams whose first segment that pass will write, so the pass makes no D1 call at all. Never throws: after a
 * failure the rows stay queued and the shipping window retries them.
 */
export async function listSessionNow(cx: SessionContext, streams: boolean): Promise<void> {
  const e = early(cx.storage);
  const sending = new IndexShipper(cx).send(Date.now(), streams ? daysAwaitingStream(cx.sql) : []).catch(() => null);
  e.sending = sending;
  const sent = await sending;
  if (e.sending === sending) e.sending = null;
  for (const id of sent?.ids ?? []) e.ids.add(id);
  for (const day of sent?.streamDays ?? []) e.days.add(day);
  if (!sent?.ok) await openShippingWindow(cx.storage);
}
