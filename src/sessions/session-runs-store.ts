/**
 * The statements the session itself runs on its run tables (the run engine's own are in src/runs/store.ts):
 * queueing a run for a message, finding one by dispatch key, the queue entry, bundles still to write,
 * a run's pending approvals, and `automation.complete` records. Named functions, so no SQL sits elsewhere.
 */
import type { Sql } from "../storage/sql";
import type { AutomationCompletion } from "../tools/registry";
import { ensureLazyTables, readLazy } from "./lazy-tables";

/** A run's queue entry (the `run` RPC's answer). */
export interface RunQueueEntry {
  id: string;
  session_id: string;
  status: string;
  source: string;
  agent_id: string;
  message_seq: number;
}

/** A run queued for a stored user message. */
export interface QueuedRun {
  id: string;
  sessionId: string;
  source: string;
  agentId: string;
  callerId: string | null;
  messageSeq: number;
  spec: string | null;
  at: string;
  dispatchKey: string | null;
}

/** Queues a run (status `queued`). */
export function insertQueuedRun(sql: Sql, r: QueuedRun): void {
  sql.run`INSERT INTO runs (id, session_id, source, agent_id, caller_id, status, message_seq, spec, created_at, updated_at, dispatch_key)
          VALUES (${r.id}, ${r.sessionId}, ${r.source}, ${r.agentId}, ${r.callerId}, 'queued', ${r.messageSeq},
                  ${r.spec}, ${r.at}, ${r.at}, ${r.dispatchKey})`;
}

/** The run queued earlier under `dispatchKey`, if any. */
export function runByDispatchKey(sql: Sql, dispatchKey: string): { id: string; session_id: string; message_seq: number } | undefined {
  return sql.one<{ id: string; session_id: string; message_seq: number }>`
    SELECT id, session_id, message_seq FROM runs WHERE dispatch_key = ${dispatchKey}`;
}

/** Whether a run is queued, running or awaiting approval. */
export function hasActiveRun(sql: Sql): boolean {
  return sql.one<{ id: string }>`SELECT id FROM runs WHERE status IN ('queued', 'running', 'awaiting_approval') LIMIT 1` !== undefined;
}

/** A run's queue entry, or undefined. */
export function runQueueEntry(sql: Sql, runId: string): RunQueueEntry | undefined {
  return sql.one<RunQueueEntry & Record<string, SqlStorageValue>>`
    SELECT id, session_id, status, source, agent_id, message_seq FROM runs WHERE id = ${runId}`;
}

/** Finished runs whose R2 bundle is not written yet, oldest first, at most 20. */
export function unbundledFinishedRuns(sql: Sql): string[] {
  return sql.all<{ id: string }>`
    SELECT id FROM runs WHERE bundled = 0 AND status IN ('completed', 'failed', 'cancelled') ORDER BY message_seq LIMIT 20`.map(
    (r) => r.id,
  );
}

/** Marks these runs' bundles written. */
export function markBundled(sql: Sql, runIds: readonly string[]): void {
  for (const id of runIds) sql.run`UPDATE runs SET bundled = 1 WHERE id = ${id}`;
}

/** The run a sandbox callback belongs to: the running one, else the newest of the generation. */
export function callbackRunOf(sql: Sql, sessionId: string): string | undefined {
  return sql.one<{ id: string }>`
    SELECT id FROM runs WHERE session_id = ${sessionId} ORDER BY (status = 'running') DESC, message_seq DESC LIMIT 1`?.id;
}

/** A run's approvals still pending, oldest first. */
export function pendingApprovalsOf(sql: Sql, runId: string): { approval_id: string; tool: string }[] {
  return sql.all<{ approval_id: string; tool: string }>`
    SELECT id AS approval_id, tool FROM approvals WHERE run_id = ${runId} AND status = 'pending' ORDER BY created_at, id`;
}

/** An `automation.complete` record by its id. */
export function automationCompletion(sql: Sql, completionId: string): AutomationCompletion | undefined {
  return readLazy(
    sql,
    "automation_completions",
    undefined,
    () => sql.one<AutomationCompletion & Record<string, SqlStorageValue>>`
    SELECT completion_id, run_id, outcome, summary, tool_call_id, recorded_at FROM automation_completions WHERE completion_id = ${completionId}`,
  );
}

/** Stores an `automation.complete` record (call inside its transaction: it creates the table first, D-062). */
export function insertAutomationCompletion(sql: Sql, c: AutomationCompletion): void {
  ensureLazyTables(sql, "automation_completions");
  sql.run`INSERT INTO automation_completions (completion_id, run_id, outcome, summary, tool_call_id, recorded_at)
          VALUES (${c.completion_id}, ${c.run_id}, ${c.outcome}, ${c.summary}, ${c.tool_call_id}, ${c.recorded_at})`;
}
