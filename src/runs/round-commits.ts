/**
 * A model round's durable writes, gathered by phase so the turn's commits can be read (and, in issue 23,
 * regrouped) in one place:
 * - before the network: the retrieval traces, then `commitModelRequested` — manifest, `model.requested`,
 *   `llm_req` — in one transaction (issue 23's T1 for a plain turn, with the run's message and row);
 * - during the call: the stream trace, or the failed call's `llm_done`; a cancelled call's usage and `llm_done`
 *   (`commitCancelledCall`, issue 33);
 * - after the model: `commitModelReply` — usage, `llm_done`, NOTES traces — in one transaction with either the
 *   reply and the run's terminal state (`commitRunEnd`) or the tool plan (`commitToolPlan`);
 * - after each tool: its result (tool-round.ts), in the transaction that also opens the next round when nothing
 *   is awaited in between (a read-only call's `started` mark and idempotency record join it, D-065).
 * What is shipped outside the object afterwards (D1 index rows) is in ship.ts.
 */

import { redactText, secretValuesFromEnv } from "../security/redact";
import { saveLedger } from "../sessions/disclosure-ledger";
import type { Sql } from "../storage/sql";
import { emit, type Finish, type RunContext, safeJson } from "./host";
import { finishRun } from "./lifecycle";
import type { AskedCall, Reply } from "./round-reply";
import type { ModelAnswer, RoundPrompt } from "./round-types";
import type { RunSpec } from "./spec";
import {
  addRunUsage,
  appendTrace,
  type CallUsage,
  closeToolCall,
  getRun,
  isTerminal,
  planToolCall,
  type RunRow,
  recordPlannedRound,
  toolRequestId,
} from "./store";
import { type LimitDecision, TOOL_LIMIT_CODE, type ToolLimitKey, type ToolLimitSplit } from "./tool-limits";

/** Traces what the prompt retrieved: compaction summaries of history, and memory hits with their scores. */
export function recordRetrieval(
  sql: Sql,
  runId: string,
  r: { round: number; summaries: number; memory: { ids: string[]; scores: number[] } | null },
): void {
  if (r.summaries > 0) appendTrace(sql, runId, "retrieval", { summaries: r.summaries });
  if (r.memory) appendTrace(sql, runId, "retrieval", { round: r.round, ids: r.memory.ids, scores: r.memory.scores });
}

/** Before the network: the round's manifest, its `model.requested` event and `llm_req` trace, in one transaction. */
export function commitModelRequested(ctx: RunContext, run: RunRow, spec: RunSpec, round: number, rp: RoundPrompt): void {
  const { sql, storage } = ctx.host;
  storage.transactionSync(() => {
    ctx.host.recordManifest(`${run.id}:${round}:${run.executions}`, rp.prompt.manifest);
    emit(ctx, run, "model.requested", {
      round,
      provider: spec.model.providerId,
      model: spec.model.modelId,
      stack_sha256: rp.prompt.manifest.stack_sha256,
      estimated_input_tokens: rp.estimated,
      tool_policy: rp.policy,
      recovery: rp.recovery,
      stream: spec.model.supportsStreaming,
    });
    appendTrace(sql, run.id, "llm_req", {
      round,
      model: spec.model.ref,
      messages: rp.messages.length,
      tools: rp.offered.length,
      estimated_input_tokens: rp.estimated,
    });
  });
}

/** A streamed answer's chunk count. */
export function recordStream(sql: Sql, runId: string, chunks: number): void {
  appendTrace(sql, runId, "llm_stream", { chunks });
}

/** A model call that failed: its `llm_done` trace with the reason. */
export function recordModelFailure(sql: Sql, runId: string, round: number, reason: string): void {
  appendTrace(sql, runId, "llm_done", { round, ok: false, reason });
}

/** After the model: the call's usage on the run, its `llm_done` trace and the NOTES traces, in one transaction. */
export function commitModelReply(ctx: RunContext, run: RunRow, round: number, answer: ModelAnswer, reply: Reply): void {
  const { sql, storage } = ctx.host;
  const { result, usage } = answer;
  storage.transactionSync(() => {
    addRunUsage(sql, run.id, usage);
    appendTrace(sql, run.id, "llm_done", {
      round,
      ok: true,
      finish_reason: result.finishReason,
      attempts: result.attempts,
      latency_ms: Date.now() - answer.started,
      usage: usageTrace(usage),
      tool_calls: reply.calls.length,
    });
    for (const t of reply.notesTraces) appendTrace(sql, run.id, t.kind, t.data as Record<string, unknown>);
    // Issue 33: what the conversation has released of the hidden layers, with the reply that released it.
    saveLedger(sql, reply.ledger, reply.ledgerLoaded, reply.verdict.blocked ? reply.verdict.reason : undefined);
  });
}

/**
 * Issue 33: a model call cancelled mid-answer still cost tokens: its usage (model-call.ts `unfinishedUsage`) on the
 * run — so it ships to the rollups with the run's index row — and its `llm_done` trace, in one transaction.
 */
export function commitCancelledCall(ctx: RunContext, runId: string, round: number, usage: CallUsage): void {
  const { sql, storage } = ctx.host;
  storage.transactionSync(() => {
    addRunUsage(sql, runId, usage);
    appendTrace(sql, runId, "llm_done", { round, ok: false, reason: "cancelled", usage: usageTrace(usage) });
  });
}

/** A call's usage in its `llm_done` trace. */
function usageTrace(usage: CallUsage): Record<string, unknown> {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    // Issue 25 §2: whether the provider reported these (false: estimates), the cached part, the cost (pico-USD);
    // issue 33: why the provider's figures were refused, when they were.
    reported: usage.reported !== null,
    ...(usage.reported ? { cached_tokens: usage.reported.cached } : {}),
    ...(usage.refused ? { refused: usage.refused } : {}),
    cost_pico: usage.costPico,
  };
}

/** The reply that ends the run (or a failed one's last words), stored before the run's terminal state. */
export function storeReply(ctx: RunContext, run: RunRow, visible: string): void {
  ctx.host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
}

/**
 * Issue 23's T3, the run's last commit: `writes` (the last model call's usage and traces), the reply, and the
 * terminal state with its event, in one transaction. A run cancelled meanwhile keeps its cancellation.
 */
export function commitRunEnd(
  ctx: RunContext,
  run: RunRow,
  finish: Exclude<Finish, { status: "paused" }>,
  reply: string,
  writes?: () => void,
): void {
  const { sql, storage } = ctx.host;
  storage.transactionSync(() => {
    writes?.();
    storeReply(ctx, run, reply);
    const current = getRun(sql, run.id) as RunRow;
    if (!isTerminal(current.status)) finishRun(ctx, current, finish);
  });
}

/**
 * The tool plan, in one transaction with `writes` (the model call's usage and traces): the assistant message,
 * each call planned with its `tool.call` event, the calls a cap refused closed at once, the `tool_plan` trace
 * and the run's round and call counters.
 */
export function commitToolPlan(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  p: { round: number; visible: string; calls: AskedCall[]; limits: ToolLimitSplit<number> },
  writes?: () => void,
): void {
  const { sql, storage } = ctx.host;
  const { round, calls } = p;
  const secrets = secretValuesFromEnv(ctx.host.env);
  const refusedAt = new Map(p.limits.refused.map((r) => [r.call, r]));
  storage.transactionSync(() => {
    writes?.();
    const seq = ctx.host.appendTranscript({ role: "assistant", content: p.visible, runId: run.id });
    const seen = new Set<string>();
    const refused: OverLimit[] = [];
    calls.forEach((c, ordinal) => {
      // Ids must be unique within a response; a repeat gets a derived id (its result reports the problem).
      const id = seen.has(c.id) ? `${c.id}#${ordinal}` : c.id;
      seen.add(id);
      const args = typeof c.args === "string" ? c.args : redactText(JSON.stringify(c.args), secrets);
      planToolCall(sql, { runId: run.id, toolCallId: id, tool: c.tool, args, round, ordinal, assistantSeq: seq });
      emit(ctx, run, "tool.call", {
        round,
        tool: c.tool,
        tool_call_id: id,
        request_id: toolRequestId(run.id, round, id),
        args: safeJson(args),
      });
      const limit = refusedAt.get(ordinal);
      if (limit) refused.push({ id, tool: c.tool, limit: limit.limit, message: limit.message });
    });
    for (const r of refused) refuseOverLimit(ctx, run, spec, round, r);
    appendTrace(sql, run.id, "tool_plan", { round, calls: calls.map((c) => ({ id: c.id, tool: c.tool })) });
    // `tool_calls` counts the calls the gateway took on (gated or ran), not the ones a cap refused.
    recordPlannedRound(sql, run.id, round, calls.length - refused.length, new Date().toISOString());
  });
}

type OverLimit = { id: string; tool: string; limit: ToolLimitKey; message: string };

/**
 * Closes a planned call a cap refused: done, `policy.denied`, its decision naming the limit, and a `tool.result`
 * event. Called inside the planning transaction. The failure loop does not count it (the tool never ran), and it
 * is not copied to the transcript: the model reads it in the run's next request, later runs need not.
 */
function refuseOverLimit(ctx: RunContext, run: RunRow, spec: RunSpec, round: number, r: OverLimit): void {
  const decision: LimitDecision = {
    outcome: "denied",
    code: TOOL_LIMIT_CODE,
    reason: r.message,
    tool: ctx.registry.get(r.tool)?.name ?? r.tool,
    risk: ctx.registry.get(r.tool)?.risk ?? null,
    channel: ctx.host.channel(),
    policy_id: spec.policy.id,
    limit: r.limit,
  };
  const error = { code: TOOL_LIMIT_CODE, message: r.message };
  const summary = `${r.tool} not run: ${r.limit}`;
  const key = { runId: run.id, round, toolCallId: r.id };
  closeToolCall(ctx.host.sql, key, JSON.stringify(error), summary, new Date().toISOString(), JSON.stringify(decision));
  emit(ctx, run, "tool.result", {
    round,
    tool: r.tool,
    tool_call_id: r.id,
    request_id: toolRequestId(run.id, round, r.id),
    ok: false,
    error,
    summary,
    duration_ms: 0,
    gate: decision,
  });
}
