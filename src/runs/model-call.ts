/**
 * `reserveBudget` and `callModel`, the network steps of a model round: the agent's (and the caller's) daily
 * token budget reserved before the request and settled to the reported usage after it, the provider call
 * (streamed when the model streams) under the run's cancellation — a cancelled call charged for what it got, never
 * 0 (issue 33) — its fields on the turn's log line, and the `debug.content` lines of a local model when the agent
 * turns them on (S1 §4.2).
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { estimateMessagesTokens } from "../context/budget";
import { GatewayError } from "../errors";
import { type ChatResult, chat, ProviderError, streamChat, type ToolSpec } from "../providers/adapter";
import { resolveBoundProviderKey } from "../providers/api-key";
import { redactPersonalData, redactText, secretValuesFromEnv } from "../security/redact";
import type { ToolDefinition } from "../tools/registry";
import { callCostPico } from "../usage/cost";
import { runCallerKey } from "./caller";
import type { Finish, RunContext } from "./host";
import { commitCancelledCall, recordModelFailure, recordStream } from "./round-commits";
import type { ModelAnswer, RoundPrompt, RoundUsage } from "./round-types";
import type { RunSpec } from "./spec";
import type { RunRow } from "./store";
import { streamRelease } from "./stream-release";
import { reserveCallerTokens, settleCallerTokens } from "./token-budget";
import { noteModelCall } from "./turn-line";

/** Tokens held against the daily budgets until the call settles; null when the agent sets no budget. */
export type BudgetHold = { day: string; reserved: number; caller: string | null; keyId?: string } | null;

/**
 * The agent's token budget, reserved before the network (estimated input + the model's output reservation).
 * Issue 20 §4: and the caller's own share of it, when the agent sets one (both reserved, or neither).
 * Issue 25 §1: and the API key's own daily budget, when the run's key has one (all reserved, or none).
 */
export async function reserveBudget(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  estimated: number,
): Promise<{ ok: true; hold: BudgetHold } | { ok: false; finish: Finish }> {
  const callerLimit = spec.tokensPerCallerPerDay ?? null;
  const key = spec.keyBudget;
  if (spec.tokensPerDay === null && callerLimit === null && !key) return { ok: true, hold: null };
  const caller = runCallerKey(spec, run);
  const need = estimated + spec.model.maxOutputTokens;
  const r = await reserveCallerTokens(ctx.host.env.DB, {
    agentId: spec.agentId,
    caller,
    tokens: need,
    agentLimit: spec.tokensPerDay,
    callerLimit,
    now: new Date(),
    ...(key ? { key } : {}),
  });
  if (r.ok) return { ok: true, hold: r };
  const who =
    r.scope === "agent"
      ? `agent "${spec.agentId}"`
      : r.scope === "key"
        ? `key ${key?.keyId}`
        : `caller "${caller}" of agent "${spec.agentId}"`;
  return {
    ok: false,
    finish: {
      status: "failed",
      code: "over_budget",
      message: `${who} has used ${r.used} of its ${r.limit} tokens for ${r.day} (UTC); this call needs up to ${need}`,
    },
  };
}

/** Calls the model with the round's prompt; settles the budget hold either way. A provider failure fails the run. */
export async function callModel(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  rp: RoundPrompt,
  round: number,
  hold: BudgetHold,
  signal: AbortSignal,
): Promise<{ ok: true; answer: ModelAnswer } | { ok: false; finish: Finish }> {
  const { env } = ctx.host;
  const started = Date.now();
  const line: CallLine = {
    provider: spec.model.providerId,
    model: spec.model.modelId,
    stack_sha256: rp.prompt.manifest.stack_sha256,
    estimated_input_tokens: rp.estimated,
  };
  // Issue 33: the text streamed so far, which a call cancelled mid-answer is charged for.
  let streamed = "";
  let result: ChatResult;
  try {
    // Issue 23: each streamed piece goes to the guarded release (a no-op unless an API caller streams the run).
    const release = streamRelease(
      ctx,
      run.id,
      rp.prompt.system.filter((s) => s.id === "inline").map((s) => s.content),
    );
    const onDelta = (piece: string) => {
      streamed += piece;
      release(piece);
    };
    result = await request(ctx, spec, rp.messages, rp.policy === "native" ? rp.offered : [], signal, run.id, onDelta);
  } catch (err) {
    if (signal.aborted) return cancelledCall(ctx, run, spec, { round, hold, line, usage: unfinishedUsage(spec, rp.estimated, streamed) });
    if (hold) await settleCallerTokens(env.DB, spec.agentId, hold, 0).catch(() => {});
    if (err instanceof ProviderError || err instanceof GatewayError) {
      const reason = err instanceof ProviderError ? err.reason : err.code;
      recordModelFailure(ctx.host.sql, run.id, round, reason);
      noteModelCall(ctx, run.id, { ...line, call: "failed", reason, latency_ms: Date.now() - started });
      return { ok: false, finish: { status: "failed", code: err.code, message: err.message } };
    }
    throw err;
  }
  const usage = callUsage(spec, result, rp.estimated);
  if (hold) await settleCallerTokens(env.DB, spec.agentId, hold, usage.promptTokens + usage.completionTokens).catch(() => {});
  // Cancelled with the answer in — or partly in: the openai SDK ends a stream quietly when it is aborted — it is
  // charged what it got (issue 33); the hold is settled already.
  if (signal.aborted) return cancelledCall(ctx, run, spec, { round, hold: null, line, usage });
  noteModelCall(ctx, run.id, {
    ...line,
    call: "ok",
    attempts: result.attempts,
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    ...(usage.refused ? { usage_refused: usage.refused } : {}),
    latency_ms: Date.now() - started,
  });
  return { ok: true, answer: { result, usage, started } };
}

/** The call's fields on the turn's log line, known before the network. */
type CallLine = { provider: string; model: string; stack_sha256: string; estimated_input_tokens: number };

const CANCELLED: Finish = { status: "cancelled", reason: "cancelled while the model was answering" };

/**
 * Issue 33: a call cancelled while the model was answering is charged, never 0 — its budget hold settled to `usage`
 * (unless already settled: `hold` null), and its usage recorded on the run, which ships it to the rollups.
 */
async function cancelledCall(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  c: { round: number; hold: BudgetHold; line: CallLine; usage: RoundUsage },
): Promise<{ ok: false; finish: Finish }> {
  const { usage } = c;
  if (c.hold) await settleCallerTokens(ctx.host.env.DB, spec.agentId, c.hold, usage.promptTokens + usage.completionTokens).catch(() => {});
  commitCancelledCall(ctx, run.id, c.round, usage);
  noteModelCall(ctx, run.id, {
    ...c.line,
    call: "cancelled",
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
  });
  return { ok: false, finish: CANCELLED };
}

/**
 * Issue 33: the usage of a call cancelled before its answer was in, with nothing reported: the prompt estimate plus
 * the tokens of the text streamed so far — or, from a model that does not stream (nothing to go by, and the
 * provider may finish the answer anyway), its whole output reservation. Unreported, so it has no cost.
 */
function unfinishedUsage(spec: RunSpec, estimated: number, streamed: string): RoundUsage {
  const completion = spec.model.supportsStreaming ? estimateMessagesTokens([{ content: streamed }]) : spec.model.maxOutputTokens;
  return { promptTokens: estimated, completionTokens: completion, reported: null, costPico: null };
}

/**
 * The call's usage: the provider's figures (and their cost, when the model is priced), else estimates and no cost —
 * also when the provider's figures were refused (issue 33: `acceptUsage`), with the reason.
 */
function callUsage(spec: RunSpec, result: ChatResult, estimated: number): RoundUsage {
  const u = result.usage;
  if (!u)
    return {
      promptTokens: estimated,
      completionTokens: estimateMessagesTokens([{ content: result.content }]),
      reported: null,
      costPico: null,
      ...(result.usageRefused ? { refused: result.usageRefused } : {}),
    };
  const reported = { prompt: u.promptTokens, completion: u.completionTokens, cached: u.cachedTokens ?? 0 };
  const pricing = spec.model.pricing;
  return {
    promptTokens: u.promptTokens,
    completionTokens: u.completionTokens,
    reported,
    costPico: pricing ? callCostPico(pricing, reported) : null,
  };
}

/** The provider request itself: one chat call, or a stream read to its end. */
async function request(
  ctx: RunContext,
  spec: RunSpec,
  messages: ChatCompletionMessageParam[],
  offered: ToolDefinition[],
  signal: AbortSignal,
  runId: string,
  onDelta: (piece: string) => void,
): Promise<ChatResult> {
  const apiKey = resolveBoundProviderKey(ctx.host.env, spec.model.providerId, spec.model, spec.secretOrigins);
  const toolSpecs: ToolSpec[] = offered.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters }));
  const req = { model: spec.model, apiKey, messages, ...(toolSpecs.length ? { tools: toolSpecs } : {}) };
  const options = { maxAttempts: spec.providerAttempts, timeoutMs: spec.providerTimeoutMs, signal };
  if (!spec.model.supportsStreaming) return chat(req, options);
  let chunks = 0;
  for await (const event of streamChat(req, signal, options)) {
    if (event.type === "delta") {
      chunks++;
      onDelta(event.content);
    } else {
      recordStream(ctx.host.sql, runId, chunks);
      return event.result;
    }
  }
  throw new ProviderError("unreachable", `the stream from ${spec.model.ref} ended without a result`, false);
}

/**
 * S1 §4.2 / §4.5: message text reaches the logs only when `logging.debugContent` is on AND the model is on a
 * local provider; secret patterns and configured secret values are redacted, and emails/phones if configured.
 */
export function debugContent(ctx: RunContext, run: RunRow, spec: RunSpec, round: number, userMessage: string, reply: string): void {
  const debug = spec.debugContent;
  if (!debug?.enabled || !spec.model.local) return;
  const { host } = ctx;
  const secrets = secretValuesFromEnv(host.env);
  const clean = (text: string) => redactPersonalData(redactText(text, secrets), { emails: debug.redactEmails, phones: debug.redactPhones });
  if (round === 1) host.logger.log("info", "debug.content", { run_id: run.id, round, role: "user", text: clean(userMessage) });
  // The reply as it will be stored: a fragment that completes a secret split over replies is redacted here too.
  const stored = redactText(reply, secrets);
  const text = redactPersonalData(host.redactSplitReply?.(stored, false) ?? stored, {
    emails: debug.redactEmails,
    phones: debug.redactPhones,
  });
  host.logger.log("info", "debug.content", { run_id: run.id, round, role: "assistant", text });
}
