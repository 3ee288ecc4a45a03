/**
 * A tool round: the run's planned calls executed in order, each gated first (gate.ts), marked `started`
 * before its handler runs and `done` with its result after, in one transaction with its transcript copy,
 * `tool.result` event, trace and failure-loop step (S4 §7). A call found `started` on resume had its effect,
 * or not, and is never run again (read-only tools excepted). A read-only call, which is run again after a crash
 * whatever its mark says, writes its `started` mark and idempotency record with its result instead (D-065). When
 * the failure loop escalates, the calls left are closed unrun and the run completes asking the user for guidance.
 */
import { redactText, secretValuesFromEnv } from "../security/redact";
import { type ToolRequest, ToolResponse } from "../tools/envelope";
import { releaseHoneypotSend, sendCertainlyFailed } from "../tools/honeypot";
import type { GateDecision } from "../tools/policy";
import type { ToolDefinition, ToolOutcome } from "../tools/registry";
import { escalationMessage, recordToolResult } from "./failure-loop";
import { gate } from "./gate";
import { emit, type Finish, type RunContext, safeJson } from "./host";
import type { RunSpec } from "./spec";
import {
  appendTrace,
  closeToolCall,
  finishToolCall,
  getRun,
  loadFailureLoop,
  markToolStarted,
  type RunRow,
  saveFailureLoop,
  type ToolExecutionRow,
  unfinishedToolCalls,
} from "./store";
import { requestEnvelope, runHandler } from "./tool-handler";

/**
 * How one call ended: its outcome, the decision that gated it, whether it was an interrupted call not repeated,
 * and the writes a read-only call left for its result's transaction (its `started` mark and idempotency record).
 */
interface CallEnd {
  outcome: ToolOutcome;
  decision: GateDecision | null;
  replay: boolean;
  deferred?: () => void;
}

/** Runs the unfinished calls of the run in order. Returns a finish when the run pauses, is cancelled or escalates. */
export async function toolRound(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  pending: ToolExecutionRow[],
  signal: AbortSignal,
): Promise<Finish | undefined> {
  for (const call of pending) {
    if (signal.aborted || getRun(ctx.host.sql, run.id)?.cancel_requested)
      return { status: "cancelled", reason: "cancelled while running tools" };
    const started = Date.now();
    const request = requestEnvelope(run, spec, call);
    const end = await runCall(ctx, run, spec, call, request, signal);
    if (!end) return { status: "paused" };
    const escalated = commitToolResult(ctx, run, spec, call, request, end, Date.now() - started);
    if (escalated) {
      // Calls planned after the escalation are not run; they are closed so the log stays complete.
      closeRemaining(ctx, run, "not run: the run stopped to ask the user for guidance");
      return escalated;
    }
  }
  return undefined;
}

/** Gates and runs one call (undefined: the run pauses for an approval). */
async function runCall(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  call: ToolExecutionRow,
  request: ToolRequest,
  signal: AbortSignal,
): Promise<CallEnd | undefined> {
  const { sql, env } = ctx.host;
  const def = ctx.registry.get(call.tool);
  const recorded: GateDecision | null = call.decision ? (JSON.parse(call.decision) as GateDecision) : null;
  if (call.status === "started") {
    // Interrupted after the handler began: run again only what cannot have had an effect.
    if (def?.risk === "read_only")
      return { outcome: (await runHandler(ctx, { request, call, def, signal, spec })).outcome, decision: recorded, replay: false };
    const message = "the gateway was interrupted while this call ran; it was not repeated, so its effect is unknown";
    return { outcome: { ok: false, error: { code: "internal.error", message } }, decision: recorded, replay: true };
  }
  const verdict = await gate(ctx, run, spec, call);
  if (verdict.paused) return undefined;
  if (verdict.outcome) return { outcome: verdict.outcome, decision: verdict.decision, replay: false };
  // A call that may have an effect is marked `started` durably before its handler runs (never run twice); a
  // read-only one is run again after a crash anyway, so its mark waits for its result's commit (D-065).
  const deferred = (def as ToolDefinition).risk === "read_only";
  const startedAt = Date.now();
  const start = () => {
    markToolStarted(sql, { runId: run.id, round: call.round, toolCallId: call.tool_call_id }, new Date(startedAt).toISOString());
    appendTrace(sql, run.id, "tool_start", { tool: call.tool, tool_call_id: call.tool_call_id }, startedAt);
  };
  const reserved = verdict.honeypotSend !== undefined;
  const h = { request, call, def: def as ToolDefinition, signal, spec, honeypotReserved: reserved };
  const ran = await runHandler(ctx, h, deferred ? { deferred } : { start });
  const { outcome } = ran;
  // A honeypot send that certainly did not go out gives its place under the rate limits back.
  if (reserved && !outcome.ok && sendCertainlyFailed(outcome.error.code))
    await releaseHoneypotSend(env.DB, verdict.honeypotSend as number).catch(() => {});
  const later = deferred
    ? () => {
        start();
        ran.record?.();
      }
    : undefined;
  return { outcome, decision: verdict.decision, replay: false, ...(later ? { deferred: later } : {}) };
}

/** A call's result as stored: redacted output, error and summary, and the validated S3 §1.2 response. */
function resultOf(ctx: RunContext, run: RunRow, call: ToolExecutionRow, request: ToolRequest, outcome: ToolOutcome, duration: number) {
  const secrets = secretValuesFromEnv(ctx.host.env);
  const output = outcome.ok ? redactText(JSON.stringify(outcome.output ?? null), secrets) : null;
  const error = outcome.ok ? null : { code: outcome.error.code, message: redactText(outcome.error.message, secrets) };
  const summary = outcome.summary ? redactText(outcome.summary, secrets) : outcome.ok ? `${call.tool} succeeded` : `${call.tool} failed`;
  const finishedAt = new Date().toISOString();
  // S3 §1.2: ok=true ⇔ error=null; no output when ok=false. Validated, so a malformed envelope is a bug caught here.
  const response = ToolResponse.parse({
    request_id: request.request_id,
    run_id: run.id,
    tool: call.tool,
    ok: outcome.ok,
    ...(output !== null ? { output: JSON.parse(output) } : {}),
    error: error ? { ...error, retryable: outcome.ok ? false : (outcome.error.retryable ?? false) } : null,
    duration_ms: duration,
    finished_at: finishedAt,
  });
  return { secrets, output, error, summary, finishedAt, response };
}

/**
 * The call's result, in one transaction: its row, the transcript copy, `tool.result`, the `tool_done` trace
 * and the failure loop's step. Returns the run's finish when the loop escalates.
 */
function commitToolResult(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  call: ToolExecutionRow,
  request: ToolRequest,
  end: CallEnd,
  duration: number,
): Finish | undefined {
  const { sql, storage, logger } = ctx.host;
  const { outcome, decision, replay } = end;
  const { secrets, output, error, summary, finishedAt, response } = resultOf(ctx, run, call, request, outcome, duration);
  // S1 §4.3: outbound text a tool rendered is logged by its hash only.
  if (outcome.rendered_sha256)
    logger.log("info", "tool.rendered", {
      run_id: run.id,
      tool: call.tool,
      tool_call_id: call.tool_call_id,
      ok: outcome.ok,
      rendered_sha256: outcome.rendered_sha256,
    });
  const errorText = error ? `${error.code}: ${error.message}` : undefined;
  let escalated: Finish | undefined;
  // Written outside transactionSync, a read-only call's `started` mark and idempotency record open this event-loop
  // turn's implicit transaction: the result below, and the next round's `model.requested` when nothing real is
  // awaited before it, join it as savepoints — one commit, as a side-effect call's `complete` write makes it.
  end.deferred?.();
  storage.transactionSync(() => {
    finishToolCall(
      sql,
      { runId: run.id, round: call.round, toolCallId: call.tool_call_id },
      {
        ok: outcome.ok,
        output,
        error: error ? JSON.stringify(error) : null,
        summary,
        finishedAt,
        durationMs: duration,
        request: JSON.stringify({ ...request, input: safeJson(call.args) }),
        response: JSON.stringify(response),
        decision: decision ? JSON.stringify(decision) : null,
      },
    );
    ctx.host.appendTranscript({
      role: "tool",
      content: JSON.stringify({ summary, ...(errorText ? { error: errorText } : {}), ...(output ? { output } : {}) }),
      runId: run.id,
      toolName: call.tool,
      toolCallId: call.tool_call_id,
    });
    emit(ctx, run, "tool.result", {
      round: call.round,
      tool: call.tool,
      tool_call_id: call.tool_call_id,
      request_id: request.request_id,
      ok: outcome.ok,
      error,
      summary,
      duration_ms: duration,
      ...(decision ? { gate: decision } : {}),
      ...(replay ? { interrupted: true } : {}),
      ...(outcome.rendered_sha256 ? { rendered_sha256: outcome.rendered_sha256 } : {}),
    });
    appendTrace(sql, run.id, "tool_done", { tool: call.tool, tool_call_id: call.tool_call_id, ok: outcome.ok, duration_ms: duration });
    const result = { tool: call.tool, ok: outcome.ok, ...(errorText ? { error: errorText } : {}), ...(output ? { output } : {}) };
    const state = recordToolResult(loadFailureLoop(sql), result, spec.failureLoop, secrets);
    saveFailureLoop(sql, state);
    if (state.mode === "escalated") {
      const message = escalationMessage(state);
      ctx.host.appendTranscript({ role: "assistant", content: message, runId: run.id });
      escalated = { status: "completed", output: message, payload: { needs_guidance: true } };
    }
  });
  return escalated;
}

/** Closes every call of the run still planned, each failed with `reason` and its `tool.result`. */
export function closeRemaining(ctx: RunContext, run: RunRow, reason: string): void {
  const { sql, storage } = ctx.host;
  for (const call of unfinishedToolCalls(sql, run.id)) {
    storage.transactionSync(() => {
      const error = { code: "invalid.request", message: reason };
      closeToolCall(
        sql,
        { runId: run.id, round: call.round, toolCallId: call.tool_call_id },
        JSON.stringify(error),
        reason,
        new Date().toISOString(),
      );
      emit(ctx, run, "tool.result", {
        round: call.round,
        tool: call.tool,
        tool_call_id: call.tool_call_id,
        ok: false,
        error,
        summary: reason,
        duration_ms: 0,
      });
    });
  }
}
