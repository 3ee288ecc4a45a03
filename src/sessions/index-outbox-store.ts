/**
 * The index outbox (issue 23): which D1 index rows of this session wait to be shipped. A row names what changed —
 * a run, an approval, the session, a generation, an audit stream (a day) — not its contents: the shipper reads the
 * current state when it ships, so the latest state wins and a thing changed ten times in a window ships once.
 * Triggers queue the rows, so a row is queued in the very transaction that changes the state it reflects, whoever
 * writes it. `INSERT OR REPLACE` gives a changed row a new id: the shipper deletes only the ids it shipped, so a
 * change made while a batch is in flight is shipped by the next one. The only module with SQL for this table.
 */

import type { RunIndexSource } from "../runs/index-d1";
import type { Sql } from "../storage/sql";
import type { RunUsageSource } from "../usage/ship";

/** What an index row describes (one D1 table each). */
export type IndexKind = "run" | "approval" | "session" | "generation" | "audit_stream";

/** One queued index row: `key` is the run, approval or generation id, the audit day, or "" for the session. */
export interface IndexOutboxRow {
  id: number;
  kind: IndexKind;
  key: string;
}

const queue = (kind: IndexKind, key: string) => `INSERT OR REPLACE INTO index_outbox (kind, key) VALUES ('${kind}', ${key});`;

/**
 * Schema (a SESSION_MIGRATIONS entry): the outbox and the triggers that fill it. A run is listed once it waits for
 * an approval or ends (a queued or running run is not: most runs end within the window, and their one row is the
 * final one; a run still running a second after it started is announced by the engine — ship.ts). An approval is
 * listed when it is requested, by the D1 reservation that guards the pending limits (approvals.ts), and queued here
 * when it is decided or expires.
 */
export const INDEX_OUTBOX_SCHEMA = `CREATE TABLE index_outbox (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     kind TEXT NOT NULL CHECK (kind IN ('run', 'approval', 'session', 'generation', 'audit_stream')),
     key TEXT NOT NULL,
     UNIQUE (kind, key)
   );
   CREATE TRIGGER index_run_status AFTER UPDATE OF status ON runs
     WHEN NEW.status IS NOT OLD.status AND NEW.status NOT IN ('queued', 'running') BEGIN ${queue("run", "NEW.id")} END;
   CREATE TRIGGER index_approval_status AFTER UPDATE OF status ON approvals WHEN NEW.status IS NOT OLD.status BEGIN ${queue("approval", "NEW.id")} END;
   CREATE TRIGGER index_session_insert AFTER INSERT ON session_state BEGIN ${queue("session", "''")} END;
   CREATE TRIGGER index_session_generation AFTER UPDATE OF session_id ON session_state BEGIN ${queue("session", "''")} END;
   CREATE TRIGGER index_generation_insert AFTER INSERT ON generations BEGIN ${queue("generation", "NEW.session_id")} END;
   CREATE TRIGGER index_audit_stream AFTER INSERT ON audit_heads BEGIN ${queue("audit_stream", "NEW.day")} END;`;

/** Queues an index row by hand (a running run's announcement, the session row's periodic `updated_at` refresh). */
export function queueIndexRow(sql: Sql, kind: IndexKind, key: string): void {
  sql.run`INSERT OR REPLACE INTO index_outbox (kind, key) VALUES (${kind}, ${key})`;
}

/**
 * Re-queues the index row of the run whose user message is transcript row `seq`, if that run has been listed (it
 * paused or ended): its message preview (D-079) is cut from that row, which a secret split over messages has just
 * had rewritten. A queued or running run is listed when it stops, from the row as it is then.
 */
export function queueRunOfMessage(sql: Sql, seq: number): void {
  sql.run`INSERT OR REPLACE INTO index_outbox (kind, key)
    SELECT 'run', r.id FROM transcript t JOIN runs r ON r.id = t.run_id
     WHERE t.seq = ${seq} AND t.role = 'user' AND r.message_seq = t.seq AND r.status NOT IN ('queued', 'running')`;
}

/** The oldest queued rows after id `after`, at most `limit`. */
export function queuedIndexRows(sql: Sql, limit: number, after = 0): IndexOutboxRow[] {
  return sql.all<IndexOutboxRow & Record<string, SqlStorageValue>>`
    SELECT id, kind, key FROM index_outbox WHERE id > ${after} ORDER BY id LIMIT ${limit}`;
}

/** How many index rows wait. */
export function indexBacklog(sql: Sql): number {
  return sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM index_outbox`?.n ?? 0;
}

/** Removes shipped rows by id (a row re-queued meanwhile has a new id and stays). */
export function deleteShippedRows(sql: Sql, ids: readonly number[]): void {
  for (const id of ids) sql.run`DELETE FROM index_outbox WHERE id = ${id}`;
}

/** Removes the queued audit-stream row of `day` (its statement went in a batch already: see IndexShipper.send). */
export function deleteQueuedStream(sql: Sql, day: string): void {
  sql.run`DELETE FROM index_outbox WHERE kind = 'audit_stream' AND key = ${day}`;
}

/** How much of the message and the output a run's index row reads (its previews are cut from these, D-079). */
export const PREVIEW_SOURCE_CHARS = 400;

/**
 * The run fields a D1 run index row carries, or undefined when the run is gone: with the heads of its user message
 * (the transcript's row, redacted when it was stored) and of its output, for the previews (D-079), and its usage
 * (issue 25 §2, D-078).
 */
export function runIndexSource(sql: Sql, runId: string) {
  return sql.one<
    { [K in keyof RunIndexSource]: RunIndexSource[K] } & RunUsageSource
  >`SELECT r.agent_id, r.session_id, r.caller_id, r.source, r.status,
            r.created_at, r.updated_at, r.started_at, r.finished_at, r.rounds, r.tool_calls,
            substr(t.content, 1, ${PREVIEW_SOURCE_CHARS}) AS message_head, substr(r.output, 1, ${PREVIEW_SOURCE_CHARS}) AS output_head,
            r.spec, r.model_calls, r.unreported_calls, r.uncosted_calls, r.reported_prompt_tokens,
            r.reported_completion_tokens, r.cached_tokens, r.cost_pico
       FROM runs r LEFT JOIN transcript t ON t.seq = r.message_seq WHERE r.id = ${runId}`;
}

/**
 * Days whose audit events wait in the outbox while the day has no chain head: their stream's index row is queued
 * only when the first segment's head is inserted (the shipping pass's commit), so a new session's listing sends it
 * ahead (index-outbox.ts `listSessionNow`, D-069).
 */
export function daysAwaitingStream(sql: Sql): string[] {
  return sql.all<{ day: string }>`SELECT DISTINCT day FROM audit_outbox WHERE day NOT IN (SELECT day FROM audit_heads) ORDER BY day`.map(
    (r) => r.day,
  );
}

/** A generation's start time, or undefined when there is no such generation. */
export function generationStartedAt(sql: Sql, sessionId: string): string | undefined {
  return sql.one<{ started_at: string }>`SELECT started_at FROM generations WHERE session_id = ${sessionId}`?.started_at;
}
