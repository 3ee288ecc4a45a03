/**
 * What one model round hands between its steps: the prompt built for it (round-prompt.ts) and the model's answer
 * (model-call.ts), which the round's commits (round-commits.ts) record — apart from all three, so none of them
 * imports another for a type.
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { AssembledPrompt, ToolPolicyId } from "../prompts/assemble";
import type { ChatResult } from "../providers/adapter";
import type { ToolDefinition } from "../tools/registry";
import type { CallUsage } from "./store";

/** A round's prompt, ready for the model: what is sent, what it offers, and its estimated size. */
export interface RoundPrompt {
  prompt: AssembledPrompt;
  messages: ChatCompletionMessageParam[];
  estimated: number;
  offered: ToolDefinition[];
  policy: ToolPolicyId;
  recovery: boolean;
}

/**
 * A model call's usage as the run counts it (estimated when the provider reports none, for the budgets and the
 * OpenAI `usage` block), and — issue 25 §2 — what the provider reported (null: nothing) and the call's cost.
 */
export type RoundUsage = CallUsage;

/** A successful model call: its result, usage, and when it started (for latencies). */
export interface ModelAnswer {
  result: ChatResult;
  usage: RoundUsage;
  started: number;
}
