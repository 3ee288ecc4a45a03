/**
 * One guarded model turn: the disclosure guard before the model, assembly,
 * the model call, the output guard after it (S1 §2.5, S2 §5). A refused
 * request never reaches the model; a reply that echoes hidden text never
 * reaches the user. The run engine calls this with its provider adapter.
 */
import { enforceBudget, type ModelWindow } from "../context/budget";
import type { Logger } from "../observability/logger";
import { type AssembledPrompt, type AssemblyInput, assemblePromptStack, logPromptAssembly, toChatMessages } from "./assemble";
import { classifyDisclosureRequest, disclosureRefusalMessage, REFUSE_SYSTEM_PROMPT } from "./disclosure";
import type { PromptManifest } from "./manifest";
import { checkOutput } from "./output-guard";

export type GuardedTurn =
  | { status: "answered"; reply: string; manifest: PromptManifest }
  | { status: "refused"; stage: "input"; code: typeof REFUSE_SYSTEM_PROMPT; reply: string; signals: string[] }
  | { status: "refused"; stage: "output"; code: typeof REFUSE_SYSTEM_PROMPT; reply: string; manifest: PromptManifest; reason: string };

/**
 * Runs one turn through both guards and the budget; `callModel` is invoked only
 * when the input guard passes and the prompt fits `context.window` (S1 §1.5:
 * over budget → `OverBudgetError` before any network call).
 */
export async function runGuardedTurn(
  input: AssemblyInput,
  callModel: (prompt: AssembledPrompt) => Promise<string>,
  context: { logger: Logger; requestId: string; window?: ModelWindow },
): Promise<GuardedTurn> {
  const verdict = classifyDisclosureRequest(input.userMessage);
  if (verdict.refuse) {
    context.logger.log("info", "prompt.disclosure_refused", { request_id: context.requestId, stage: "input", signals: verdict.signals });
    return { status: "refused", stage: "input", code: REFUSE_SYSTEM_PROMPT, reply: disclosureRefusalMessage(), signals: verdict.signals };
  }
  const prompt = await assemblePromptStack(input);
  logPromptAssembly(context.logger, context.requestId, prompt.manifest);
  if (context.window) enforceBudget(context.window, toChatMessages(prompt));
  const reply = await callModel(prompt);
  const inlineHidden = prompt.system.filter((s) => s.id === "inline").map((s) => s.content);
  const output = checkOutput(reply, inlineHidden);
  if (output.blocked) {
    context.logger.log("warn", "prompt.disclosure_refused", { request_id: context.requestId, stage: "output", signals: [output.reason] });
    return {
      status: "refused",
      stage: "output",
      code: REFUSE_SYSTEM_PROMPT,
      reply: disclosureRefusalMessage(),
      manifest: prompt.manifest,
      reason: output.reason,
    };
  }
  return { status: "answered", reply, manifest: prompt.manifest };
}
