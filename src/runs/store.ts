/**
 * The run engine's rows in the SessionDO's SQLite (schema v7): runs, their
 * lifecycle events (S3 §2), S4 §6 traces, planned and executed tool calls,
 * and the session's failure-loop state. Plain functions over `Sql`; the
 * caller wraps related writes in one storage transaction.
 */
import type { Sql } from "../storage/sql";
import { type EventType, nextEvent, type RunEvent } from "./events";
import { type FailureLoopState, INITIAL_FAILURE_LOOP } from "./failure-loop";
import type { RunSpec } from "./spec";

export type RunStatus = "queued" | "running" | "awaiting_approval" | "completed" | "failed" | "cancelled";

export interface RunRow {
  id: string;
  session_id: string;
  source: string;
  agent_id: string;
  caller_id: string | null;
  status: RunStatus;
  message_seq: number;
  spec: string | null;
  created_at: string;
  updated_at: string;
  started_at: string | null;
  finished_at: string | null;
  output: string | null;
  error: string | null;
  rounds: number;
  tool_calls: number;
  executions: number;
  cancel_requested: number;
  prompt_tokens: number;
  completion_tokens: number;
  indexed: number;
  /** Issue 25 §2 (schema v20): model calls answered, those with no usage reported, those with no cost known. */
  model_calls: number;
  unreported_calls: number;
  uncosted_calls: number;
  /** Provider-reported tokens only (prompt includes cached), and the cost of the costed calls in pico-USD. */
  reported_prompt_tokens: number;
  reported_completion_tokens: number;
  cached_tokens: number;
  cost_pico: number;
}

export function getRun(sql: Sql, runId: string): RunRow | undefined {
  return sql.one<RunRow & Record<string, SqlStorageValue>>`SELECT * FROM runs WHERE id = ${runId}`;
}

/** The run to work on next: one already running (resumed after an interruption), else the oldest queued. */
export function nextRunnable(sql: Sql): RunRow | undefined {
  return sql.one<RunRow & Record<string, SqlStorageValue>>`
    SELECT * FROM runs WHERE status IN ('running', 'queued')
    ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END, message_seq LIMIT 1`;
}

export function parseSpec(run: RunRow): RunSpec | null {
  return run.spec ? (JSON.parse(run.spec) as RunSpec) : null;
}

// ---- lifecycle events ----------------------------------------------------------------

type EventRow = { seq: number; event_id: string; event_type: string; ts: string; payload: string };

const toEvent = (runId: string, agentId: string, r: EventRow): RunEvent => ({
  event_id: r.event_id,
  event_type: r.event_type as EventType,
  ts: r.ts,
  run_id: runId,
  agent_id: agentId,
  seq: r.seq,
  payload: JSON.parse(r.payload) as Record<string, unknown>,
});

/** Appends the run's next event; an illegal order is a bug and throws (inside the caller's transaction). */
export function appendEvent(
  sql: Sql,
  run: { id: string; agent_id: string },
  type: EventType,
  payload: Record<string, unknown>,
  now = new Date(),
): RunEvent {
  const last = sql.one<{ seq: number; event_type: string }>`
    SELECT seq, event_type FROM run_events WHERE run_id = ${run.id} ORDER BY seq DESC LIMIT 1`;
  const previous = last ? { seq: last.seq, event_type: last.event_type as EventType } : undefined;
  const next = nextEvent(previous, { event_type: type, run_id: run.id, agent_id: run.agent_id, payload, now });
  if (!next.ok) throw new Error(`run ${run.id}: ${next.error}`);
  const e = next.event;
  sql.run`INSERT INTO run_events (run_id, seq, event_id, event_type, ts, payload)
          VALUES (${e.run_id}, ${e.seq}, ${e.event_id}, ${e.event_type}, ${e.ts}, ${JSON.stringify(e.payload)})`;
  return e;
}

/** Events of a run with seq > afterSeq, in order. */
export function listEvents(sql: Sql, run: { id: string; agent_id: string }, afterSeq = 0, limit = 1000): RunEvent[] {
  return sql.all<EventRow>`SELECT seq, event_id, event_type, ts, payload FROM run_events WHERE run_id = ${run.id} AND seq > ${afterSeq}
                   ORDER BY seq LIMIT ${limit}`.map((r) => toEvent(run.id, run.agent_id, r));
}

export const isTerminal = (status: string): boolean => status === "completed" || status === "failed" || status === "cancelled";

// ---- S4 §6 traces ---------------------------------------------------------------------

export const TRACE_KINDS = [
  "llm_req",
  "llm_stream",
  "llm_done",
  "notes_patch",
  "actions",
  "retrieval",
  "tool_plan",
  "tool_start",
  "tool_done",
] as const;
export type TraceKind = (typeof TRACE_KINDS)[number];

export interface TraceEvent {
  ts: number;
  kind: TraceKind;
  data: Record<string, unknown>;
}

export function appendTrace(sql: Sql, runId: string, kind: TraceKind, data: Record<string, unknown>, now = Date.now()): void {
  sql.run`INSERT INTO run_traces (run_id, ts, kind, data) VALUES (${runId}, ${now / 1000}, ${kind}, ${JSON.stringify(data)})`;
}

export function listTraces(sql: Sql, runId: string): TraceEvent[] {
  return sql.all<{ ts: number; kind: string; data: string }>`SELECT ts, kind, data FROM run_traces WHERE run_id = ${runId} ORDER BY id`.map(
    (r) => ({ ts: r.ts, kind: r.kind as TraceKind, data: JSON.parse(r.data) as Record<string, unknown> }),
  );
}

// ---- tool executions --------------------------------------------------------------------

export interface ToolExecutionRow {
  run_id: string;
  tool_call_id: string;
  tool: string;
  args: string;
  round: number;
  ordinal: number;
  assistant_seq: number;
  status: "planned" | "started" | "done";
  ok: number | null;
  output: string | null;
  error: string | null;
  summary: string | null;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
  /** The S3 §1.1 request envelope (JSON), once the call was executed or refused. */
  request: string | null;
  /** The policy decision that gated the call (JSON GateDecision). */
  decision: string | null;
  /** The S3 §1.2 response envelope (JSON). */
  response: string | null;
}

/** The S3 §1 request id of a planned call: unique per run, stable across resumes. */
export const toolRequestId = (runId: string, round: number, toolCallId: string): string => `${runId}:${round}:${toolCallId}`;

export function planToolCall(
  sql: Sql,
  c: { runId: string; toolCallId: string; tool: string; args: string; round: number; ordinal: number; assistantSeq: number },
): void {
  sql.run`INSERT INTO tool_executions (run_id, tool_call_id, tool, args, round, ordinal, assistant_seq, status)
          VALUES (${c.runId}, ${c.toolCallId}, ${c.tool}, ${c.args}, ${c.round}, ${c.ordinal}, ${c.assistantSeq}, 'planned')`;
}

/** Calls of the run, in the order they were planned. */
export function runToolExecutions(sql: Sql, runId: string): ToolExecutionRow[] {
  return sql.all<ToolExecutionRow & Record<string, SqlStorageValue>>`
    SELECT * FROM tool_executions WHERE run_id = ${runId} ORDER BY round, ordinal`;
}

/** Planned calls of the run without a recorded result, in order. */
export function unfinishedToolCalls(sql: Sql, runId: string): ToolExecutionRow[] {
  return sql.all<ToolExecutionRow & Record<string, SqlStorageValue>>`
    SELECT * FROM tool_executions WHERE run_id = ${runId} AND status != 'done' ORDER BY round, ordinal`;
}

// ---- failure loop -------------------------------------------------------------------------

export function loadFailureLoop(sql: Sql): FailureLoopState {
  const row = sql.one<{ state: string }>`SELECT state FROM failure_loop WHERE id = 1`;
  return row ? (JSON.parse(row.state) as FailureLoopState) : INITIAL_FAILURE_LOOP;
}

export function saveFailureLoop(sql: Sql, state: FailureLoopState): void {
  sql.run`INSERT INTO failure_loop (id, state) VALUES (1, ${JSON.stringify(state)})
          ON CONFLICT (id) DO UPDATE SET state = excluded.state`;
}

// ---- run row transitions (the engine's writes; the caller wraps them in its transaction) ----

/** The run's message as it stands in the transcript (the engine reads it, never writes it). */
export function transcriptContent(sql: Sql, seq: number): string | undefined {
  return sql.one<{ content: string }>`SELECT content FROM transcript WHERE seq = ${seq}`?.content;
}

/** A queued run starts: running, its first execution. */
export function markRunStarted(sql: Sql, runId: string, now: string): void {
  sql.run`UPDATE runs SET status = 'running', started_at = ${now}, updated_at = ${now}, executions = 1 WHERE id = ${runId}`;
}

/** A running run found on resume counts one more execution (MAX_EXECUTIONS caps them). */
export function countExecution(sql: Sql, runId: string): void {
  sql.run`UPDATE runs SET executions = executions + 1 WHERE id = ${runId}`;
}

/** A pause is a clean stop: the run's execution count starts again. */
export function resetExecutions(sql: Sql, runId: string): void {
  sql.run`UPDATE runs SET executions = 0 WHERE id = ${runId}`;
}

/** Asks a running run to stop at its next step. */
export function requestCancel(sql: Sql, runId: string): void {
  sql.run`UPDATE runs SET cancel_requested = 1 WHERE id = ${runId}`;
}

/** Terminal state: completed with its output. */
export function markRunCompleted(sql: Sql, runId: string, output: string, now: string): void {
  sql.run`UPDATE runs SET status = 'completed', output = ${output}, finished_at = ${now}, updated_at = ${now} WHERE id = ${runId}`;
}

/** Terminal state: failed, its message as output and its code and message as error. */
export function markRunFailed(sql: Sql, runId: string, code: string, message: string, now: string): void {
  sql.run`UPDATE runs SET status = 'failed', output = ${message}, error = ${JSON.stringify({ code, message })},
                 finished_at = ${now}, updated_at = ${now} WHERE id = ${runId}`;
}

/** Terminal state: cancelled, with no output. */
export function markRunCancelled(sql: Sql, runId: string, now: string): void {
  sql.run`UPDATE runs SET status = 'cancelled', output = '', finished_at = ${now}, updated_at = ${now} WHERE id = ${runId}`;
}

/** One model call's usage as the run adds it up: counted tokens (estimated when unreported), what was reported, its cost. */
export interface CallUsage {
  promptTokens: number;
  completionTokens: number;
  /** The provider's own figures; null when it reported none. */
  reported: { prompt: number; completion: number; cached: number } | null;
  /** Pico-USD; null when the model has no pricing or no usage was reported. */
  costPico: number | null;
  /** Issue 33: why the provider's usage block was refused (it counts as unreported), for the call's trace. */
  refused?: string;
}

/** Adds a model call's token usage (and, issue 25 §2, what the provider reported and its cost) to the run. */
export function addRunUsage(sql: Sql, runId: string, u: CallUsage): void {
  const r = u.reported;
  sql.run`UPDATE runs SET prompt_tokens = prompt_tokens + ${u.promptTokens}, completion_tokens = completion_tokens + ${u.completionTokens},
            model_calls = model_calls + 1, unreported_calls = unreported_calls + ${r ? 0 : 1},
            uncosted_calls = uncosted_calls + ${u.costPico === null ? 1 : 0},
            reported_prompt_tokens = reported_prompt_tokens + ${r?.prompt ?? 0},
            reported_completion_tokens = reported_completion_tokens + ${r?.completion ?? 0},
            cached_tokens = cached_tokens + ${r?.cached ?? 0}, cost_pico = cost_pico + ${u.costPico ?? 0}
          WHERE id = ${runId}`;
}

/** A round's tool calls are planned: the round number and the calls the gateway took on. */
export function recordPlannedRound(sql: Sql, runId: string, round: number, takenOn: number, now: string): void {
  sql.run`UPDATE runs SET rounds = ${round}, tool_calls = tool_calls + ${takenOn}, updated_at = ${now}
          WHERE id = ${runId}`;
}

/** The run waits for a human; `now` is given when the wait begins (a resumed wait keeps its updated_at). */
export function markAwaitingApproval(sql: Sql, runId: string, now?: string): void {
  if (now === undefined) sql.run`UPDATE runs SET status = 'awaiting_approval' WHERE id = ${runId}`;
  else sql.run`UPDATE runs SET status = 'awaiting_approval', updated_at = ${now} WHERE id = ${runId}`;
}

/** An approval was decided or expired: the waiting run goes back to running (the deciding call starts it, D-059). */
export function resumeAfterApproval(sql: Sql, runId: string, now: string): void {
  sql.run`UPDATE runs SET status = 'running', updated_at = ${now} WHERE id = ${runId}`;
}

// ---- tool execution transitions -------------------------------------------------------------

/** Names one planned call of a run. */
export interface ToolCallKey {
  runId: string;
  round: number;
  toolCallId: string;
}

/** The call's handler is about to run: a call found `started` on resume is never run again (read-only excepted). */
export function markToolStarted(sql: Sql, k: ToolCallKey, now: string): void {
  sql.run`UPDATE tool_executions SET status = 'started', started_at = ${now}
          WHERE run_id = ${k.runId} AND round = ${k.round} AND tool_call_id = ${k.toolCallId}`;
}

/** The gate's decision on a call, kept while it waits for an approval. */
export function setToolDecision(sql: Sql, k: ToolCallKey, decision: string): void {
  sql.run`UPDATE tool_executions SET decision = ${decision}
          WHERE run_id = ${k.runId} AND round = ${k.round} AND tool_call_id = ${k.toolCallId}`;
}

/** A call's result, with its S3 §1 envelopes and the decision that gated it. */
export function finishToolCall(
  sql: Sql,
  k: ToolCallKey,
  r: {
    ok: boolean;
    output: string | null;
    error: string | null;
    summary: string;
    finishedAt: string;
    durationMs: number;
    request: string;
    response: string;
    decision: string | null;
  },
): void {
  sql.run`UPDATE tool_executions SET status = 'done', ok = ${r.ok ? 1 : 0}, output = ${r.output},
                 error = ${r.error}, summary = ${r.summary}, finished_at = ${r.finishedAt}, duration_ms = ${r.durationMs},
                 request = ${r.request}, response = ${r.response}, decision = ${r.decision}
          WHERE run_id = ${k.runId} AND round = ${k.round} AND tool_call_id = ${k.toolCallId}`;
}

/** A call closed without running: failed with `error`, and (when given) the decision that refused it. */
export function closeToolCall(sql: Sql, k: ToolCallKey, error: string, summary: string, now: string, decision?: string): void {
  if (decision === undefined)
    sql.run`UPDATE tool_executions SET status = 'done', ok = 0, error = ${error}, summary = ${summary}, duration_ms = 0,
                   finished_at = ${now}
            WHERE run_id = ${k.runId} AND round = ${k.round} AND tool_call_id = ${k.toolCallId}`;
  else
    sql.run`UPDATE tool_executions SET status = 'done', ok = 0, error = ${error}, summary = ${summary},
                   duration_ms = 0, finished_at = ${now}, decision = ${decision}
            WHERE run_id = ${k.runId} AND round = ${k.round} AND tool_call_id = ${k.toolCallId}`;
}

/**
 * Whether a run of generation `sessionId` ever planned `request_env_variables`: only then can an env request of
 * this generation exist (the tool is the only thing that opens one), so only then is D1 asked which keys arrived.
 * The subquery reads the partial index of those calls (schema v18), so the answer costs the same however long the
 * session's history is.
 */
export function generationAskedForEnv(sql: Sql, sessionId: string): boolean {
  return (
    sql.one<{ one: number }>`
    SELECT 1 AS one FROM runs WHERE session_id = ${sessionId}
    AND id IN (SELECT run_id FROM tool_executions WHERE tool = 'request_env_variables') LIMIT 1` !== undefined
  );
}
