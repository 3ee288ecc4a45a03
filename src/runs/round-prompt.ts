/**
 * `buildPrompt`, the first step of a model round: the tools the run offers, the prompt stack (L1–L6) with the
 * session's history fitted to what the context budget leaves, the run's own tool rounds as provider messages,
 * and the input-budget check. Also the manifest of a turn the input guard refused (assembled, never sent).
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { estimateMessagesTokens, inputBudget, OverBudgetError } from "../context/budget";
import {
  assemblePromptStack,
  assembleSystemLayers,
  completeStack,
  estimateFixedTokens,
  estimatePromptTokens,
  type HistoryMessage,
  type ToolPolicyId,
  toChatMessages,
} from "../prompts/assemble";
import { REFUSE_SYSTEM_PROMPT } from "../prompts/disclosure";
import { selectTaskMode, type TaskMode } from "../prompts/modes";
import { envAvailableText, fulfilledKeyNames } from "../sandbox/env-requests";
import { hasServiceCommands } from "../storage/setup-records";
import { automationRunContext } from "./completion";
import { type Finish, type RunContext, sessionTypeOf } from "./host";
import { liveMessages } from "./provider-messages";
import { recordRetrieval } from "./round-commits";
import type { RoundPrompt } from "./round-types";
import { offeredTools } from "./run-tools";
import type { RunSpec } from "./spec";
import { generationAskedForEnv, loadFailureLoop, type RunRow } from "./store";
import { notePrompt } from "./turn-line";

/** The manifest note of a turn the input disclosure guard refused (issue 21 §10): assembled, never sent. */
export const REFUSED_TURN_NOTE = `refused before the model call: ${REFUSE_SYSTEM_PROMPT}; no request was sent`;

/** The hidden layers first, to learn the fixed cost; the history fills what the budget leaves; then L6. */
export async function buildPrompt(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  userMessage: string,
): Promise<{ ok: true; value: RoundPrompt } | { ok: false; finish: Finish }> {
  const { offered, policy, recovery, base, memory, automationContext, memoryContext } = await promptBase(ctx, run, spec, userMessage);
  const live = liveMessages(ctx, run, spec, offered.length > 0);
  const liveTokens = estimateMessagesTokens(live);
  // Issue 23: the hidden layers are assembled once; their estimate and L6's are the fixed cost the history fits around.
  const system = await assembleSystemLayers(base);
  const fixedTokens = estimateFixedTokens(system, base.l6Context) + liveTokens;
  const history = await ctx.host.history({ beforeSeq: run.message_seq, spec, fixedTokens });
  if (!history.ok) return { ok: false, finish: overBudget(new OverBudgetError(history.estimatedTokens, history.inputBudget)) };
  recordRetrieval(ctx.host.sql, run.id, { round: run.rounds + 1, summaries: history.summaries.length, memory });
  const prompt = await completeStack(system, {
    history: history.messages.map(toHistoryMessage),
    // The retrieved memory sits immediately before the user's message (DESIGN "Retrieved memory").
    l6Context: [
      ...automationContext,
      ...history.summaries.map((text) => ({ kind: "compaction_summary" as const, text })),
      ...memoryContext,
    ],
  });
  // S1 §4.1 / S2 §6: per-layer ids, hashes and sizes (L6's hash is the user message's), on the turn's one line.
  notePrompt(ctx, run.id, run.rounds + 1, prompt.manifest);
  const messages: ChatCompletionMessageParam[] = [...toChatMessages(prompt), ...live];
  const estimated = estimatePromptTokens(prompt, history.tokens) + liveTokens;
  const budget = inputBudget(spec.model);
  if (estimated > budget) return { ok: false, finish: overBudget(new OverBudgetError(estimated, budget)) };
  return { ok: true, value: { prompt, messages, estimated, offered, policy, recovery } };
}

/**
 * Issue 21 §10: a turn the input guard refused still records the manifest of the prompt it would have sent
 * (the round's stack without history), noted as refused, so every turn has one. No model call, no event.
 */
export async function recordRefusedTurn(ctx: RunContext, run: RunRow, spec: RunSpec, userMessage: string): Promise<void> {
  const { base } = await promptBase(ctx, run, spec, userMessage);
  const prompt = await assemblePromptStack(base);
  const manifest = { ...prompt.manifest, notes: [...prompt.manifest.notes, REFUSED_TURN_NOTE] };
  notePrompt(ctx, run.id, run.rounds + 1, manifest);
  ctx.host.recordManifest(`${run.id}:${run.rounds + 1}:${run.executions}`, manifest);
}

/** What a round's prompt is assembled from before history, with the tools it offers and their protocol. */
async function promptBase(ctx: RunContext, run: RunRow, spec: RunSpec, userMessage: string) {
  const offered = offeredTools(ctx, spec);
  const policy: ToolPolicyId = offered.length === 0 ? "none" : spec.model.supportsTools ? "native" : "markers";
  const recovery = loadFailureLoop(ctx.host.sql).mode === "recovery";
  const toolCatalog =
    policy === "markers" ? offered.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })) : [];
  const inlineRole = ctx.host.inlineRole?.();
  // S4 §5: memory for the user's message goes inside L6 (counted in the fixed cost, so history yields to it).
  const memory = ctx.host.retrieveMemory?.(userMessage, spec.memory) ?? null;
  const memoryContext = memory ? [{ kind: "retrieved_memory" as const, text: memory.text, ids: memory.ids }] : [];
  // Issue 21 §1: a job run is told its own id inside L6 (user-derived context), for automation.complete.
  const jobContext = run.source === "job" ? [{ kind: "automation_run" as const, text: automationRunContext(run.id) }] : [];
  // Issue 21 §2: the key names of fulfilled env requests (values go to the sandbox only, never the prompt).
  const automationContext = [...jobContext, ...(await envAvailable(ctx, run.id))];
  const base = {
    l6Context: [...automationContext, ...memoryContext],
    agentId: spec.agentId,
    channel: spec.channel,
    toolPolicy: policy,
    recovery,
    userMessage,
    toolCatalog,
    // The inline L2 also joins the output guard's hidden texts (the `inline` segment, see round-reply.ts).
    ...(inlineRole ? { inlineRole } : {}),
    // S5 precedence (src/prompts/modes.ts): setup, then automation (jobs), then coding or scratch.
    task: await taskMode(ctx, run.id, spec),
  };
  return { offered, policy, recovery, base, memory, automationContext, memoryContext };
}

/** The run's L5 mode (S5 precedence); whether the agent is configured is read once per run, from D1. */
async function taskMode(ctx: RunContext, runId: string, spec: RunSpec): Promise<TaskMode> {
  const sessionType = sessionTypeOf(ctx);
  if (sessionType === "setup" || spec.task === "automation")
    return selectTaskMode({ sessionType, clientType: spec.task, configured: true });
  let configured = ctx.configured.get(runId);
  if (configured === undefined) {
    configured = await hasServiceCommands(ctx.host.env.DB, spec.agentId);
    ctx.configured.clear(); // one run executes at a time: keep only its answer
    ctx.configured.set(runId, configured);
  }
  return selectTaskMode({ sessionType, configured });
}

/**
 * Issue 23: the run's D1 reads (is the agent configured? which env keys are fulfilled?) made before its message
 * is stored, so that no I/O falls between the turn's first writes and its model request (one commit, T1).
 * The memos keep one run's answers; a run that finds them gone reads again.
 */
export async function prefetchRunReads(ctx: RunContext, runId: string, spec: RunSpec): Promise<void> {
  await Promise.all([taskMode(ctx, runId, spec), envAvailable(ctx, runId)]);
}

/** The L6 note naming the environment variables supplied for this session, if any. */
async function envAvailable(ctx: RunContext, runId: string): Promise<{ kind: "env_available"; text: string }[]> {
  let names = ctx.envNames.get(runId);
  if (names === undefined) {
    const sessionId = ctx.host.session().sessionId;
    // Most generations never asked for a variable: their runs need no D1 read to know none arrived.
    names = generationAskedForEnv(ctx.host.sql, sessionId) ? await fulfilledKeyNames(ctx.host.env.DB, sessionId) : [];
    ctx.envNames.clear(); // one run executes at a time: keep only its answer
    ctx.envNames.set(runId, names);
  }
  return names.length > 0 ? [{ kind: "env_available", text: envAvailableText(names) }] : [];
}

function overBudget(err: OverBudgetError): Finish {
  return { status: "failed", code: "over_budget", message: err.message };
}

function toHistoryMessage(m: { role: "user" | "assistant" | "tool"; content: string }): HistoryMessage {
  // Earlier runs' tool results (S3 §6 Option A text) are replayed as the assistant's own record: a role="tool"
  // message that answers no tool call in the same request is refused by OpenAI-compatible APIs (decision D-013).
  return { role: m.role === "user" ? "user" : "assistant", content: m.content };
}
