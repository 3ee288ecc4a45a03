/**
 * Reading runs back: a run in S3 §5's shape, its events after a seq (long-polling when there are none yet), waiting
 * for a run to end or pause, and the admin's full detail (events, S4 §6 trace, prompt manifests, tool calls).
 * Read-only: runs are written by the run engine.
 */
import type { RunLine } from "../observability/logger";
import { completionOf } from "../runs/completion";
import type { RunEngine, Stopped } from "../runs/engine";
import type { RunEvent } from "../runs/events";
import { getRun, isTerminal, listEvents, listTraces, parseSpec, type RunRow, runToolExecutions, type TraceEvent } from "../runs/store";
import { type RunView, runView } from "../runs/view";
import type { Sql } from "../storage/sql";
import type { ToolRequest, ToolResponse } from "../tools/envelope";
import { openAiUsageExtras, type RunCost, type RunUsage, runUsageOf } from "../usage/view";
import { runManifests, type StoredManifest } from "./manifests";
import type { RunWaiters } from "./run-waiters";
import { pendingApprovalsOf } from "./session-runs-store";

/** The longest a caller may wait for a run in one call. */
const MAX_WAIT_MS = 60_000;

/** A run as `awaitRun` answers it. */
export interface AwaitedRun {
  view: RunView;
  callerId: string | null;
  finished: boolean;
  paused: boolean;
  /** Counted tokens (estimates for calls with no reported usage); issue 25 §2: cached tokens and cost where known. */
  usage: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; cost_usd?: string };
  pendingApprovals: { approval_id: string; tool: string }[];
  /** A failed run's code and message. */
  error: { code: string; message: string } | null;
  /**
   * D-068: the run's own log lines, held for this caller instead of printed — only when the caller waited for the
   * run in the call that started it and got it back ended or paused; the caller prints them in its request line.
   */
  runLines?: RunLine[];
}

/** A run with everything recorded about it (admin). */
export interface RunDetail {
  view: RunView;
  events: RunEvent[];
  trace: TraceEvent[];
  manifests: StoredManifest[];
  toolCalls: { request: ToolRequest | null; response: ToolResponse | null }[];
  /** Issue 25 §2: provider-reported usage and the run's cost (D-078). */
  usage: RunUsage;
  cost: RunCost;
}

/** A run in S3 §5's shape, with the caller that queued it (for access checks), or null. */
export function runRecord(sql: Sql, runId: string): { view: RunView; callerId: string | null; sessionId: string } | null {
  const run = getRun(sql, runId);
  return run ? runRecordOf(sql, run) : null;
}

/** `runRecord` of a run row the caller has just read. */
export function runRecordOf(sql: Sql, run: RunRow): { view: RunView; callerId: string | null; sessionId: string } {
  return {
    view: runView(run, runToolExecutions(sql, run.id), Date.now(), completionOf(sql, run)),
    callerId: run.caller_id,
    sessionId: run.session_id,
  };
}

/** A run's lifecycle events after `afterSeq`, and whether it has ended; with `waitMs`, waits (capped) for the next event if none yet. */
export async function runEvents(
  sql: Sql,
  waiters: RunWaiters,
  runId: string,
  o: { afterSeq: number; limit: number; waitMs: number },
): Promise<{ events: RunEvent[]; finished: boolean; callerId: string | null; agentId: string } | null> {
  const read = () => {
    const run = getRun(sql, runId);
    if (!run) return null;
    const events = listEvents(sql, run, o.afterSeq, Math.max(1, Math.min(1000, o.limit)));
    return { events, finished: isTerminal(run.status), callerId: run.caller_id, agentId: run.agent_id };
  };
  const first = read();
  // Long polling, no busy loop.
  if (!first || first.events.length > 0 || first.finished || o.waitMs <= 0) return first;
  await waiters.next(runId, Math.min(o.waitMs, MAX_WAIT_MS));
  return read();
}

/**
 * Waits (at most `waitMs`, capped at 60 s) for a run to end — or, with `untilPaused`, to stop for a human
 * approval — and answers the run as S3 shows it either way, with its token usage so far (from the provider's
 * figures) and the approvals it waits for.
 */
export async function awaitRun(
  sql: Sql,
  waiters: RunWaiters,
  runId: string,
  waitMs: number,
  opts: { untilPaused?: boolean } = {},
): Promise<AwaitedRun | null> {
  const deadline = Date.now() + Math.min(Math.max(0, waitMs), MAX_WAIT_MS);
  for (;;) {
    const run = getRun(sql, runId);
    if (!run) return null;
    const finished = isTerminal(run.status);
    const paused = run.status === "awaiting_approval";
    if (finished || (paused && opts.untilPaused) || Date.now() >= deadline) return awaitedOf(sql, run);
    await waiters.next(runId, deadline - Date.now());
  }
}

/** A run as `awaitRun` answers it, from its row; the tool calls and completion are read only when it has any. */
function awaitedOf(sql: Sql, run: RunRow): AwaitedRun {
  const paused = run.status === "awaiting_approval";
  const calls = run.tool_calls > 0 || paused;
  return {
    view: runView(
      run,
      calls ? runToolExecutions(sql, run.id) : [],
      Date.now(),
      calls || run.source === "job" ? completionOf(sql, run) : undefined,
    ),
    callerId: run.caller_id,
    finished: isTerminal(run.status),
    paused,
    usage: { prompt_tokens: run.prompt_tokens, completion_tokens: run.completion_tokens, ...openAiUsageExtras(run) },
    error: run.status === "failed" && run.error ? (JSON.parse(run.error) as { code: string; message: string }) : null,
    pendingApprovals: paused ? pendingApprovalsOf(sql, run.id) : [],
  };
}

/**
 * Issue 23: waits for a run this instance executes inline, answered from the row the engine hands back when it
 * stops (not polled from SQLite); after `waitMs` (capped), or a pause the caller does not stop at, as `awaitRun`.
 * Register before starting the run (`stopped` is the engine's `whenStopped`). D-068: answered from that row, the
 * run's own log lines go back with it (`runLines`) for the caller's request line; otherwise what was held for the
 * caller is printed here, at once, and the run's later lines as they come.
 */
export async function awaitInline(
  sql: Sql,
  waiters: RunWaiters,
  engine: RunEngine,
  stopped: Promise<Stopped>,
  q: { runId: string; waitMs: number; untilPaused?: boolean },
): Promise<AwaitedRun | null> {
  const deadline = Date.now() + Math.min(Math.max(0, q.waitMs), MAX_WAIT_MS);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((r) => (timer = setTimeout(() => r(null), deadline - Date.now())));
  const stop = await Promise.race([stopped, timeout]);
  clearTimeout(timer);
  if (stop && (isTerminal(stop.row.status) || (stop.row.status === "awaiting_approval" && q.untilPaused))) {
    try {
      return { ...awaitedOf(sql, stop.row), runLines: stop.lines };
    } catch (err) {
      engine.forget(q.runId, stop.lines);
      throw err;
    }
  }
  engine.forget(q.runId, stop?.lines);
  // A stop that came as the wait expired, after the race was decided: its lines are printed, not lost.
  if (!stop) void stopped.then((late) => engine.forget(q.runId, late.lines));
  return awaitRun(sql, waiters, q.runId, deadline - Date.now(), { untilPaused: q.untilPaused });
}

/** Admin: the run with every event, its S4 §6 trace and the prompt manifest of each model call. */
export function runDetail(sql: Sql, runId: string): RunDetail | null {
  const run = getRun(sql, runId);
  if (!run) return null;
  const manifests = runManifests(sql, runId);
  const executions = runToolExecutions(sql, runId);
  return {
    view: runView(run, executions, Date.now(), completionOf(sql, run)),
    toolCalls: executions.map((e) => ({
      request: e.request ? (JSON.parse(e.request) as ToolRequest) : null,
      response: e.response ? (JSON.parse(e.response) as ToolResponse) : null,
    })),
    events: listEvents(sql, run, 0, 100_000),
    trace: listTraces(sql, runId),
    manifests,
    ...runUsageOf(run, parseSpec(run)),
  };
}
