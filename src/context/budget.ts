/**
 * The per-model context budget (S1 §1.5), enforced before any network call:
 * 1) estimate input tokens, 2) reserve output tokens, 3) apply the model's
 * window, 4) over budget → `OverBudgetError`. There is no global window.
 */
import { GatewayError } from "../errors";
import { estimateTokens } from "./tokens";

/** Tokens a chat message costs beyond its text (role, separators). */
export const MESSAGE_OVERHEAD_TOKENS = 4;

export interface ModelWindow {
  contextWindow: number;
  maxOutputTokens: number;
}

/** Raised before the network when a prompt cannot fit the model's window. */
export class OverBudgetError extends GatewayError {
  readonly estimatedInputTokens: number;
  readonly inputBudget: number;
  constructor(estimatedInputTokens: number, inputBudget: number) {
    super(
      "over_budget",
      `the prompt needs about ${estimatedInputTokens} input tokens but the model allows ${inputBudget} (context window minus reserved output)`,
      {
        status: 413,
      },
    );
    this.name = "OverBudgetError";
    this.estimatedInputTokens = estimatedInputTokens;
    this.inputBudget = inputBudget;
  }
}

/** Estimated input tokens of a list of chat messages. */
export function estimateMessagesTokens(messages: readonly { content?: unknown }[]): number {
  let total = 0;
  for (const m of messages)
    total += MESSAGE_OVERHEAD_TOKENS + estimateTokens(typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""));
  return total;
}

/** The tokens left for input once output is reserved. */
export function inputBudget(window: ModelWindow): number {
  return window.contextWindow - window.maxOutputTokens;
}

/** Throws `OverBudgetError` when `messages` do not fit; returns the estimate otherwise. */
export function enforceBudget(window: ModelWindow, messages: readonly { content?: unknown }[]): { estimated: number; budget: number } {
  const estimated = estimateMessagesTokens(messages);
  const budget = inputBudget(window);
  if (estimated > budget) throw new OverBudgetError(estimated, budget);
  return { estimated, budget };
}
