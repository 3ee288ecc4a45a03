/**
 * The run engine: executes a session's queued runs inside its SessionDO, one
 * at a time, in arrival order, driven by the object's alarm (S3 §2, S4 §3,
 * §7, S1 §1.5, DESIGN "Tool calls", "Failure loop").
 *
 * A run is a loop of rounds: build the prompt (history before the run's
 * message, L6, and the run's own tool rounds), check the context budget and
 * the agent's token budget, call the model, then either run the tool calls it
 * asked for or finish with its reply. Every step is persisted — in one storage
 * transaction with the events it emits — before the next begins, so a run
 * interrupted by eviction, a deploy or a crash resumes where it stopped:
 * - a model call that was in flight is made again (it had no effect);
 * - a tool call is marked `started` before its handler runs and `done` with
 *   its result after; a call found `started` on resume had its effect, or not,
 *   and is never run again (read-only tools excepted) — its result says so.
 * After MAX_EXECUTIONS interrupted attempts a run fails rather than loop.
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { estimateMessagesTokens, inputBudget, OverBudgetError } from "../context/budget";
import { capText } from "../context/caps";
import { GatewayError } from "../errors";
import { abandon, type Begin, begin, canonicalJson, complete, requestHash } from "../idempotency/store";
import type { Logger } from "../observability/logger";
import {
  assemblePromptStack,
  estimatePromptTokens,
  type HistoryMessage,
  logPromptAssembly,
  type ToolPolicyId,
  toChatMessages,
} from "../prompts/assemble";
import { sendApprovalChannel } from "../prompts/channels";
import { classifyDisclosureRequest, disclosureRefusalMessage, REFUSE_SYSTEM_PROMPT } from "../prompts/disclosure";
import { sha256Hex } from "../prompts/hash";
import type { PromptManifest } from "../prompts/manifest";
import { modeToolsFor, selectTaskMode, type TaskMode } from "../prompts/modes";
import { checkOutput } from "../prompts/output-guard";
import { guardArguments, isWithheld, WITHHELD_ERROR } from "../prompts/tool-args-guard";
import { type ChatResult, chat, ProviderError, streamChat, type ToolCall, type ToolSpec } from "../providers/adapter";
import { resolveBoundProviderKey } from "../providers/api-key";
import { redactPersonalData, redactText, secretValuesFromEnv } from "../security/redact";
import { hasServiceCommands } from "../storage/setup-records";
import type { Sql } from "../storage/sql";
import { clampTimeout, ToolRequest, ToolResponse } from "../tools/envelope";
import "../tools/builtin";
import { envAvailableText, fulfilledKeyNames } from "../sandbox/env-requests";
import { honeypotArgs } from "../tools/builtin/message";
import { checkHoneypot, honeypotRecipient, releaseHoneypotSend, reserveHoneypotSend, sendCertainlyFailed } from "../tools/honeypot";
import { decide, type GateDecision } from "../tools/policy";
import {
  tools as defaultRegistry,
  invokeTool,
  type SessionToolHost,
  type SessionType,
  type ToolDefinition,
  type ToolOutcome,
  type ToolRegistry,
} from "../tools/registry";
import { lockedSchemaHash, schemaHash } from "../tools/schema-lock";
import { toWireName } from "../tools/wire-names";
import {
  type ApprovalRow,
  type ApprovalSlot,
  approvalForCall,
  argsDigest,
  decideApprovalRow,
  getApproval,
  indexApproval,
  insertApproval,
  mintApprovalId,
  overdueApprovals,
  reserveApprovalSlot,
} from "./approvals";
import { runCallerKey } from "./caller";
import { automationRunContext, completionOf, completionOutput, recordedCompletion } from "./completion";
import type { EventType, RunEvent } from "./events";
import { escalationMessage, INITIAL_FAILURE_LOOP, recordToolResult } from "./failure-loop";
import { indexRun } from "./index-d1";
import type { RunSpec } from "./spec";
import {
  appendEvent,
  appendTrace,
  getRun,
  isTerminal,
  loadFailureLoop,
  nextRunnable,
  parseSpec,
  planToolCall,
  type RunRow,
  type RunStatus,
  runToolExecutions,
  saveFailureLoop,
  type ToolExecutionRow,
  toolRequestId,
  unfinishedToolCalls,
} from "./store";
import { reserveCallerTokens, settleCallerTokens } from "./token-budget";
import {
  DEFAULT_MAX_TOOL_CALLS_PER_RUN,
  DEFAULT_MAX_TOOL_CALLS_PER_TURN,
  isLimitRefusal,
  type LimitDecision,
  MAX_TOOL_CALLS_ANSWERED,
  splitByToolLimits,
  TOOL_LIMIT_CODE,
  type ToolLimitKey,
  type ToolLimitSplit,
} from "./tool-limits";
import { parseToolCallMarkers, TOOL_CALLS_BEGIN, TOOL_CALLS_END, toolResultMessage } from "./tool-markers";

/** A run interrupted this many times fails instead of starting again. */
export const MAX_EXECUTIONS = 3;
/** How long a run runs before the D1 index is told it is running (a shorter run is indexed once, when it ends). */
export const RUNNING_INDEX_DELAY_MS = 1_000;

/** What the engine needs from its SessionDO. */
/** How long a run tool call's outcome stays in the idempotency store when the run spec does not say. */
const DEFAULT_TOOL_RETENTION_MS = 5 * 60_000;

/** Why a setup-only tool is refused outside setup sessions (S5 §6.2). */
export function setupOnlyReason(tool: string): string {
  return `${tool} is available only in setup sessions`;
}

export interface RunHost {
  sql: Sql;
  storage: DurableObjectStorage;
  env: Env;
  logger: Logger;
  registry?: ToolRegistry;
  /** The session the runs belong to. */
  session(): { sessionKey: string; agentId: string; sessionId: string };
  /** History before `beforeSeq`, within the budget left by `fixedTokens` (compacting if needed). */
  history(o: {
    beforeSeq: number;
    spec: RunSpec;
    fixedTokens: number;
  }): Promise<
    | { ok: true; messages: { role: "user" | "assistant" | "tool"; content: string }[]; summaries: string[] }
    | { ok: false; estimatedTokens: number; inputBudget: number }
  >;
  /** S4 §5: the session's memory for a user message (redacted, within `bounds` or the defaults), or null when nothing matches. */
  retrieveMemory?(query: string, bounds?: { topK: number; maxChars: number }): { text: string; ids: string[]; scores: number[] } | null;
  /** Applies NOTES (S4 §2) of an assistant reply to the checkpoint; returns the visible text and traces. */
  applyNotes(reply: string): Promise<{ visible: string; traces: { kind: "notes_patch" | "actions"; data: object }[] }>;
  /** A redacted reply with the fragments of a secret split over this and earlier replies redacted too (issue 20 §5). */
  redactSplitReply?(content: string, apply?: boolean): string;
  /** Appends an assistant or tool message to the transcript (already redacted). */
  appendTranscript(m: { role: "assistant" | "tool"; content: string; runId: string; toolName?: string; toolCallId?: string }): number;
  recordManifest(turnId: string, manifest: PromptManifest): void;
  /** This object's id (approval ids name it). */
  objectId(): string;
  /** The SHA-256 the tool-schema lock pins for a tool, if any (schema-drift guard). */
  lockedSchemaHash?(tool: string): string | undefined;
  /** The session's channel and the capabilities an admin granted it (S4 §1.1). */
  channel(): string;
  capabilities(): readonly string[];
  /** Called after each lifecycle event is written, inside the same storage transaction; `actor` for the audit. */
  onEvent?(event: RunEvent, actor: string): void;
  /** The session's S5 type (setup sessions alone get setup-only tools); `ordinary` when absent. */
  sessionType?(): SessionType;
  /** What the session offers S5 tools for a call of `runId`. */
  toolHost?(runId: string): SessionToolHost;
  /** The session's inline L2 (S5 `session.system_prompt`, set by an admin): replaces L2 only. */
  inlineRole?(): string | undefined;
}

type Finish =
  | { status: "paused" }
  | { status: "completed"; output: string; payload?: Record<string, unknown> }
  | { status: "failed"; code: string; message: string }
  | { status: "cancelled"; reason: string };

export class RunEngine {
  readonly #host: RunHost;
  readonly #registry: ToolRegistry;
  /** In-flight work of the run executing now, so that cancel can stop it at once. */
  readonly #controllers = new Map<string, AbortController>();
  /** Whether the agent of the run executing now is configured (L5 coding vs scratch), by run id. */
  readonly #configured = new Map<string, boolean>();
  /** The env key names fulfilled for the session, read once per run (not per round): the run's next rounds reuse them. */
  readonly #envNames = new Map<string, string[]>();

  constructor(host: RunHost) {
    this.#host = host;
    this.#registry = host.registry ?? defaultRegistry;
  }

  /** Executes runs until none is queued. Called from the alarm. */
  async drain(): Promise<void> {
    for (;;) {
      const run = nextRunnable(this.#host.sql);
      if (!run) return;
      await this.execute(run);
    }
  }

  /** Requests cancellation. Queued runs end at once; a running one stops at its next step (its in-flight call is aborted). */
  cancel(runId: string): { ok: true; status: RunStatus } | { ok: false; reason: "not_found" | "finished"; status?: RunStatus } {
    const { sql, storage } = this.#host;
    const run = getRun(sql, runId);
    if (!run) return { ok: false, reason: "not_found" };
    if (isTerminal(run.status)) return { ok: false, reason: "finished", status: run.status };
    if (run.status === "queued" || run.status === "awaiting_approval") {
      const reason = run.status === "queued" ? "cancelled before it started" : "cancelled while waiting for an approval";
      storage.transactionSync(() => this.#finishRow(run, { status: "cancelled", reason }));
      void this.#index(runId);
      return { ok: true, status: "cancelled" };
    }
    sql.run`UPDATE runs SET cancel_requested = 1 WHERE id = ${runId}`;
    this.#controllers.get(runId)?.abort();
    return { ok: true, status: "running" };
  }

  /** Executes (or resumes) one run to its end. Never throws: an unexpected error fails the run. */
  async execute(initial: RunRow): Promise<void> {
    const { sql, storage } = this.#host;
    const spec = parseSpec(initial);
    let run = initial;
    if (!spec) {
      storage.transactionSync(() => {
        if (run.status === "queued") this.#start(run);
        this.#finishRow(run, {
          status: "failed",
          code: "internal.error",
          message: "this run was queued without a run spec and cannot execute",
        });
      });
      await this.#index(run.id);
      return;
    }
    if (run.executions >= MAX_EXECUTIONS) {
      storage.transactionSync(() =>
        this.#finishRow(run, {
          status: "failed",
          code: "internal.error",
          message: `the run was interrupted ${run.executions} times and was not started again`,
        }),
      );
      await this.#index(run.id);
      return;
    }
    storage.transactionSync(() => {
      if (run.status === "queued") this.#start(run);
      else sql.run`UPDATE runs SET executions = executions + 1 WHERE id = ${run.id}`;
    });
    run = getRun(sql, run.id) as RunRow;
    // The D1 index hears that a run is running only if it still is RUNNING_INDEX_DELAY_MS later; most runs end
    // sooner, and their one index write is the final one below (issue 12: one D1 write per turn fewer).
    const announce = setTimeout(() => void this.#index(run.id), RUNNING_INDEX_DELAY_MS);

    const controller = new AbortController();
    this.#controllers.set(run.id, controller);
    let finish: Finish;
    try {
      finish = await this.#loop(run, spec, controller.signal);
    } catch (err) {
      this.#host.logger.log("error", "run.internal_error", { run_id: run.id, error_name: err instanceof Error ? err.name : "unknown" });
      finish = { status: "failed", code: "internal.error", message: "the run failed unexpectedly; nothing more was done" };
    } finally {
      clearTimeout(announce);
      this.#controllers.delete(run.id);
    }
    const current = getRun(sql, run.id) as RunRow;
    if (finish.status === "paused") {
      // Waiting for a human: the decision (or the approval's expiry) puts the run back in the queue.
      // A pause is a clean stop, so it does not count towards MAX_EXECUTIONS.
      sql.run`UPDATE runs SET executions = 0 WHERE id = ${run.id}`;
      await this.#index(run.id);
      return;
    }
    if (!isTerminal(current.status)) storage.transactionSync(() => this.#finishRow(current, finish));
    const ended = getRun(sql, run.id) as RunRow;
    this.#host.logger.log(ended.status === "failed" ? "warn" : "info", "run.finished", {
      run_id: run.id,
      agent_id: run.agent_id,
      status: ended.status,
      ...(finish.status === "failed" ? { code: finish.code } : {}),
      rounds: ended.rounds,
      tool_calls: ended.tool_calls,
    });
    await this.#index(run.id);
  }

  /** Appends a lifecycle event and tells the host (waiters on the run's events wake up). */
  #event(run: { id: string; agent_id: string }, type: EventType, payload: Record<string, unknown>, actor = "system"): void {
    const event = appendEvent(this.#host.sql, run, type, payload);
    // Called inside the caller's storage transaction: the audit copy is written atomically with the event.
    this.#host.onEvent?.(event, actor);
  }

  #start(run: RunRow): void {
    const now = new Date().toISOString();
    this.#host.sql.run`UPDATE runs SET status = 'running', started_at = ${now}, updated_at = ${now}, executions = 1 WHERE id = ${run.id}`;
    this.#event(run, "run.started", {});
  }

  /** Writes the terminal state, event and (for completed runs) nothing else: callers store the reply first. */
  #finishRow(run: RunRow, f: Exclude<Finish, { status: "paused" }>): void {
    const { sql } = this.#host;
    const now = new Date();
    const iso = now.toISOString();
    if (f.status === "completed") {
      sql.run`UPDATE runs SET status = 'completed', output = ${f.output}, finished_at = ${iso}, updated_at = ${iso} WHERE id = ${run.id}`;
      const r = getRun(sql, run.id) as RunRow;
      const completion = completionOf(sql, r);
      this.#event(run, "run.completed", {
        rounds: r.rounds,
        tool_calls: r.tool_calls,
        usage: { prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens },
        ...f.payload,
        ...(completion ? { completion } : {}),
      });
    } else if (f.status === "failed") {
      sql.run`UPDATE runs SET status = 'failed', output = ${f.message}, error = ${JSON.stringify({ code: f.code, message: f.message })},
                     finished_at = ${iso}, updated_at = ${iso} WHERE id = ${run.id}`;
      this.#event(run, "run.failed", { code: f.code, message: f.message });
    } else {
      sql.run`UPDATE runs SET status = 'cancelled', output = '', finished_at = ${iso}, updated_at = ${iso} WHERE id = ${run.id}`;
      this.#event(run, "run.cancelled", { reason: f.reason });
    }
  }

  async #index(runId: string): Promise<void> {
    const { sql, env } = this.#host;
    const run = getRun(sql, runId);
    if (!run) return;
    const session = this.#host.session();
    try {
      await indexRun(env.DB, {
        run_id: run.id,
        agent_id: run.agent_id,
        session_key: session.sessionKey,
        session_id: run.session_id,
        caller_id: run.caller_id,
        source: run.source,
        status: run.status,
        created_at: run.created_at,
        updated_at: run.updated_at,
      });
      sql.run`UPDATE runs SET indexed = 1 WHERE id = ${runId}`;
    } catch {
      // The index is for listing only; the run itself is safe here. The next index write brings it up to date.
      sql.run`UPDATE runs SET indexed = 0 WHERE id = ${runId}`;
    }
  }

  /** The rounds of one run, from wherever it stopped. */
  async #loop(initial: RunRow, spec: RunSpec, signal: AbortSignal): Promise<Finish> {
    const { sql } = this.#host;
    const userMessage = sql.one<{ content: string }>`SELECT content FROM transcript WHERE seq = ${initial.message_seq}`;
    if (!userMessage) return { status: "failed", code: "internal.error", message: "the run's message is no longer in the session" };
    // A new request after an escalation starts the failure loop afresh: the user has given guidance.
    if (initial.rounds === 0 && loadFailureLoop(sql).mode === "escalated") saveFailureLoop(sql, INITIAL_FAILURE_LOOP);

    for (;;) {
      const run = getRun(sql, initial.id) as RunRow;
      if (run.cancel_requested || signal.aborted) return { status: "cancelled", reason: "cancelled while running" };

      const pending = unfinishedToolCalls(sql, run.id);
      if (pending.length > 0) {
        const escalated = await this.#executeTools(run, spec, pending, signal);
        if (escalated) return escalated;
        continue;
      }

      // Issue 21 §1: a recorded automation.complete ends the run after its tool round, with no further model call.
      const completion = recordedCompletion(sql, run.id);
      if (completion) return { status: "completed", output: completionOutput(completion) };

      // Input disclosure guard (S1 §2.5): a refused request never reaches the model.
      if (run.rounds === 0) {
        const verdict = classifyDisclosureRequest(userMessage.content);
        if (verdict.refuse) {
          const reply = disclosureRefusalMessage();
          await this.#recordRefusedTurn(run, spec, userMessage.content);
          this.#host.appendTranscript({ role: "assistant", content: reply, runId: run.id });
          return { status: "completed", output: reply, payload: { refused: REFUSE_SYSTEM_PROMPT } };
        }
      }

      const outcome = await this.#modelRound(run, spec, userMessage.content, signal);
      if (outcome) return outcome;
    }
  }

  /**
   * The tools offered to the model: allowlisted and registered, each once under its canonical name.
   * Setup-only tools (S5 §6.2) are offered in setup sessions only.
   */
  #offeredTools(spec: RunSpec): ToolDefinition[] {
    const seen = new Set<ToolDefinition>();
    const setup = this.#sessionType() === "setup";
    for (const name of this.#allowed(spec)) {
      const def = this.#registry.get(name);
      if (def && (!def.setupOnly || setup)) seen.add(def);
    }
    return [...seen].sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * The run's allowlist: the agent's, plus the tools its mode's L5 text tells the model to call (a job run:
   * automation.complete; a setup session: the setup tools). The tool policy still gates each call.
   */
  #allowed(spec: RunSpec): string[] {
    return [...spec.tools, ...modeToolsFor(this.#sessionType(), spec.task)];
  }

  /** The run's L5 mode (S5 precedence); whether the agent is configured is read once per run, from D1. */
  async #taskMode(run: RunRow, spec: RunSpec): Promise<TaskMode> {
    const sessionType = this.#sessionType();
    if (sessionType === "setup" || spec.task === "automation")
      return selectTaskMode({ sessionType, clientType: spec.task, configured: true });
    let configured = this.#configured.get(run.id);
    if (configured === undefined) {
      configured = await hasServiceCommands(this.#host.env.DB, spec.agentId);
      this.#configured.clear(); // one run executes at a time: keep only its answer
      this.#configured.set(run.id, configured);
    }
    return selectTaskMode({ sessionType, configured });
  }

  /**
   * Issue 21 §10: a turn the input guard refused still records the manifest of the prompt it would have sent
   * (the round's stack without history), noted as refused, so every turn has one. No model call, no event.
   */
  async #recordRefusedTurn(run: RunRow, spec: RunSpec, userMessage: string): Promise<void> {
    const { base } = await this.#promptBase(run, spec, userMessage);
    const prompt = await assemblePromptStack(base);
    const manifest = { ...prompt.manifest, notes: [...prompt.manifest.notes, REFUSED_TURN_NOTE] };
    logPromptAssembly(this.#host.logger, run.id, manifest);
    this.#host.recordManifest(`${run.id}:${run.rounds + 1}:${run.executions}`, manifest);
  }

  /** What a round's prompt is assembled from before history, with the tools it offers and their protocol. */
  async #promptBase(run: RunRow, spec: RunSpec, userMessage: string) {
    const offered = this.#offeredTools(spec);
    const policy: ToolPolicyId = offered.length === 0 ? "none" : spec.model.supportsTools ? "native" : "markers";
    const recovery = loadFailureLoop(this.#host.sql).mode === "recovery";
    const toolCatalog =
      policy === "markers" ? offered.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })) : [];
    const inlineRole = this.#host.inlineRole?.();
    // S4 §5: memory for the user's message goes inside L6 (counted in the fixed cost, so history yields to it).
    const memory = this.#host.retrieveMemory?.(userMessage, spec.memory) ?? null;
    const memoryContext = memory ? [{ kind: "retrieved_memory" as const, text: memory.text, ids: memory.ids }] : [];
    // Issue 21 §1: a job run is told its own id inside L6 (user-derived context), for automation.complete.
    const jobContext = run.source === "job" ? [{ kind: "automation_run" as const, text: automationRunContext(run.id) }] : [];
    // Issue 21 §2: the key names of fulfilled env requests (values go to the sandbox only, never the prompt).
    const automationContext = [...jobContext, ...(await this.#envAvailable(run.id))];
    const base = {
      l6Context: [...automationContext, ...memoryContext],
      agentId: spec.agentId,
      channel: spec.channel,
      toolPolicy: policy,
      recovery,
      userMessage,
      toolCatalog,
      // The inline L2 also joins the output guard's hidden texts (the `inline` segment, below).
      ...(inlineRole ? { inlineRole } : {}),
      // S5 precedence (src/prompts/modes.ts): setup, then automation (jobs), then coding or scratch.
      task: await this.#taskMode(run, spec),
    };
    return { offered, policy, recovery, base, memory, automationContext, memoryContext };
  }

  /** The L6 note naming the environment variables supplied for this session, if any. */
  async #envAvailable(runId: string): Promise<{ kind: "env_available"; text: string }[]> {
    let names = this.#envNames.get(runId);
    if (names === undefined) {
      names = await fulfilledKeyNames(this.#host.env.DB, this.#host.session().sessionId);
      this.#envNames.clear(); // one run executes at a time: keep only its answer
      this.#envNames.set(runId, names);
    }
    return names.length > 0 ? [{ kind: "env_available", text: envAvailableText(names) }] : [];
  }

  /** One model call and what follows from it. Returns a finish, or undefined to continue with the next round. */
  async #modelRound(run: RunRow, spec: RunSpec, userMessage: string, signal: AbortSignal): Promise<Finish | undefined> {
    const { sql, storage, env } = this.#host;
    // Assembly first with no history, to learn the fixed cost; the history fills what the budget leaves.
    const { offered, policy, recovery, base, memory, automationContext, memoryContext } = await this.#promptBase(run, spec, userMessage);
    const live = this.#liveMessages(run, spec);
    const liveTokens = estimateMessagesTokens(live);
    const fixedTokens = estimatePromptTokens(await assemblePromptStack(base)) + liveTokens;
    const history = await this.#host.history({ beforeSeq: run.message_seq, spec, fixedTokens });
    if (!history.ok) return overBudget(new OverBudgetError(history.estimatedTokens, history.inputBudget));
    if (history.summaries.length > 0) appendTrace(sql, run.id, "retrieval", { summaries: history.summaries.length });
    if (memory) appendTrace(sql, run.id, "retrieval", { round: run.rounds + 1, ids: memory.ids, scores: memory.scores });
    const prompt = await assemblePromptStack({
      ...base,
      history: history.messages.map(toHistoryMessage),
      // The retrieved memory sits immediately before the user's message (DESIGN "Retrieved memory").
      l6Context: [
        ...automationContext,
        ...history.summaries.map((text) => ({ kind: "compaction_summary" as const, text })),
        ...memoryContext,
      ],
    });
    // S1 §4.1 / S2 §6: one log line per assembly — per-layer ids, hashes and sizes (L6's hash is the user message's).
    logPromptAssembly(this.#host.logger, run.id, prompt.manifest);
    const messages: ChatCompletionMessageParam[] = [...toChatMessages(prompt), ...live];
    const estimated = estimatePromptTokens(prompt) + liveTokens;
    const budget = inputBudget(spec.model);
    if (estimated > budget) return overBudget(new OverBudgetError(estimated, budget));

    // The agent's token budget, reserved before the network (estimated input + the model's output reservation).
    // Issue 20 §4: and the caller's own share of it, when the agent sets one (both reserved, or neither).
    let reservation: { day: string; reserved: number; caller: string | null } | null = null;
    const callerLimit = spec.tokensPerCallerPerDay ?? null;
    if (spec.tokensPerDay !== null || callerLimit !== null) {
      const caller = runCallerKey(spec, run);
      const need = estimated + spec.model.maxOutputTokens;
      const r = await reserveCallerTokens(env.DB, {
        agentId: spec.agentId,
        caller,
        tokens: need,
        agentLimit: spec.tokensPerDay,
        callerLimit,
        now: new Date(),
      });
      if (!r.ok) {
        const who = r.scope === "agent" ? `agent "${spec.agentId}"` : `caller "${caller}" of agent "${spec.agentId}"`;
        return {
          status: "failed",
          code: "over_budget",
          message: `${who} has used ${r.used} of its ${r.limit} tokens for ${r.day} (UTC); this call needs up to ${need}`,
        };
      }
      reservation = r;
    }

    const round = run.rounds + 1;
    const stream = spec.model.supportsStreaming;
    storage.transactionSync(() => {
      this.#host.recordManifest(`${run.id}:${round}:${run.executions}`, prompt.manifest);
      this.#event(run, "model.requested", {
        round,
        provider: spec.model.providerId,
        model: spec.model.modelId,
        stack_sha256: prompt.manifest.stack_sha256,
        estimated_input_tokens: estimated,
        tool_policy: policy,
        recovery,
        stream,
      });
      appendTrace(sql, run.id, "llm_req", {
        round,
        model: spec.model.ref,
        messages: messages.length,
        tools: offered.length,
        estimated_input_tokens: estimated,
      });
    });

    let result: ChatResult;
    const started = Date.now();
    try {
      result = await this.#callModel(spec, messages, policy === "native" ? offered : [], signal, run.id);
    } catch (err) {
      if (reservation) await settleCallerTokens(env.DB, spec.agentId, reservation, 0).catch(() => {});
      if (signal.aborted) return { status: "cancelled", reason: "cancelled while the model was answering" };
      if (err instanceof ProviderError || err instanceof GatewayError) {
        const reason = err instanceof ProviderError ? err.reason : err.code;
        appendTrace(sql, run.id, "llm_done", { round, ok: false, reason });
        this.#host.logger.log("warn", "model.call", {
          run_id: run.id,
          provider: spec.model.providerId,
          model: spec.model.modelId,
          stack_sha256: prompt.manifest.stack_sha256,
          estimated_input_tokens: estimated,
          status: "failed",
          reason,
          latency_ms: Date.now() - started,
        });
        return { status: "failed", code: err.code, message: err.message };
      }
      throw err;
    }
    const usage = result.usage ?? {
      promptTokens: estimated,
      completionTokens: estimateMessagesTokens([{ content: result.content }]),
      totalTokens: 0,
    };
    const total = usage.totalTokens || usage.promptTokens + usage.completionTokens;
    if (reservation) await settleCallerTokens(env.DB, spec.agentId, reservation, total).catch(() => {});
    if (signal.aborted) return { status: "cancelled", reason: "cancelled while the model was answering" };

    this.#host.logger.log("info", "model.call", {
      run_id: run.id,
      provider: spec.model.providerId,
      model: spec.model.modelId,
      stack_sha256: prompt.manifest.stack_sha256,
      estimated_input_tokens: estimated,
      status: "ok",
      attempts: result.attempts,
      prompt_tokens: usage.promptTokens,
      completion_tokens: usage.completionTokens,
      latency_ms: Date.now() - started,
    });

    this.#debugContent(run, spec, round, userMessage, result.content);

    // Markers are parsed for marker-protocol models and stripped from every reply (DESIGN "Tool calls").
    const markers = parseToolCallMarkers(result.content);
    let calls: { id: string; tool: string; args: Record<string, unknown> | string }[] = result.toolCalls.map((c: ToolCall) => ({
      id: c.id,
      tool: c.name,
      args: c.arguments,
    }));
    let markerError: string | null = null;
    if (policy === "markers") {
      calls = markers.calls.map((c) => ({ id: c.id, tool: c.tool, args: c.args }));
      markerError = markers.error;
    }
    // Issue 20 §2: the reply is checked with its NOTES block still in, so a leaking NOTES patch is never applied.
    const hidden = prompt.system.filter((s) => s.id === "inline").map((s) => s.content);
    const raw = checkOutput(markers.visible, hidden);
    const notes = raw.blocked ? withheldNotes(markers.visible) : await this.#host.applyNotes(markers.visible);
    const secrets = secretValuesFromEnv(env);
    const verdict = raw.blocked ? raw : checkOutput(notes.visible, hidden);
    const redacted = verdict.blocked ? disclosureRefusalMessage() : redactText(notes.visible, secrets);
    const visible = verdict.blocked ? redacted : (this.#host.redactSplitReply?.(redacted) ?? redacted);

    storage.transactionSync(() => {
      sql.run`UPDATE runs SET prompt_tokens = prompt_tokens + ${usage.promptTokens}, completion_tokens = completion_tokens + ${usage.completionTokens}
              WHERE id = ${run.id}`;
      appendTrace(sql, run.id, "llm_done", {
        round,
        ok: true,
        finish_reason: result.finishReason,
        attempts: result.attempts,
        latency_ms: Date.now() - started,
        usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.completionTokens },
        tool_calls: calls.length,
      });
      for (const t of notes.traces) appendTrace(sql, run.id, t.kind, t.data as Record<string, unknown>);
    });
    if (verdict.blocked) {
      this.#host.logger.log("warn", "prompt.disclosure_refused", { request_id: run.id, stage: "output", signals: [verdict.reason] });
      this.#host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
      return { status: "completed", output: visible, payload: { refused: REFUSE_SYSTEM_PROMPT } };
    }

    if (calls.length === 0 && markerError === null) {
      this.#host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
      return { status: "completed", output: visible };
    }
    if (calls.length > MAX_TOOL_CALLS_ANSWERED) {
      this.#host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
      return {
        status: "failed",
        code: "invalid.request",
        message: `the model asked for ${calls.length} tool calls in one turn, more than the ${MAX_TOOL_CALLS_ANSWERED} the gateway answers; none was run`,
      };
    }
    if (run.rounds >= spec.maxToolRounds) {
      this.#host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
      return {
        status: "failed",
        code: "invalid.request",
        message: `the model asked for more tool rounds than this run allows (runs.maxToolRounds = ${spec.maxToolRounds})`,
      };
    }

    // A malformed marker block becomes one failed call the model sees in the next round (S4 §3).
    if (markerError !== null) calls = [{ id: `markers-${round}`, tool: MARKER_BLOCK, args: markerError }];
    calls = await this.#withholdLeakingArgs(run, calls, hidden);
    // Issue 20 §3: calls past the per-turn or per-run cap are answered at once with a tool error, never run.
    const limits = markerError === null ? this.#toolLimits(run, spec, calls.length) : { admitted: [], refused: [] };
    const refusedAt = new Map(limits.refused.map((r) => [r.call, r]));
    storage.transactionSync(() => {
      const seq = this.#host.appendTranscript({ role: "assistant", content: visible, runId: run.id });
      const seen = new Set<string>();
      const refused: { id: string; tool: string; limit: ToolLimitKey; message: string }[] = [];
      calls.forEach((c, ordinal) => {
        // Ids must be unique within a response; a repeat gets a derived id (its result reports the problem).
        const id = seen.has(c.id) ? `${c.id}#${ordinal}` : c.id;
        seen.add(id);
        const args = typeof c.args === "string" ? c.args : redactText(JSON.stringify(c.args), secrets);
        planToolCall(sql, { runId: run.id, toolCallId: id, tool: c.tool, args, round, ordinal, assistantSeq: seq });
        this.#event(run, "tool.call", {
          round,
          tool: c.tool,
          tool_call_id: id,
          request_id: toolRequestId(run.id, round, id),
          args: safeJson(args),
        });
        const limit = refusedAt.get(ordinal);
        if (limit) refused.push({ id, tool: c.tool, limit: limit.limit, message: limit.message });
      });
      for (const r of refused) this.#refuseOverLimit(run, spec, round, r);
      appendTrace(sql, run.id, "tool_plan", { round, calls: calls.map((c) => ({ id: c.id, tool: c.tool })) });
      // `tool_calls` counts the calls the gateway took on (gated or ran), not the ones a cap refused.
      sql.run`UPDATE runs SET rounds = ${round}, tool_calls = tool_calls + ${calls.length - refused.length}, updated_at = ${new Date().toISOString()}
              WHERE id = ${run.id}`;
    });
    return undefined;
  }

  /** Which of a turn's `count` calls (by ordinal) the per-turn and per-run caps admit (issue 20 §3). */
  #toolLimits(run: RunRow, spec: RunSpec, count: number): ToolLimitSplit<number> {
    const earlier = runToolExecutions(this.#host.sql, run.id).filter((e) => e.tool !== MARKER_BLOCK && !isLimitRefusal(e));
    return splitByToolLimits(
      Array.from({ length: count }, (_, i) => i),
      {
        perTurn: spec.maxToolCallsPerTurn ?? DEFAULT_MAX_TOOL_CALLS_PER_TURN,
        perRun: spec.maxToolCallsPerRun ?? DEFAULT_MAX_TOOL_CALLS_PER_RUN,
        admittedBefore: earlier.length,
      },
    );
  }

  /**
   * Closes a planned call a cap refused: done, `policy.denied`, its decision naming the limit, and a `tool.result`
   * event. Called inside the planning transaction. The failure loop does not count it (the tool never ran), and it
   * is not copied to the transcript: the model reads it in the run's next request, later runs need not.
   */
  #refuseOverLimit(run: RunRow, spec: RunSpec, round: number, r: { id: string; tool: string; limit: ToolLimitKey; message: string }): void {
    const decision: LimitDecision = {
      outcome: "denied",
      code: TOOL_LIMIT_CODE,
      reason: r.message,
      tool: this.#registry.get(r.tool)?.name ?? r.tool,
      risk: this.#registry.get(r.tool)?.risk ?? null,
      channel: this.#host.channel(),
      policy_id: spec.policy.id,
      limit: r.limit,
    };
    const error = { code: TOOL_LIMIT_CODE, message: r.message };
    const summary = `${r.tool} not run: ${r.limit}`;
    this.#host.sql.run`UPDATE tool_executions SET status = 'done', ok = 0, error = ${JSON.stringify(error)}, summary = ${summary},
                   duration_ms = 0, finished_at = ${new Date().toISOString()}, decision = ${JSON.stringify(decision)}
            WHERE run_id = ${run.id} AND round = ${round} AND tool_call_id = ${r.id}`;
    this.#event(run, "tool.result", {
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

  /**
   * Issue 20 §2: a call whose arguments carry hidden-layer text keeps only a placeholder (the gate refuses it),
   * so the text never reaches events, views, bundles or the audit log.
   */
  async #withholdLeakingArgs<C extends { tool: string; args: Record<string, unknown> | string }>(
    run: RunRow,
    calls: C[],
    hidden: readonly string[],
  ): Promise<C[]> {
    return Promise.all(
      calls.map(async (c) => {
        const guarded = await guardArguments(typeof c.args === "string" ? c.args : JSON.stringify(c.args), hidden);
        if (!guarded.withheld) return c;
        this.#host.logger.log("warn", "prompt.disclosure_refused", {
          request_id: run.id,
          stage: "tool_args",
          tool: c.tool,
          signals: [guarded.reason],
        });
        return { ...c, args: guarded.args };
      }),
    );
  }

  /**
   * S1 §4.2 / §4.5: message text reaches the logs only when `logging.debugContent` is on AND the model is on a
   * local provider; secret patterns and configured secret values are redacted, and emails/phones if configured.
   */
  #debugContent(run: RunRow, spec: RunSpec, round: number, userMessage: string, reply: string): void {
    const debug = spec.debugContent;
    if (!debug?.enabled || !spec.model.local) return;
    const secrets = secretValuesFromEnv(this.#host.env);
    const clean = (text: string) =>
      redactPersonalData(redactText(text, secrets), { emails: debug.redactEmails, phones: debug.redactPhones });
    if (round === 1) this.#host.logger.log("info", "debug.content", { run_id: run.id, round, role: "user", text: clean(userMessage) });
    // The reply as it will be stored: a fragment that completes a secret split over replies is redacted here too.
    const stored = redactText(reply, secrets);
    const text = redactPersonalData(this.#host.redactSplitReply?.(stored, false) ?? stored, {
      emails: debug.redactEmails,
      phones: debug.redactPhones,
    });
    this.#host.logger.log("info", "debug.content", { run_id: run.id, round, role: "assistant", text });
  }

  async #callModel(
    spec: RunSpec,
    messages: ChatCompletionMessageParam[],
    offered: ToolDefinition[],
    signal: AbortSignal,
    runId: string,
  ): Promise<ChatResult> {
    const apiKey = resolveBoundProviderKey(this.#host.env, spec.model.providerId, spec.model, spec.secretOrigins);
    const toolSpecs: ToolSpec[] = offered.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters }));
    const req = { model: spec.model, apiKey, messages, ...(toolSpecs.length ? { tools: toolSpecs } : {}) };
    const options = { maxAttempts: spec.providerAttempts, timeoutMs: spec.providerTimeoutMs, signal };
    if (!spec.model.supportsStreaming) return chat(req, options);
    let chunks = 0;
    for await (const event of streamChat(req, signal, options)) {
      if (event.type === "delta") chunks++;
      else {
        appendTrace(this.#host.sql, runId, "llm_stream", { chunks });
        return event.result;
      }
    }
    throw new ProviderError("unreachable", `the stream from ${spec.model.ref} ended without a result`, false);
  }

  /**
   * The run's own rounds as provider messages: each assistant turn that asked
   * for tools, then one tool message per call (S4 §3 result JSON). Native
   * models get `tool_calls` with legal wire names; marker models get their
   * marker block back.
   */
  #liveMessages(run: RunRow, spec: RunSpec): ChatCompletionMessageParam[] {
    const { sql } = this.#host;
    const executions = runToolExecutions(sql, run.id).filter((e) => e.status === "done");
    if (executions.length === 0) return [];
    const native = spec.model.supportsTools && this.#offeredTools(spec).length > 0;
    const bySeq = new Map<number, ToolExecutionRow[]>();
    for (const e of executions) bySeq.set(e.assistant_seq, [...(bySeq.get(e.assistant_seq) ?? []), e]);
    const out: ChatCompletionMessageParam[] = [];
    for (const [seq, calls] of [...bySeq.entries()].sort(([a], [b]) => a - b)) {
      const text = sql.one<{ content: string }>`SELECT content FROM transcript WHERE seq = ${seq}`?.content ?? "";
      const real = calls.filter((c) => c.tool !== MARKER_BLOCK);
      if (native) {
        out.push({
          role: "assistant",
          content: text || null,
          tool_calls: real.map((c) => ({
            id: c.tool_call_id,
            type: "function" as const,
            function: { name: safeWireName(c.tool), arguments: c.args },
          })),
        });
      } else {
        const block = real.length
          ? `${TOOL_CALLS_BEGIN}\n${JSON.stringify(real.map((c) => ({ id: c.tool_call_id, tool: c.tool, args: safeJson(c.args) })))}\n${TOOL_CALLS_END}`
          : "";
        out.push({ role: "assistant", content: [text, block].filter(Boolean).join("\n") });
      }
      for (const c of calls) {
        const content = capText(
          toolResultMessage({
            id: c.tool_call_id,
            tool: c.tool,
            ok: c.ok === 1,
            output: c.output === null ? null : safeJson(c.output),
            error: c.error ? (JSON.parse(c.error) as { code: string; message: string }) : null,
          }),
          spec.caps.toolOutput + spec.caps.toolError + 200,
        );
        out.push({ role: "tool", tool_call_id: c.tool_call_id, content });
      }
    }
    return out;
  }

  /** Runs the unfinished calls of the run in order. Returns a finish when the failure loop escalates. */
  async #executeTools(run: RunRow, spec: RunSpec, pending: ToolExecutionRow[], signal: AbortSignal): Promise<Finish | undefined> {
    const { sql, storage, env } = this.#host;
    const secrets = secretValuesFromEnv(env);
    for (const call of pending) {
      if (signal.aborted || getRun(sql, run.id)?.cancel_requested) return { status: "cancelled", reason: "cancelled while running tools" };
      const def = this.#registry.get(call.tool);
      const started = Date.now();
      const request = this.#requestEnvelope(run, spec, call);
      let outcome: ToolOutcome;
      let decision: GateDecision | null = call.decision ? (JSON.parse(call.decision) as GateDecision) : null;
      let replay = false;
      if (call.status === "started") {
        // Interrupted after the handler began: run again only what cannot have had an effect.
        if (def?.risk === "read_only") outcome = await this.#runHandler(request, call, def, signal, spec);
        else {
          replay = true;
          outcome = {
            ok: false,
            error: {
              code: "internal.error",
              message: "the gateway was interrupted while this call ran; it was not repeated, so its effect is unknown",
            },
          };
        }
      } else {
        const gate = await this.#gate(run, spec, call);
        if (gate.paused) return { status: "paused" };
        decision = gate.decision;
        if (gate.outcome) outcome = gate.outcome;
        else {
          storage.transactionSync(() => {
            sql.run`UPDATE tool_executions SET status = 'started', started_at = ${new Date().toISOString()}
                    WHERE run_id = ${run.id} AND round = ${call.round} AND tool_call_id = ${call.tool_call_id}`;
            appendTrace(sql, run.id, "tool_start", { tool: call.tool, tool_call_id: call.tool_call_id });
          });
          const reserved = gate.honeypotSend !== undefined;
          outcome = await this.#runHandler(request, call, def as ToolDefinition, signal, spec, reserved);
          // A honeypot send that certainly did not go out gives its place under the rate limits back.
          if (reserved && !outcome.ok && sendCertainlyFailed(outcome.error.code))
            await releaseHoneypotSend(env.DB, gate.honeypotSend as number).catch(() => {});
        }
      }
      const duration = Date.now() - started;
      const output = outcome.ok ? redactText(JSON.stringify(outcome.output ?? null), secrets) : null;
      const error = outcome.ok ? null : { code: outcome.error.code, message: redactText(outcome.error.message, secrets) };
      const summary = outcome.summary
        ? redactText(outcome.summary, secrets)
        : outcome.ok
          ? `${call.tool} succeeded`
          : `${call.tool} failed`;
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
      // S1 §4.3: outbound text a tool rendered is logged by its hash only.
      if (outcome.rendered_sha256)
        this.#host.logger.log("info", "tool.rendered", {
          run_id: run.id,
          tool: call.tool,
          tool_call_id: call.tool_call_id,
          ok: outcome.ok,
          rendered_sha256: outcome.rendered_sha256,
        });
      let escalated: Finish | undefined;
      storage.transactionSync(() => {
        sql.run`UPDATE tool_executions SET status = 'done', ok = ${outcome.ok ? 1 : 0}, output = ${output},
                       error = ${error ? JSON.stringify(error) : null}, summary = ${summary}, finished_at = ${finishedAt}, duration_ms = ${duration},
                       request = ${JSON.stringify({ ...request, input: safeJson(call.args) })}, response = ${JSON.stringify(response)},
                       decision = ${decision ? JSON.stringify(decision) : null}
                WHERE run_id = ${run.id} AND round = ${call.round} AND tool_call_id = ${call.tool_call_id}`;
        this.#host.appendTranscript({
          role: "tool",
          content: JSON.stringify({
            summary,
            ...(error ? { error: `${error.code}: ${error.message}` } : {}),
            ...(output ? { output } : {}),
          }),
          runId: run.id,
          toolName: call.tool,
          toolCallId: call.tool_call_id,
        });
        this.#event(run, "tool.result", {
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
        const state = recordToolResult(
          loadFailureLoop(sql),
          {
            tool: call.tool,
            ok: outcome.ok,
            ...(error ? { error: `${error.code}: ${error.message}` } : {}),
            ...(output ? { output } : {}),
          },
          spec.failureLoop,
          secrets,
        );
        saveFailureLoop(sql, state);
        if (state.mode === "escalated") {
          const message = escalationMessage(state);
          this.#host.appendTranscript({ role: "assistant", content: message, runId: run.id });
          escalated = { status: "completed", output: message, payload: { needs_guidance: true } };
        }
      });
      if (escalated) {
        // Calls planned after the escalation are not run; they are closed so the log stays complete.
        this.#closeRemaining(run, "not run: the run stopped to ask the user for guidance");
        return escalated;
      }
    }
    return undefined;
  }

  /**
   * The policy decision for one call (S1 §3.2, fail closed), and for calls that need a human the
   * approval step (S1 §3.3): the first time, an approval is requested and the run pauses; once decided,
   * an approval lets the call run only with the arguments it was granted for.
   */
  async #gate(
    run: RunRow,
    spec: RunSpec,
    call: ToolExecutionRow,
  ): Promise<{ paused: true } | { paused: false; decision: GateDecision | null; outcome: ToolOutcome | null; honeypotSend?: number }> {
    const { sql, storage, env } = this.#host;
    if (isWithheld(call.args)) return { paused: false, decision: null, outcome: { ok: false, error: { ...WITHHELD_ERROR } } };
    if (call.tool === MARKER_BLOCK)
      return {
        paused: false,
        decision: null,
        outcome: { ok: false, error: { code: "invalid.request", message: `tool-call block rejected: ${call.args}` } },
      };
    const def = this.#registry.get(call.tool);
    let decision = decide({
      calledAs: call.tool,
      registry: this.#registry,
      agentId: spec.agentId,
      allow: this.#allowed(spec),
      channel: this.#host.channel(),
      policy: spec.policy,
      schemaHash: def ? await schemaHash(def) : undefined,
      lockedHash: def ? (this.#host.lockedSchemaHash ?? lockedSchemaHash)(def.name) : undefined,
      args: safeJson(call.args),
    });
    this.#host.logger.log("info", "tool.gate", {
      run_id: run.id,
      tool: decision.tool,
      channel: decision.channel,
      risk: decision.risk ?? "unknown",
      policy_id: decision.policy_id,
      outcome: decision.outcome,
    });
    // S5 §6.2, defense in depth: a setup-only tool is refused outside setup sessions even if a model names it.
    if (def?.setupOnly && decision.outcome !== "denied" && this.#sessionType() !== "setup")
      decision = { ...decision, outcome: "denied", code: "policy.denied", reason: setupOnlyReason(def.name) };
    if (decision.outcome === "denied")
      return {
        paused: false,
        decision,
        outcome: { ok: false, error: { code: decision.code ?? "policy.denied", message: decision.reason } },
      };
    const args = safeJson(call.args);
    if (!args || typeof args !== "object" || Array.isArray(args))
      return {
        paused: false,
        decision,
        outcome: { ok: false, error: { code: "tool.input_invalid", message: "the tool input must be a JSON object" } },
      };
    if (decision.outcome === "allowed") return { paused: false, decision, outcome: null };

    // S1 §3.3 Phase 2: a templated message.send that meets every honeypot rule goes without approval.
    // S1 §2.4: an external_email send never qualifies (`decide` already asked for approval, naming the channel).
    const emailLike =
      decision.tool === "message.send" && sendApprovalChannel([decision.channel, (args as Record<string, unknown>).channel]);
    if (decision.tool === "message.send" && spec.honeypot && !decision.reason.includes("schema drift") && !emailLike) {
      const sendArgs = honeypotArgs(args as Record<string, unknown>);
      if (sendArgs) {
        const check = await checkHoneypot({ args: sendArgs, config: spec.honeypot, db: env.DB, agentId: spec.agentId, now: new Date() });
        // Issue 20 §4: the check above only names a broken rule; the place under the rate limits is taken
        // atomically here, before anything is sent, so concurrent sends from other sessions cannot all pass.
        const held = check.ok ? await this.#reserveHoneypot(spec, honeypotRecipient(sendArgs)) : check;
        if (held.ok)
          return {
            paused: false,
            decision: { ...decision, outcome: "allowed", reason: "honeypot exception (S1 §3.3 Phase 2)" },
            outcome: null,
            honeypotSend: held.id,
          };
        decision = { ...decision, reason: `${decision.reason} (honeypot exception not met: ${held.reason})` };
      }
    }

    const approval = approvalForCall(sql, run.id, call.round, call.tool_call_id);
    const digest = await argsDigest(call.args);
    if (!approval) {
      const now = new Date();
      const id = mintApprovalId(this.#host.objectId());
      const expiresAt = new Date(now.getTime() + spec.approvalTtlSeconds * 1000).toISOString();
      // Issue 20 §4: the approval takes its place under the pending limits (agent, caller) atomically in D1 first;
      // with no place, the call is refused and the run goes on. A crash after this leaves a pending index row that
      // expires with the approval's TTL, so a reservation is never held for longer than an approval would be.
      const slot = await this.#reserveApprovalSlot(run, spec, { id, tool: decision.tool, now, expiresAt });
      if (!slot.ok)
        return {
          paused: false,
          decision: { ...decision, outcome: "denied", code: "policy.denied", reason: slot.message },
          outcome: { ok: false, error: { code: "policy.denied", message: slot.message } },
        };
      storage.transactionSync(() => {
        insertApproval(sql, {
          id,
          run_id: run.id,
          round: call.round,
          tool_call_id: call.tool_call_id,
          tool: decision.tool,
          args: call.args,
          args_sha256: digest,
          requester: run.caller_id ?? `agent:${spec.agentId}`,
          channel: decision.channel,
          reason: decision.reason,
          created_at: now.toISOString(),
          expires_at: expiresAt,
        });
        sql.run`UPDATE tool_executions SET decision = ${JSON.stringify(decision)}
                WHERE run_id = ${run.id} AND round = ${call.round} AND tool_call_id = ${call.tool_call_id}`;
        sql.run`UPDATE runs SET status = 'awaiting_approval', updated_at = ${now.toISOString()} WHERE id = ${run.id}`;
        this.#event(run, "approval.requested", {
          approval_id: id,
          tool: decision.tool,
          tool_call_id: call.tool_call_id,
          args_sha256: digest,
          reason: decision.reason,
          expires_at: expiresAt,
        });
      });
      await this.#indexApproval(id);
      return { paused: true };
    }
    if (approval.status === "pending") {
      sql.run`UPDATE runs SET status = 'awaiting_approval' WHERE id = ${run.id}`;
      return { paused: true };
    }
    if (approval.status === "approved") {
      if (approval.args_sha256 !== digest)
        return {
          paused: false,
          decision,
          outcome: {
            ok: false,
            error: {
              code: "policy.denied",
              message: `the arguments changed after approval ${approval.id} was requested; the call was not run`,
            },
          },
        };
      return { paused: false, decision, outcome: null };
    }
    const why =
      approval.status === "expired"
        ? `approval ${approval.id} expired before anyone decided; the call was not run`
        : `denied by ${approval.decided_by ?? "an admin"}${approval.decision_reason ? `: ${approval.decision_reason}` : ""}`;
    return { paused: false, decision, outcome: { ok: false, error: { code: "policy.denied", message: why } } };
  }

  /** An approval's place under the pending limits (issue 20 §4); fails closed when the index cannot be written. */
  async #reserveApprovalSlot(
    run: RunRow,
    spec: RunSpec,
    a: { id: string; tool: string; now: Date; expiresAt: string },
  ): Promise<{ ok: true } | { ok: false; message: string }> {
    const caller = runCallerKey(spec, run);
    const limits = {
      perAgent: spec.maxPendingPerAgent ?? DEFAULT_MAX_PENDING_PER_AGENT,
      perCaller: spec.maxPendingPerCaller ?? DEFAULT_MAX_PENDING_PER_CALLER,
    };
    let slot: ApprovalSlot;
    try {
      slot = await reserveApprovalSlot(
        this.#host.env.DB,
        {
          approval_id: a.id,
          agent_id: spec.agentId,
          run_id: run.id,
          session_key: this.#host.session().sessionKey,
          tool: a.tool,
          created_at: a.now.toISOString(),
          expires_at: a.expiresAt,
          caller,
        },
        limits,
        a.now,
      );
    } catch {
      return {
        ok: false,
        message: "not run: the approval request could not be recorded, so the call cannot wait for one; try again later",
      };
    }
    if (slot.ok) return slot;
    const who = slot.limit === "agent" ? `agent "${spec.agentId}"` : `caller "${caller}"`;
    const key = slot.limit === "agent" ? "maxPendingPerAgent" : "maxPendingPerCaller";
    return {
      ok: false,
      message: `not run: ${who} already has ${slot.pending} tool calls waiting for approval (tools.policy.approvals.${key} = ${slot.max}); try again once they are decided`,
    };
  }

  /** A honeypot send's place under the hourly limits; fails closed (the send then needs an approval). */
  async #reserveHoneypot(spec: RunSpec, recipient: string): Promise<{ ok: true; id: number } | { ok: false; reason: string }> {
    const config = spec.honeypot as NonNullable<RunSpec["honeypot"]>;
    try {
      return await reserveHoneypotSend(this.#host.env.DB, { agentId: spec.agentId, recipient, config, now: new Date() });
    } catch {
      return { ok: false, reason: "the rate limits could not be checked, so the send needs approval" };
    }
  }

  /**
   * Records a human decision on a pending approval and puts its run back in the queue. Expired → `expired`;
   * decided before → `decided`.
   */
  decideApproval(
    approvalId: string,
    decision: "approve" | "deny",
    by: string,
    reason: string | null,
    now = new Date(),
  ): { ok: true; approval: ApprovalRow } | { ok: false; reason: "not_found" | "decided" | "expired"; approval?: ApprovalRow } {
    const { sql, storage } = this.#host;
    const approval = getApproval(sql, approvalId);
    if (!approval) return { ok: false, reason: "not_found" };
    if (approval.status === "expired") return { ok: false, reason: "expired", approval };
    if (approval.status !== "pending") return { ok: false, reason: "decided", approval };
    if (Date.parse(approval.expires_at) <= now.getTime()) {
      this.expireOverdue(now);
      return { ok: false, reason: "expired", approval: getApproval(sql, approvalId) as ApprovalRow };
    }
    const status = decision === "approve" ? "approved" : "denied";
    const run = getRun(sql, approval.run_id) as RunRow;
    storage.transactionSync(() => {
      decideApprovalRow(sql, approvalId, status, by, reason, now);
      // A run that ended meanwhile (cancelled) keeps its log closed: the decision is recorded on the approval only.
      if (isTerminal(run.status)) return;
      this.#event(
        run,
        "approval.decided",
        { approval_id: approvalId, decision: status, decided_by: by, ...(reason ? { reason } : {}) },
        by,
      );
      if (run.status === "awaiting_approval")
        sql.run`UPDATE runs SET status = 'running', updated_at = ${now.toISOString()} WHERE id = ${run.id}`;
    });
    void this.#indexApproval(approvalId);
    return { ok: true, approval: getApproval(sql, approvalId) as ApprovalRow };
  }

  /** Expires pending approvals whose time is up; their runs continue (the call is denied). Returns how many. */
  expireOverdue(now = new Date()): number {
    const { sql, storage } = this.#host;
    const overdue = overdueApprovals(sql, now);
    for (const approval of overdue) {
      const run = getRun(sql, approval.run_id) as RunRow;
      storage.transactionSync(() => {
        decideApprovalRow(sql, approval.id, "expired", null, null, now);
        if (!isTerminal(run.status)) {
          this.#event(run, "approval.decided", { approval_id: approval.id, decision: "expired" });
          if (run.status === "awaiting_approval")
            sql.run`UPDATE runs SET status = 'running', updated_at = ${now.toISOString()} WHERE id = ${run.id}`;
        }
      });
      void this.#indexApproval(approval.id);
    }
    return overdue.length;
  }

  async #indexApproval(id: string): Promise<void> {
    const approval = getApproval(this.#host.sql, id);
    if (!approval) return;
    const run = getRun(this.#host.sql, approval.run_id);
    try {
      await indexApproval(this.#host.env.DB, {
        approval_id: approval.id,
        agent_id: run?.agent_id ?? "",
        run_id: approval.run_id,
        session_key: this.#host.session().sessionKey,
        tool: approval.tool,
        status: approval.status,
        created_at: approval.created_at,
        expires_at: approval.expires_at,
        decided_at: approval.decided_at,
      });
    } catch {
      // The index serves listing and the pending limit; the approval itself is safe in this object.
    }
  }

  /**
   * The S3 §1.1 request envelope of a call: `timeout_ms` is the 30000 default clamped to `runs.toolTimeoutMs`.
   * Input that is not a JSON object is carried as `{}` here; the gate refuses such calls before they run.
   */
  #requestEnvelope(run: RunRow, spec: RunSpec, call: ToolExecutionRow): ToolRequest {
    const input = safeJson(call.args);
    return ToolRequest.parse({
      request_id: toolRequestId(run.id, call.round, call.tool_call_id),
      run_id: run.id,
      agent_id: spec.agentId,
      tool: call.tool,
      input: input && typeof input === "object" && !Array.isArray(input) ? input : {},
      timeout_ms: clampTimeout(undefined, spec.toolTimeoutMs),
      created_at: new Date().toISOString(),
    });
  }

  #sessionType(): SessionType {
    return this.#host.sessionType?.() ?? "ordinary";
  }

  /**
   * The handler, recorded in the session's idempotency store (DESIGN "Idempotency": the store of tool
   * callbacks serves run tool calls too) under `tool:<name>` and `<run>:<round>:<tool_call_id>` — model
   * tool call ids repeat across runs. An outcome stored there (the call finished but the run's own record
   * of it did not survive a crash) is replayed instead of running the tool again.
   */
  async #runHandler(
    request: ToolRequest,
    call: ToolExecutionRow,
    def: ToolDefinition,
    runSignal: AbortSignal,
    spec: RunSpec,
    honeypotReserved = false,
  ): Promise<ToolOutcome> {
    const { sql, storage } = this.#host;
    const scope = `tool:${def.name}`;
    const key = `${request.run_id}:${call.round}:${call.tool_call_id}`;
    const hash = await requestHash(canonicalJson(request.input));
    let stored: Begin = { kind: "new" };
    storage.transactionSync(() => {
      stored = begin(sql, scope, key, hash, Date.now());
      if (stored.kind === "in_flight") {
        // Left by an interrupted attempt that the engine has decided to run again (read_only): start afresh.
        abandon(sql, scope, key);
        stored = begin(sql, scope, key, hash, Date.now());
      }
    });
    const first = stored as Begin;
    if (first.kind === "replay") return JSON.parse(first.response) as ToolOutcome;
    const outcome = await this.#invokeHandler(request, call, def, runSignal, spec, honeypotReserved);
    complete(sql, scope, key, JSON.stringify(outcome), Date.now(), spec.idempotencyRetentionMs ?? DEFAULT_TOOL_RETENTION_MS);
    return outcome;
  }

  /** The handler under the request's timeout and the run's cancellation; a throw becomes internal.error. */
  async #invokeHandler(
    request: ToolRequest,
    call: ToolExecutionRow,
    def: ToolDefinition,
    runSignal: AbortSignal,
    spec: RunSpec,
    honeypotReserved = false,
  ): Promise<ToolOutcome> {
    const { input, timeout_ms: timeoutMs, run_id: runId } = request;
    const session = this.#host.session();
    let rendered: string | undefined;
    const outcome = await invokeTool(
      def,
      input,
      {
        env: this.#host.env,
        agentId: request.agent_id,
        runId,
        channel: this.#host.channel(),
        capabilities: this.#host.capabilities(),
        honeypot: spec.honeypot ?? undefined,
        honeypotReserved,
        // Runs accepted before this setting existed carry no allowlist field: treat as none.
        netAllowlist: spec.netAllowlist ?? null,
        sessionKey: session.sessionKey,
        toolCallId: call.tool_call_id,
        timeoutMs,
        session: this.#host.toolHost?.(runId),
        channelApis: spec.channelApis,
        secretOrigins: spec.secretOrigins,
        rendered: (text) => {
          rendered = text;
        },
      },
      {
        outer: runSignal,
        onError: (err) =>
          this.#host.logger.log("error", "run.internal_error", {
            run_id: runId,
            tool: def.name,
            error_name: err instanceof Error ? err.name : "unknown",
          }),
      },
    );
    // Kept in the stored outcome, so a replayed call reports the same hash.
    return rendered === undefined ? outcome : { ...outcome, rendered_sha256: await sha256Hex(rendered) };
  }

  #closeRemaining(run: RunRow, reason: string): void {
    const { sql, storage } = this.#host;
    for (const call of unfinishedToolCalls(sql, run.id)) {
      storage.transactionSync(() => {
        const error = { code: "invalid.request", message: reason };
        sql.run`UPDATE tool_executions SET status = 'done', ok = 0, error = ${JSON.stringify(error)}, summary = ${reason}, duration_ms = 0,
                       finished_at = ${new Date().toISOString()}
                WHERE run_id = ${run.id} AND round = ${call.round} AND tool_call_id = ${call.tool_call_id}`;
        this.#event(run, "tool.result", {
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
}

/** Pending-approval limits for runs accepted before their spec carried them (the config defaults). */
const DEFAULT_MAX_PENDING_PER_AGENT = 20;
const DEFAULT_MAX_PENDING_PER_CALLER = 5;

/** The pseudo-tool a malformed marker block is reported as. */
const MARKER_BLOCK = "tool_calls.block";

/** The manifest note of a turn the input disclosure guard refused (issue 21 §10): assembled, never sent. */
export const REFUSED_TURN_NOTE = `refused before the model call: ${REFUSE_SYSTEM_PROMPT}; no request was sent`;

/** A reply refused by the output guard: its NOTES block is not applied, only traced as withheld. */
function withheldNotes(visible: string): { visible: string; traces: { kind: "notes_patch"; data: object }[] } {
  return { visible, traces: [{ kind: "notes_patch", data: { error: "withheld: the reply carried hidden-layer text" } }] };
}

function overBudget(err: OverBudgetError): Finish {
  return { status: "failed", code: "over_budget", message: err.message };
}

function toHistoryMessage(m: { role: "user" | "assistant" | "tool"; content: string }): HistoryMessage {
  // Earlier runs' tool results (S3 §6 Option A text) are replayed as the assistant's own record: a role="tool"
  // message that answers no tool call in the same request is refused by OpenAI-compatible APIs (decision D-013).
  return { role: m.role === "user" ? "user" : "assistant", content: m.content };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function safeWireName(name: string): string {
  try {
    return toWireName(name);
  } catch {
    return "invalid_tool_name";
  }
}
