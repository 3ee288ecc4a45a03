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
