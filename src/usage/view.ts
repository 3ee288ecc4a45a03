/**
 * A run's usage and cost as the admin run view and the OpenAI `usage` block show them (issue 25 §2, D-078), from the
 * run's row alone (schema v20): no read beyond the row the view already has.
 */
import type { RunSpec } from "../runs/spec";
import type { RunRow } from "../runs/store";
import { usdOfPico } from "./cost";

/** Provider-reported usage of a run: what the admin run view shows as `usage`. */
export interface RunUsage {
  /** `provider:model` the run called ("" before its spec is known). */
  model: string;
  /** Model calls that answered, and those of them whose provider reported no usage (their tokens are not counted here). */
  requests: number;
  unreported_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  total_tokens: number;
}

/** The run's cost: USD as an exact decimal string; null when its model has no pricing or a call reported no usage. */
export type RunCost = { usd: string } | null;

/** The run's `usage` and `cost` from its row. */
export function runUsageOf(run: RunRow, spec: RunSpec | null): { usage: RunUsage; cost: RunCost } {
  const usage: RunUsage = {
    model: spec?.model.ref ?? "",
    requests: run.model_calls,
    unreported_requests: run.unreported_calls,
    prompt_tokens: run.reported_prompt_tokens,
    completion_tokens: run.reported_completion_tokens,
    cached_tokens: run.cached_tokens,
    total_tokens: run.reported_prompt_tokens + run.reported_completion_tokens,
  };
  const costed = run.uncosted_calls === 0 && (run.model_calls > 0 || spec?.model.pricing !== undefined);
  return { usage, cost: costed ? { usd: usdOfPico(run.cost_pico) } : null };
}

/**
 * What the OpenAI `usage` block adds to its standard fields: `prompt_tokens_details.cached_tokens` when the provider
 * reported cached tokens, and `cost_usd` (an extra field OpenAI clients ignore) when the run's cost is known.
 */
export function openAiUsageExtras(run: RunRow): { cached_tokens?: number; cost_usd?: string } {
  return {
    ...(run.cached_tokens > 0 ? { cached_tokens: run.cached_tokens } : {}),
    ...(run.uncosted_calls === 0 && run.model_calls > 0 ? { cost_usd: usdOfPico(run.cost_pico) } : {}),
  };
}

/** Issue 25 §3 (D-082): a listed run's provider-reported tokens, as GET /api/admin/runs shows them. */
export interface ListedTokens {
  prompt: number;
  completion: number;
  cached: number;
  total: number;
}

/** The usage columns of a run's D1 index row that the runs list reads (cost as exact decimal text). */
export interface IndexedUsage {
  requests: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  cost_pico: string | number;
}

/**
 * A listed run's `tokens` and `cost` from its index row alone, by the OpenAI block's rule: a cost only when the run
 * made a call and every call was costed (a run with no call cannot tell an unpriced model from a free one: null).
 */
export function listedUsageOf(u: IndexedUsage): { tokens: ListedTokens; cost: RunCost } {
  return {
    tokens: {
      prompt: u.prompt_tokens,
      completion: u.completion_tokens,
      cached: u.cached_tokens,
      total: u.prompt_tokens + u.completion_tokens,
    },
    cost: u.requests > 0 && u.uncosted_requests === 0 ? { usd: usdOfPico(u.cost_pico) } : null,
  };
}
