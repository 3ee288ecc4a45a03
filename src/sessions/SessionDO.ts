/**
 * SessionDO: one Durable Object per session key (DESIGN §1), SQLite-backed.
 *
 * A coordinator only: it owns the storage and the single-threaded execution
 * of one session, and calls plain modules for the logic. Public methods are
 * its typed RPC surface; everything else is `#private` so nothing leaks onto it.
 * RPC methods return results rather than throwing for expected refusals.
 */
import { DurableObject } from "cloudflare:workers";
import { writeRunBundle } from "../audit/bundles";
import { auditEvent, auditFromRunEvent } from "../audit/event";
import { auditHead, enqueueAudit, flushAudit, nextFlushAt, outboxSize } from "../audit/outbox";
import { recordAuditStream } from "../audit/streams";
import { deliverReplies, enqueueReply, nextReplyAt, type ReplyTarget } from "../channels/replies";
import { type ModelWindow, OverBudgetError } from "../context/budget";
import type { ContextCaps, ContextMessage } from "../context/caps";
import { compact } from "../context/compaction";
import { collectRecentRows, prepareHistory, summaryTokensInL6 } from "../context/history";
import { begin, canonicalJson, complete, nextExpiry as nextIdempotencyExpiry, purgeExpired, requestHash } from "../idempotency/store";
import { createLogger } from "../observability/logger";
import { gatewayLogSink, isolateLogSinks } from "../observability/r2-logs";
import { sha256Hex } from "../prompts/hash";
import type { PromptManifest } from "../prompts/manifest";
import { type ApprovalRow, getApproval, nextExpiry } from "../runs/approvals";
import { completionOf, FIRING_REPORT_RETRY_MS, hasUnreportedFirings, reportFirings } from "../runs/completion";
import { RunEngine, setupOnlyReason } from "../runs/engine";
import type { RunEvent } from "../runs/events";
import { mintRunId } from "../runs/ids";
import type { RunSpec } from "../runs/spec";
import {
  appendEvent,
  getRun,
  isTerminal,
  listEvents,
  listTraces,
  nextRunnable,
  type RunStatus,
  runToolExecutions,
  type TraceEvent,
} from "../runs/store";
import { type RunView, runView } from "../runs/view";
import { deliverNotifications, enqueueNotify, type NotifySpec, nextNotifyAt } from "../scheduler/notify";
import { redactJson, redactText, secretValuesFromEnv } from "../security/redact";
import { refreshStoredSecrets } from "../security/stored-secrets";
import { createSql, migrate, type Sql } from "../storage/sql";
import { s5WireArgs } from "../tools/builtin/s5";
import type { ToolRequest, ToolResponse } from "../tools/envelope";
import { decide, type ToolPolicy } from "../tools/policy";
import {
  type AutomationCompletion,
  invokeTool,
  type SessionToolHost,
  type SessionType,
  type ToolDefinition,
  type ToolOutcome,
  tools,
} from "../tools/registry";
import { generationArchiveKey, partArchiveKey, putCreateOnly, summaryArchiveKey } from "./archive";
import { recordSessionGeneration, upsertSessionIndex } from "./index-d1";
import { parseSessionKey } from "./keys";
import { getManifest, listManifests, type RecordResult, recordManifest, type StoredManifest } from "./manifests";
import {
  DEFAULT_RETRIEVAL,
  latestSummary,
  type MemoryItem,
  type MemoryKind,
  type RetrievalBounds,
  type RetrievedMemory,
  remember,
  retrieveForTurn,
} from "./memory";
import { EMPTY_STATE, grantCapability, type NotesTrace, processAssistantNotes, revokeCapability, State } from "./notes";
import { SESSION_MIGRATIONS } from "./schema";
import { applySplitRewrites, archivedLookback, redactSplitSecrets } from "./split-secrets";
import {
  appendMessage,
  deleteThrough,
  exportJsonl,
  generationSize,
  importRows,
  latestMessages,
  listMessages,
  messagesBefore,
  parseJsonl,
  type TranscriptRow,
} from "./transcript";

/** Who the session is; passed by the Worker on every call that may create it. */
export interface SessionIdentity {
  sessionKey: string;
  agentId: string;
  /** S5 session type, fixed when the session is created (`ordinary` unless said). */
  sessionType?: SessionType;
}

/** A session's inline L2 as stored (S5 `session.system_prompt`; DESIGN: replaces L2 only). */
export interface StoredSystemPrompt {
  text: string;
  sha256: string;
  bytes: number;
  set_at: string;
}

/** The admin system-prompt calls' answer: the prompt (null: none), or `gone` for an archived generation. */
export type SystemPromptAnswer = { ok: true; prompt: StoredSystemPrompt | null } | { ok: false; reason: "gone" };

/** A gateway tool callback's answer (S5): the body, or an HTTP-level refusal. */
export type ToolCallbackAnswer =
  | { status: 200; body: { success: boolean; result: string; data?: unknown }; replayed: boolean }
  | { status: 404 | 409 | 410 | 422; code: "resource.not_found" | "conflict" | "gone" | "idempotency.mismatch"; message: string };

/** What the Worker resolves from the configuration for a callback (the SessionDO never reads the config). */
export interface ToolCallbackPolicy {
  allow: string[];
  policy: ToolPolicy;
  retentionMs: number;
  timeoutMs: number;
}

export interface SessionLimitsInput {
  maxTurns: number;
  maxBytes: number;
}

export type GenerationResult =
  | { ok: true; sessionId: string; previousSessionId: string }
  | { ok: false; reason: "archive_failed" | "not_found" };

/** S4 §1.2 Checkpoint. */
export interface Checkpoint {
  session_id: string;
  revision: number;
  updated_ts: number;
  state: State;
  recent_messages: { role: string; content: string }[];
  trace_tail: string[];
}

/**
 * While a run executes, the alarm stays set this far ahead: if the object is evicted or
 * redeployed mid-run, that alarm wakes it and the run resumes (DESIGN "SessionDO").
 */
const RUN_WATCHDOG_MS = 60_000;

/** How stale the D1 index row's `updated_at` may get before a message refreshes it. */
const INDEX_REFRESH_MS = 60_000;

/** Bounds of the checkpoint's lists. */
const RECENT_MESSAGES = 20;
const TRACE_TAIL = 50;
/** Turns kept verbatim by compaction (S1 §5.3 "last N turns"). */
const DEFAULT_KEEP_TURNS = 4;
/** The most transcript rows read to build one turn's history: per-turn cost does not grow with the transcript. */
const HISTORY_WINDOW = 400;

const newId = (prefix: string) => `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;

type CallbackBody = Extract<ToolCallbackAnswer, { status: 200 }>;

/** A callback answer that is a tool-level failure (`success: false`), never an HTTP error. */
function refusedCallback(result: string): CallbackBody {
  return { status: 200, body: { success: false, result }, replayed: false };
}

export class SessionDO extends DurableObject<Env> {
  readonly #sql: Sql;
  #schemaVersion = 0;
  readonly #engine: RunEngine;
  /** Callers waiting for a run's next event (long-polling RPCs), by run id. In memory: a waiter lost to eviction just re-asks. */
  readonly #waiters = new Map<string, Set<() => void>>();
  /** Whether this instance is executing runs now (in memory: an evicted instance's runs are resumed by the next). */
  #draining = false;

  /** The env as deployed; `this.env` is a copy with admin-stored secrets laid over it (`#refreshSecrets`). */
  readonly #baseEnv: Env;

  constructor(ctx: DurableObjectState, env: Env) {
    // A copy, updated in place: the run engine and every helper hold this one object.
    super(ctx, { ...env });
    this.#baseEnv = env;
    this.#sql = createSql(ctx.storage.sql);
    this.#engine = new RunEngine({
      sql: this.#sql,
      storage: ctx.storage,
      env: this.env,
      logger: createLogger("info", gatewayLogSink(env.AUDIT)),
      session: () => this.#currentSession(),
      history: (o) => this.#runHistory(o),
      retrieveMemory: (query, bounds) => this.#retrieveMemory(query, bounds ?? DEFAULT_RETRIEVAL),
      applyNotes: async (reply) => {
        const identity = this.#currentSession();
        const r = await this.applyAssistantNotes(identity, reply);
        return { visible: r.visible, traces: r.traces };
      },
      appendTranscript: (m) =>
        appendMessage(
          this.#sql,
          {
            session_id: this.#currentSession().sessionId,
            role: m.role,
            content: m.content,
            run_id: m.runId,
            tool_name: m.toolName ?? null,
            tool_call_id: m.toolCallId ?? null,
          },
          new Date(),
        ).seq,
      redactSplitReply: (content, apply) => this.#redactSplitReply(this.#currentSession().sessionId, content, apply),
      recordManifest: (turnId, manifest) => {
        recordManifest(this.#sql, turnId, manifest, new Date());
      },
      onEvent: (event, actor) => {
        enqueueAudit(this.#sql, auditFromRunEvent(event, actor, secretValuesFromEnv(this.env)));
        this.#wake(event.run_id);
      },
      objectId: () => this.ctx.id.toString(),
      channel: () => {
        const parsed = parseSessionKey(this.#currentSession().sessionKey);
        return parsed.ok && parsed.key.kind === "scoped" ? parsed.key.channel : "main";
      },
      capabilities: () => {
        const row = this.#sql.one<{ state: string }>`SELECT state FROM checkpoint WHERE id = 1`;
        return row ? State.parse(JSON.parse(row.state)).capabilities_granted : [];
      },
      sessionType: () => this.#sessionType(),
      toolHost: (runId) => this.#toolHost(runId, true),
      inlineRole: () => this.#systemPrompt(this.#currentSession().sessionId)?.text,
    });
    // Apply the schema before any RPC runs; blockConcurrencyWhile holds every other event until done.
    ctx.blockConcurrencyWhile(async () => {
      this.#schemaVersion = migrate(ctx.storage, this.#sql, SESSION_MIGRATIONS);
      this.#sql.run`INSERT INTO session_meta (key, value) VALUES ('created_at', ${new Date().toISOString()}) ON CONFLICT (key) DO NOTHING`;
      // Work left by an interrupted run is picked up again even if its alarm was lost.
      if (nextRunnable(this.#sql)) await this.#alarmNow();
    });
  }

  /**
   * Makes the alarm fire now unless it already will: an alarm set for later (an approval expiry, a stored
   * answer's expiry, a notification retry) must not hold back work queued now.
   */
  async #alarmNow(): Promise<void> {
    const now = Date.now();
    const at = await this.ctx.storage.getAlarm();
    if (at === null || at > now) await this.ctx.storage.setAlarm(now);
  }

  #wake(runId: string): void {
    const waiting = this.#waiters.get(runId);
    if (!waiting) return;
    this.#waiters.delete(runId);
    for (const resolve of waiting) resolve();
  }

  /** Resolves at the run's next event or after `ms`, whichever comes first. */
  async #nextEvent(runId: string, ms: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let resolve = () => {};
    const woken = new Promise<void>((r) => {
      resolve = r;
    });
    const set = this.#waiters.get(runId) ?? new Set();
    set.add(resolve);
    this.#waiters.set(runId, set);
    await Promise.race([woken, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
    this.#waiters.get(runId)?.delete(resolve);
  }

  /** The session as stored (runs exist only in a created session). */
  #currentSession(): { sessionKey: string; agentId: string; sessionId: string } {
    const row = this.#sql.one<{ session_key: string; agent_id: string; session_id: string }>`
      SELECT session_key, agent_id, session_id FROM session_state WHERE id = 1`;
    if (!row) throw new Error("session not created");
    return { sessionKey: row.session_key, agentId: row.agent_id, sessionId: row.session_id };
  }

  /**
   * Runs queued work (DESIGN "SessionDO": runs execute here, one at a time, driven by the alarm).
   * A watchdog alarm stays set while a run executes, so an eviction mid-run resumes it.
   */
  override async alarm(): Promise<void> {
    // The watchdog may fire while this instance is still executing a long run: only one drain per instance.
    if (this.#draining) {
      await this.ctx.storage.setAlarm(Date.now() + RUN_WATCHDOG_MS);
      return;
    }
    this.#draining = true;
    try {
      await this.ctx.storage.setAlarm(Date.now() + RUN_WATCHDOG_MS);
      await this.#refreshSecrets();
      this.#engine.expireOverdue();
      purgeExpired(this.#sql, Date.now());
      await this.#engine.drain();
      await this.#flushAudit();
      await this.#writeBundles();
      await this.#deliverNotifications();
      await reportFirings(this.#sql, this.env.DB);
      await deliverReplies({
        sql: this.#sql,
        storage: this.ctx.storage,
        env: this.env,
        secrets: secretValuesFromEnv(this.env),
        audit: (eventType, runId, payload) => this.#enqueueSessionAudit(eventType, "system", payload, runId),
      });
    } finally {
      this.#draining = false;
    }
    await this.#scheduleNext();
    // After this object's own storage I/O, and not awaited (the sinks are the isolate's: see flushSoon). At most one
    // flush per OBJECT_FLUSH_INTERVAL_MS per isolate, so under load one segment carries many runs' lines.
    isolateLogSinks(this.env.AUDIT).flushSoon();
  }

  /**
   * Lays the admin-stored secrets over `this.env` (src/security/stored-secrets.ts), at most one D1 probe per
   * few seconds per isolate. If D1 cannot be read, the values already in place serve (a provider key rotated
   * a moment ago is picked up on the next alarm).
   */
  async #refreshSecrets(): Promise<void> {
    try {
      await refreshStoredSecrets(this.env as unknown as Record<string, unknown>, this.#baseEnv);
    } catch {
      // Keep what is in place; the next entry tries again.
    }
  }

  /** The alarm for what comes next: queued work at once, else the earliest of audit retry, bundle retry, approval expiry, notification. */
  async #scheduleNext(): Promise<void> {
    const now = Date.now();
    if (nextRunnable(this.#sql)) return this.ctx.storage.setAlarm(now);
    const times = [
      nextExpiry(this.#sql),
      nextFlushAt(this.#sql, now),
      this.#bundleRetryAt,
      nextNotifyAt(this.#sql, now),
      nextIdempotencyExpiry(this.#sql),
      nextReplyAt(this.#sql),
      hasUnreportedFirings(this.#sql) ? now + FIRING_REPORT_RETRY_MS : null,
    ].filter((t): t is number => t !== null);
    if (times.length > 0) return this.ctx.storage.setAlarm(Math.min(...times));
    return this.ctx.storage.deleteAlarm();
  }

  /** When unwritten run bundles are tried again (after an R2 failure). */
  #bundleRetryAt: number | null = null;

  /** Sends the audit outbox to R2 (create-only segments, hash-chained per day). */
  async #flushAudit(): Promise<void> {
    const session = this.#sql.one<{ agent_id: string }>`SELECT agent_id FROM session_state WHERE id = 1`;
    if (!session) return;
    await flushAudit({
      sql: this.#sql,
      storage: this.ctx.storage,
      bucket: this.env.AUDIT,
      stream: this.ctx.id.toString(),
      agentId: session.agent_id,
      onFirstSegment: (day) => recordAuditStream(this.env.DB, session.agent_id, day, this.ctx.id.toString()),
    });
  }

  /** Writes the R2 bundle of every finished run that has none yet (create-only; retried after a failure). */
  async #writeBundles(): Promise<void> {
    this.#bundleRetryAt = null;
    const runs = this.#sql.all<{ id: string }>`
      SELECT id FROM runs WHERE bundled = 0 AND status IN ('completed', 'failed', 'cancelled') ORDER BY message_seq LIMIT 20`;
    for (const { id } of runs) {
      const detail = await this.runDetail(id);
      if (!detail) continue;
      try {
        await writeRunBundle(this.env.AUDIT, detail, secretValuesFromEnv(this.env));
        this.#sql.run`UPDATE runs SET bundled = 1 WHERE id = ${id}`;
      } catch {
        this.#bundleRetryAt = Date.now() + 30_000;
        return;
      }
    }
  }

  /** Sends the notifications of finished job runs (S3 §4 notify), retried from the alarm until delivered or given up. */
  async #deliverNotifications(): Promise<void> {
    await deliverNotifications({
      sql: this.#sql,
      storage: this.ctx.storage,
      env: this.env,
      secrets: secretValuesFromEnv(this.env),
      audit: (eventType, runId, payload) => this.#enqueueSessionAudit(eventType, "scheduler", payload, runId),
    });
  }

  /** The session's S5 type (`ordinary` before the session exists). */
  #sessionType(): SessionType {
    const row = this.#sql.one<{ session_type: string }>`SELECT session_type FROM session_state WHERE id = 1`;
    return row?.session_type === "setup" ? "setup" : "ordinary";
  }

  /**
   * What this session offers S5 tools for a call of `runId` (null: a callback outside any run). `ownRun`: the call
   * is the run's own tool call, so `automation.complete` may finish only that run (issue 21 §1).
   */
  #toolHost(runId: string | null, ownRun = false): SessionToolHost {
    const session = this.#currentSession();
    return {
      sessionId: session.sessionId,
      sessionType: this.#sessionType(),
      runId,
      checkpoint: () => {
        const c = this.#checkpointOf(session.sessionId);
        const updated_ts = c.revision === 0 ? null : new Date(c.updated_ts * 1000).toISOString();
        return { state: c.state, revision: c.revision, updated_ts, recent_messages: c.recent_messages, trace_tail: c.trace_tail };
      },
      recordCompletion: (c) => {
        if (ownRun && c.run_id !== runId) return { status: "other_run" };
        const existing = this.#sql.one<AutomationCompletion & Record<string, SqlStorageValue>>`
          SELECT completion_id, run_id, outcome, summary, tool_call_id, recorded_at FROM automation_completions WHERE completion_id = ${c.completion_id}`;
        if (existing) {
          const same = existing.run_id === c.run_id && existing.outcome === c.outcome && existing.summary === c.summary;
          return { status: same ? "duplicate" : "conflict", completion: { ...existing } };
        }
        if (!getRun(this.#sql, c.run_id)) return { status: "unknown_run" };
        const completion: AutomationCompletion = { ...c, recorded_at: new Date().toISOString() };
        this.ctx.storage.transactionSync(() => {
          this.#sql.run`INSERT INTO automation_completions (completion_id, run_id, outcome, summary, tool_call_id, recorded_at)
                        VALUES (${c.completion_id}, ${c.run_id}, ${c.outcome}, ${c.summary}, ${c.tool_call_id}, ${completion.recorded_at})`;
          this.#enqueueSessionAudit("automation.completed", "tool", { ...completion }, c.run_id);
        });
        return { status: "recorded", completion };
      },
      audit: (eventType, payload) => {
        this.ctx.storage.transactionSync(() => this.#enqueueSessionAudit(eventType, "tool", payload, runId ?? undefined));
      },
    };
  }

  /** Tool callbacks executing now, by idempotency key: a duplicate arriving meanwhile waits for the same answer. */
  readonly #callbacks = new Map<string, Promise<CallbackBody>>();

  /**
   * A gateway tool callback from a sandbox (S5 §Gateway Callback Contract, §6.3), executed here once per
   * `(tool, tool_call_id)`: the key is recorded as in flight before the tool runs; a duplicate while it runs
   * gets the same answer; a completed answer is replayed for `retentionMs`; the same key with other
   * arguments is refused (422). All of it is in this object's storage, so it survives eviction and restarts.
   * A key left in flight by an earlier instance (it was interrupted) is answered as interrupted, not re-run.
   */
  async toolCallback(
    sessionId: string,
    calledAs: string,
    toolCallId: string,
    args: Record<string, unknown>,
    p: ToolCallbackPolicy,
  ): Promise<ToolCallbackAnswer> {
    await this.#refreshSecrets();
    const row = this.#sql.one<{ session_id: string }>`SELECT session_id FROM session_state WHERE id = 1`;
    if (!row) return { status: 404, code: "resource.not_found", message: `no session ${sessionId}` };
    if (row.session_id !== sessionId)
      return { status: 410, code: "gone", message: `session ${sessionId} was archived; mint a sandbox token for the current session` };
    const registry = tools;
    const def = registry.get(calledAs);
    if (!def) return refusedCallback(`tool.not_found: unknown tool "${calledAs}"`);
    const input = s5WireArgs(def.name, args) as Record<string, unknown>;
    const scope = `tool:${def.name}`;
    const hash = await requestHash(canonicalJson(input));
    const key = `${scope}\n${toolCallId}`;
    // From here to the promise being registered nothing is awaited: the check and the claim are one step.
    const first = begin(this.#sql, scope, toolCallId, hash, Date.now());
    if (first.kind === "mismatch")
      return {
        status: 422,
        code: "idempotency.mismatch",
        message: `tool_call_id ${toolCallId} was already used for ${def.name} with different arguments`,
      };
    if (first.kind === "replay") return { ...(JSON.parse(first.response) as CallbackBody), replayed: true };
    if (first.kind === "in_flight") {
      const running = this.#callbacks.get(key);
      if (running) return { ...(await running), replayed: true };
      const interrupted = refusedCallback(
        `internal.error: an earlier attempt of this call (tool_call_id ${toolCallId}) was interrupted before it finished, so its effect is unknown; check before retrying with a new tool_call_id`,
      );
      complete(this.#sql, scope, toolCallId, JSON.stringify(interrupted), Date.now(), p.retentionMs);
      return interrupted;
    }
    const work = this.#runCallback(def, input, toolCallId, p);
    this.#callbacks.set(key, work);
    try {
      const answer = await work;
      complete(this.#sql, scope, toolCallId, JSON.stringify(answer), Date.now(), p.retentionMs);
      await this.#scheduleNext();
      return answer;
    } finally {
      this.#callbacks.delete(key);
    }
  }

  /** Gates and runs one callback; every outcome is an S5 `{success, result, data?}` body (redacted). */
  async #runCallback(
    def: ToolDefinition,
    input: Record<string, unknown>,
    toolCallId: string,
    p: ToolCallbackPolicy,
  ): Promise<CallbackBody> {
    const session = this.#currentSession();
    const secrets = secretValuesFromEnv(this.env);
    const decision = decide({
      calledAs: def.name,
      registry: tools,
      agentId: session.agentId,
      allow: p.allow,
      channel: "sandbox",
      policy: p.policy,
      args: input,
    });
    let outcome: ToolOutcome;
    if (decision.outcome === "denied") outcome = { ok: false, error: { code: decision.code ?? "policy.denied", message: decision.reason } };
    else if (def.setupOnly && this.#sessionType() !== "setup")
      outcome = { ok: false, error: { code: "policy.denied", message: setupOnlyReason(def.name) } };
    else if (decision.outcome === "requires_approval")
      outcome = {
        ok: false,
        error: { code: "policy.denied", message: `${def.name} needs a human approval, which tool callbacks cannot wait for` },
      };
    else outcome = await this.#invokeCallbackHandler(def, input, toolCallId, p.timeoutMs);
    const body = outcome.ok
      ? {
          success: true,
          result: redactText(outcome.summary ?? `${def.name} succeeded`, secrets),
          data: redactJson(outcome.output ?? null, secrets).value,
        }
      : { success: false, result: redactText(`${outcome.error.code}: ${outcome.error.message}`, secrets) };
    this.ctx.storage.transactionSync(() =>
      this.#enqueueSessionAudit("tool.callback", "sandbox", {
        tool: def.name,
        tool_call_id: toolCallId,
        success: outcome.ok,
        ...(outcome.ok ? {} : { code: outcome.error.code }),
        gate: decision.outcome,
      }),
    );
    return { status: 200, body, replayed: false };
  }

  async #invokeCallbackHandler(
    def: ToolDefinition,
    input: Record<string, unknown>,
    toolCallId: string,
    timeoutMs: number,
  ): Promise<ToolOutcome> {
    const session = this.#currentSession();
    const running = this.#sql.one<{ id: string }>`
      SELECT id FROM runs WHERE session_id = ${session.sessionId} ORDER BY (status = 'running') DESC, message_seq DESC LIMIT 1`;
    return invokeTool(def, input, {
      env: this.env,
      agentId: session.agentId,
      runId: running?.id ?? "",
      sessionKey: session.sessionKey,
      channel: "sandbox",
      toolCallId,
      capabilities: [],
      netAllowlist: null,
      timeoutMs,
      session: this.#toolHost(running?.id ?? null),
    });
  }

  /** Today's chain head of this object's audit stream for `day` (for verification). */
  async auditHead(day: string): Promise<{ counter: number; sha256: string }> {
    return auditHead(this.#sql, day);
  }

  /** Audit events not yet in R2 (operators and tests). */
  async auditBacklog(): Promise<number> {
    return outboxSize(this.#sql);
  }

  /** Records an admin action on this session as an audit event (S3 §3), and makes sure the alarm will ship it. */
  async #auditAdmin(eventType: string, payload: Record<string, unknown>): Promise<void> {
    this.ctx.storage.transactionSync(() => this.#enqueueSessionAudit(eventType, "admin", payload));
    await this.#alarmNow();
  }

  /** Queues an audit event outside a run's lifecycle (its own per-session seq); call inside a transaction. */
  #enqueueSessionAudit(eventType: string, actor: string, payload: Record<string, unknown>, runId?: string): void {
    const session = this.#currentSession();
    const seq = Number(this.#sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = 'audit_seq'`?.value ?? 0) + 1;
    this.#sql
      .run`INSERT INTO session_meta (key, value) VALUES ('audit_seq', ${String(seq)}) ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
    enqueueAudit(
      this.#sql,
      auditEvent(
        { event_type: eventType, agent_id: session.agentId, actor, seq, payload, ...(runId ? { run_id: runId } : {}) },
        secretValuesFromEnv(this.env),
      ),
    );
  }

  /**
   * Records an agent-level event in this session's audit stream (the scheduler uses the agent's main
   * session for job changes and firings that start no run). Creates the session if needed.
   */
  async recordAuditEvent(identity: SessionIdentity, eventType: string, actor: string, payload: Record<string, unknown>): Promise<void> {
    await this.#state(identity);
    this.ctx.storage.transactionSync(() => this.#enqueueSessionAudit(eventType, actor, payload));
    await this.#alarmNow();
  }

  /** Admin: approves or denies a pending approval (S1 §3.3); the run resumes from the alarm. */
  async decideApproval(
    approvalId: string,
    decision: "approve" | "deny",
    decidedBy: string,
    reason: string | null,
  ): Promise<{ ok: true; approval: ApprovalRow } | { ok: false; reason: "not_found" | "decided" | "expired"; approval?: ApprovalRow }> {
    const result = this.#engine.decideApproval(approvalId, decision, decidedBy, reason);
    if (result.ok || result.reason === "expired") await this.#scheduleNext();
    return result;
  }

  /** One approval as stored here. */
  async approval(approvalId: string): Promise<ApprovalRow | null> {
    return getApproval(this.#sql, approvalId) ?? null;
  }

  /** The storage schema version in force and when this session's storage was first created. */
  async describe(): Promise<{ schemaVersion: number; createdAt: string }> {
    const row = this.#sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = 'created_at'`;
    return { schemaVersion: this.#schemaVersion, createdAt: row?.value ?? "" };
  }

  /** The current generation, creating the session (and its D1 index rows) on first use. */
  async #state(identity: SessionIdentity): Promise<{ sessionKey: string; agentId: string; sessionId: string }> {
    const row = this.#sql.one<{
      session_key: string;
      agent_id: string;
      session_id: string;
    }>`SELECT session_key, agent_id, session_id FROM session_state WHERE id = 1`;
    if (row) {
      if (row.session_key !== identity.sessionKey) throw new Error("session key does not match this object");
      return { sessionKey: row.session_key, agentId: row.agent_id, sessionId: row.session_id };
    }
    if (!parseSessionKey(identity.sessionKey).ok) throw new Error("invalid session key");
    const sessionId = newId("ses");
    const now = new Date().toISOString();
    this.ctx.storage.transactionSync(() => {
      this.#sql.run`INSERT INTO session_state (id, session_key, agent_id, session_id, session_type)
                    VALUES (1, ${identity.sessionKey}, ${identity.agentId}, ${sessionId}, ${identity.sessionType ?? "ordinary"})`;
      this.#sql.run`INSERT INTO generations (session_id, started_at) VALUES (${sessionId}, ${now})`;
    });
    await this.#index(identity.sessionKey, identity.agentId, sessionId);
    return { sessionKey: identity.sessionKey, agentId: identity.agentId, sessionId };
  }

  async #index(sessionKey: string, agentId: string, sessionId: string): Promise<void> {
    await recordSessionGeneration(this.env.DB, { sessionKey, agentId, sessionId });
    this.#sql
      .run`INSERT INTO session_meta (key, value) VALUES ('indexed_at', ${String(Date.now())}) ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
  }

  /**
   * Keeps the D1 index row's `updated_at` roughly current without a D1 write on
   * every message: at most one refresh per INDEX_REFRESH_MS, or at once when forced
   * (a new session or generation).
   */
  async #refreshIndex(sessionKey: string, sessionId: string, force = false): Promise<void> {
    const now = Date.now();
    const last = Number(this.#sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = 'indexed_at'`?.value ?? 0);
    if (!force && now - last < INDEX_REFRESH_MS) return;
    await upsertSessionIndex(this.env.DB, sessionKey, sessionId);
    this.#sql
      .run`INSERT INTO session_meta (key, value) VALUES ('indexed_at', ${String(now)}) ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
  }

  /**
   * Stores a user message (redacted before it is written) and queues a run for it.
   * The run engine executes queued runs; until then they stay `queued`.
   *
   * `dispatchKey` makes the call idempotent: a second call with the same key returns the first run
   * (`duplicate: true`) and stores nothing. The scheduler passes a firing's run key, with the firing
   * (recorded in `run.created`) and its notification, queued in the same transaction as the run.
   */
  async enqueueMessage(
    identity: SessionIdentity,
    input: {
      message: string;
      source: string;
      limits: SessionLimitsInput;
      spec?: RunSpec;
      callerId?: string;
      dispatchKey?: string;
      job?: { jobId: string; scheduledFor: string; missed: number };
      notify?: NotifySpec | null;
      /** A chat channel's reply target: the run's final answer goes back there once (issue 10). */
      reply?: ReplyTarget;
    },
  ): Promise<{ runId: string; sessionId: string; seq: number; duplicate?: boolean }> {
    await this.#refreshSecrets(); // the message is redacted with every secret in force, stored ones included
    const state = await this.#state(identity);
    const seen = input.dispatchKey ? this.#byDispatchKey(input.dispatchKey) : undefined;
    if (seen) return seen;
    const secrets = secretValuesFromEnv(this.env);
    // A secret may have been split across this message and the previous user messages (issue 20 §5).
    const archived = await archivedLookback(this.#sql, this.env.AUDIT, state.sessionId, "user", secrets);
    const split = redactSplitSecrets(this.#sql, state.sessionId, "user", redactText(input.message, secrets), secrets, archived);
    const redacted = split.text;
    const runId = mintRunId(this.ctx.id.toString());
    const now = new Date();
    let row: TranscriptRow | undefined;
    // Nothing awaited since the check above, so no other call can have used the key in between.
    this.ctx.storage.transactionSync(() => {
      applySplitRewrites(this.#sql, split.rewrites);
      row = appendMessage(
        this.#sql,
        {
          session_id: state.sessionId,
          role: "user",
          content: redacted,
          run_id: runId,
          redactions: redacted === input.message ? [] : ["content"],
        },
        now,
      );
      this.#sql
        .run`INSERT INTO runs (id, session_id, source, agent_id, caller_id, status, message_seq, spec, created_at, updated_at, dispatch_key)
                    VALUES (${runId}, ${state.sessionId}, ${input.source}, ${state.agentId}, ${input.callerId ?? null}, 'queued', ${row.seq},
                            ${input.spec ? JSON.stringify(input.spec) : null}, ${now.toISOString()}, ${now.toISOString()}, ${input.dispatchKey ?? null})`;
      if (input.notify) enqueueNotify(this.#sql, runId, input.notify);
      if (input.reply) enqueueReply(this.#sql, runId, input.reply);
      const created = appendEvent(
        this.#sql,
        { id: runId, agent_id: state.agentId },
        "run.created",
        {
          source: input.source,
          session_id: state.sessionId,
          message_seq: (row as TranscriptRow).seq,
          provider: input.spec?.model.providerId ?? null,
          model: input.spec?.model.modelId ?? null,
          // Which configuration the run was accepted under: an operator can fetch that version afterwards.
          ...(input.spec?.config ? { config: input.spec.config } : {}),
          ...(input.job ? { job_id: input.job.jobId, scheduled_for: input.job.scheduledFor, missed: input.job.missed } : {}),
        },
        now,
      );
      const actor = input.callerId ? `api:${input.callerId}` : input.job ? "scheduler" : "system";
      enqueueAudit(this.#sql, auditFromRunEvent(created, actor, secrets));
    });
    if (input.spec) await this.#alarmNow();
    await this.#enforceLimits(state, input.limits);
    await this.#refreshIndex(state.sessionKey, state.sessionId);
    return { runId, sessionId: state.sessionId, seq: (row as TranscriptRow).seq };
  }

  /**
   * `enqueueMessage`, then `awaitRun` on the run it queued, in one call: `POST /v1/runs` with `Prefer: wait`
   * saves a second round trip to this object per turn (issue 12). `waitMs` is capped as in `awaitRun`.
   */
  async enqueueAndAwait(
    identity: SessionIdentity,
    input: Parameters<SessionDO["enqueueMessage"]>[1],
    waitMs: number,
    opts: { untilPaused?: boolean } = {},
  ): Promise<{
    queued: Awaited<ReturnType<SessionDO["enqueueMessage"]>>;
    done: Awaited<ReturnType<SessionDO["awaitRun"]>>;
  }> {
    const queued = await this.enqueueMessage(identity, input);
    return { queued, done: await this.awaitRun(queued.runId, waitMs, opts) };
  }

  /** The run queued earlier under `dispatchKey`, if any. */
  #byDispatchKey(dispatchKey: string): { runId: string; sessionId: string; seq: number; duplicate: true } | undefined {
    const row = this.#sql.one<{ id: string; session_id: string; message_seq: number }>`
      SELECT id, session_id, message_seq FROM runs WHERE dispatch_key = ${dispatchKey}`;
    return row ? { runId: row.id, sessionId: row.session_id, seq: row.message_seq, duplicate: true } : undefined;
  }

  /**
   * S1 §5.3 maxTurns / maxBytes: the oldest whole turns over the limits are archived
   * to R2 (create-only) and only then deleted. A failed write keeps them here.
   */
  async #enforceLimits(state: { sessionKey: string; agentId: string; sessionId: string }, limits: SessionLimitsInput): Promise<void> {
    const size = generationSize(this.#sql, state.sessionId);
    if (size.userTurns <= limits.maxTurns && size.bytes <= limits.maxBytes) return;
    const rows = listMessages(this.#sql, state.sessionId, 0, 100_000);
    let turns = size.userTurns;
    let bytes = size.bytes;
    let cut = 0;
    // Drop whole turns (a user message and everything until the next one), oldest first.
    while (cut < rows.length - 1 && (turns > limits.maxTurns || bytes > limits.maxBytes)) {
      let end = cut + 1;
      while (end < rows.length && (rows[end] as TranscriptRow).role !== "user") end++;
      if (end >= rows.length) break; // never archive the newest turn
      for (let i = cut; i < end; i++) bytes -= new TextEncoder().encode((rows[i] as TranscriptRow).content).length;
      turns--;
      cut = end;
    }
    if (cut === 0) return;
    const part = rows.slice(0, cut);
    const first = (part[0] as TranscriptRow).seq;
    const last = (part.at(-1) as TranscriptRow).seq;
    const key = partArchiveKey(state.agentId, state.sessionKey, state.sessionId, first, last);
    try {
      if (!(await putCreateOnly(this.env.AUDIT, key, exportJsonl(part)))) return;
    } catch {
      return; // R2 unavailable: the rows stay; the next message tries again.
    }
    this.ctx.storage.transactionSync(() => {
      this.#sql
        .run`INSERT INTO archived_parts (session_id, first_seq, last_seq, r2_key) VALUES (${state.sessionId}, ${first}, ${last}, ${key})
                    ON CONFLICT DO NOTHING`;
      deleteThrough(this.#sql, state.sessionId, last);
    });
  }

  /** `/new`: archives the current generation to R2 and starts another. Nothing changes if the archive fails. */
  async newSession(identity: SessionIdentity): Promise<GenerationResult> {
    const state = await this.#state(identity);
    let result: GenerationResult = { ok: false, reason: "archive_failed" };
    // No other event may append to the generation while it is archived and switched.
    await this.ctx.blockConcurrencyWhile(async () => {
      if (!(await this.#archiveCurrent(state))) return;
      const sessionId = newId("ses");
      this.ctx.storage.transactionSync(() => {
        this.#sql.run`INSERT INTO generations (session_id, started_at) VALUES (${sessionId}, ${new Date().toISOString()})`;
        this.#sql.run`UPDATE session_state SET session_id = ${sessionId} WHERE id = 1`;
      });
      result = { ok: true, sessionId, previousSessionId: state.sessionId };
    });
    const outcome = result as GenerationResult; // assigned inside the callback above
    if (outcome.ok) await this.#index(state.sessionKey, state.agentId, outcome.sessionId);
    return outcome;
  }

  /** `/resume <session_id>`: brings back an archived generation of this same session key. */
  async resumeSession(identity: SessionIdentity, targetSessionId: string): Promise<GenerationResult> {
    const state = await this.#state(identity);
    const target = this.#sql.one<{ archive_key: string | null }>`SELECT archive_key FROM generations WHERE session_id = ${targetSessionId}`;
    if (!target) return { ok: false, reason: "not_found" };
    if (targetSessionId === state.sessionId) return { ok: true, sessionId: state.sessionId, previousSessionId: state.sessionId };
    let result: GenerationResult = { ok: false, reason: "archive_failed" };
    await this.ctx.blockConcurrencyWhile(async () => {
      if (!(await this.#archiveCurrent(state))) return;
      const rows = target.archive_key ? await this.#readArchive(target.archive_key) : [];
      if (rows === null) return;
      this.ctx.storage.transactionSync(() => {
        importRows(this.#sql, rows);
        this.#sql.run`UPDATE generations SET archived_at = NULL WHERE session_id = ${targetSessionId}`;
        this.#sql.run`UPDATE session_state SET session_id = ${targetSessionId} WHERE id = 1`;
      });
      result = { ok: true, sessionId: targetSessionId, previousSessionId: state.sessionId };
    });
    const outcome = result as GenerationResult; // assigned inside the callback above
    if (outcome.ok) await this.#refreshIndex(state.sessionKey, targetSessionId, true);
    return outcome;
  }

  /**
   * Admin: restores a snapshot of this session's checkpoint (S4 §1.2, taken by `save_snapshot`). Like `/new`, the
   * current generation is archived (and stays resumable); the new generation's transcript is the snapshot's recent
   * messages, and the checkpoint's state and trace tail become the snapshot's, at the next revision (revisions
   * only grow). Refused while a run of the session is queued, running or awaiting approval.
   */
  async restoreSnapshot(
    identity: SessionIdentity,
    snapshot: { snapshot_id: string; state: unknown; recent_messages: { role: string; content: string }[]; trace_tail: string[] },
  ): Promise<{ ok: true; previousSessionId: string; checkpoint: Checkpoint } | { ok: false; reason: "archive_failed" | "busy" }> {
    const state = await this.#state(identity);
    const restored = State.parse(snapshot.state);
    const busy = () =>
      this.#sql.one<{ id: string }>`SELECT id FROM runs WHERE status IN ('queued', 'running', 'awaiting_approval') LIMIT 1` !== undefined;
    if (busy()) return { ok: false, reason: "busy" };
    let sessionId: string | null = null;
    await this.ctx.blockConcurrencyWhile(async () => {
      if (busy() || !(await this.#archiveCurrent(state))) return;
      const id = newId("ses");
      const now = new Date();
      this.ctx.storage.transactionSync(() => {
        this.#sql.run`INSERT INTO generations (session_id, started_at) VALUES (${id}, ${now.toISOString()})`;
        this.#sql.run`UPDATE session_state SET session_id = ${id} WHERE id = 1`;
        for (const m of snapshot.recent_messages) {
          const role = m.role === "assistant" || m.role === "tool" ? m.role : "user";
          appendMessage(this.#sql, { session_id: id, role, content: m.content }, now);
        }
        this.#writeCheckpoint(restored, snapshot.trace_tail);
      });
      sessionId = id;
    });
    if (sessionId === null) return { ok: false, reason: busy() ? "busy" : "archive_failed" };
    await this.#index(state.sessionKey, state.agentId, sessionId);
    await this.#auditAdmin("snapshot.restored", {
      snapshot_id: snapshot.snapshot_id,
      session_id: sessionId,
      previous_session_id: state.sessionId,
    });
    return { ok: true, previousSessionId: state.sessionId, checkpoint: this.#checkpointOf(sessionId) };
  }

  /** Archives the current generation (create-only), then removes its rows here. False when R2 failed. */
  async #archiveCurrent(state: { sessionKey: string; agentId: string; sessionId: string }): Promise<boolean> {
    const rows = listMessages(this.#sql, state.sessionId, 0, 1_000_000);
    const key = generationArchiveKey(state.agentId, state.sessionKey, state.sessionId);
    const parts = this.#sql.all<{
      r2_key: string;
    }>`SELECT r2_key FROM archived_parts WHERE session_id = ${state.sessionId} ORDER BY first_seq`;
    let body = "";
    for (const part of parts) {
      const archived = await this.#readArchive(part.r2_key);
      if (archived === null) return false;
      body += exportJsonl(archived);
    }
    body += exportJsonl(rows);
    try {
      if (!(await putCreateOnly(this.env.AUDIT, key, body))) return false;
    } catch {
      return false;
    }
    const last = rows.at(-1)?.seq ?? 0;
    this.ctx.storage.transactionSync(() => {
      this.#sql
        .run`UPDATE generations SET archived_at = ${new Date().toISOString()}, archive_key = ${key} WHERE session_id = ${state.sessionId}`;
      this.#sql.run`DELETE FROM archived_parts WHERE session_id = ${state.sessionId}`;
      deleteThrough(this.#sql, state.sessionId, last);
    });
    return true;
  }

  async #readArchive(key: string): Promise<TranscriptRow[] | null> {
    try {
      const object = await this.env.AUDIT.get(key);
      return object ? parseJsonl(await object.text()) : null;
    } catch {
      return null;
    }
  }

  /**
   * Every message of a generation of this session, in order (archived parts, then live rows); with `page`, only
   * those with seq > `afterSeq`, at most `limit` of them (the admin messages list pages on seq).
   */
  async messages(sessionId: string, page?: { afterSeq: number; limit: number }): Promise<TranscriptRow[] | null> {
    const generation = this.#sql.one<{ archive_key: string | null; archived_at: string | null }>`
      SELECT archive_key, archived_at FROM generations WHERE session_id = ${sessionId}`;
    if (!generation) return null;
    const afterSeq = page?.afterSeq ?? 0;
    const limit = page?.limit ?? 1_000_000;
    if (generation.archived_at && generation.archive_key) {
      const archived = await this.#readArchive(generation.archive_key);
      return archived && (page ? archived.filter((r) => r.seq > afterSeq).slice(0, limit) : archived);
    }
    const rows: TranscriptRow[] = [];
    for (const part of this.#sql.all<{
      r2_key: string;
    }>`SELECT r2_key FROM archived_parts WHERE session_id = ${sessionId} AND last_seq > ${afterSeq} ORDER BY first_seq`) {
      if (rows.length >= limit) break;
      const archived = await this.#readArchive(part.r2_key);
      if (archived) rows.push(...archived.filter((r) => r.seq > afterSeq));
    }
    if (rows.length < limit) rows.push(...listMessages(this.#sql, sessionId, afterSeq, limit - rows.length));
    return rows.slice(0, limit);
  }

  /** A generation's transcript as JSONL, byte-stable. */
  async exportTranscript(sessionId: string): Promise<string | null> {
    const rows = await this.messages(sessionId);
    return rows ? exportJsonl(rows) : null;
  }

  /** A run's queue entry. */
  async run(
    runId: string,
  ): Promise<{ id: string; session_id: string; status: string; source: string; agent_id: string; message_seq: number } | null> {
    return (
      this.#sql.one<{ id: string; session_id: string; status: string; source: string; agent_id: string; message_seq: number }>`
        SELECT id, session_id, status, source, agent_id, message_seq FROM runs WHERE id = ${runId}` ?? null
    );
  }

  /** A run in S3 §5's shape, with the caller that queued it (for access checks), or null. */
  async runRecord(runId: string): Promise<{ view: RunView; callerId: string | null; sessionId: string } | null> {
    const run = getRun(this.#sql, runId);
    if (!run) return null;
    return {
      view: runView(run, runToolExecutions(this.#sql, runId), Date.now(), completionOf(this.#sql, run)),
      callerId: run.caller_id,
      sessionId: run.session_id,
    };
  }

  /** A run's lifecycle events after `afterSeq`, and whether the run has ended. */
  async runEvents(
    runId: string,
    afterSeq = 0,
    limit = 500,
    waitMs = 0,
  ): Promise<{ events: RunEvent[]; finished: boolean; callerId: string | null } | null> {
    const read = () => {
      const run = getRun(this.#sql, runId);
      if (!run) return null;
      const events = listEvents(this.#sql, run, afterSeq, Math.max(1, Math.min(1000, limit)));
      return { events, finished: isTerminal(run.status), callerId: run.caller_id };
    };
    const first = read();
    // With waitMs, wait (at most that long) for the next event when there is none yet: long polling, no busy loop.
    if (!first || first.events.length > 0 || first.finished || waitMs <= 0) return first;
    await this.#nextEvent(runId, Math.min(waitMs, 60_000));
    return read();
  }

  /**
   * Waits (at most `waitMs`, capped at 60 s) for a run to end — or, with `untilPaused`, to stop for a human
   * approval — and answers the run as S3 shows it either way, with its token usage so far (from the provider's
   * figures) and the approvals it waits for.
   */
  async awaitRun(
    runId: string,
    waitMs: number,
    opts: { untilPaused?: boolean } = {},
  ): Promise<{
    view: RunView;
    callerId: string | null;
    finished: boolean;
    paused: boolean;
    usage: { prompt_tokens: number; completion_tokens: number };
    pendingApprovals: { approval_id: string; tool: string }[];
    /** A failed run's code and message. */
    error: { code: string; message: string } | null;
  } | null> {
    const deadline = Date.now() + Math.min(Math.max(0, waitMs), 60_000);
    for (;;) {
      const run = getRun(this.#sql, runId);
      if (!run) return null;
      const finished = isTerminal(run.status);
      const paused = run.status === "awaiting_approval";
      if (finished || (paused && opts.untilPaused) || Date.now() >= deadline)
        return {
          view: runView(run, runToolExecutions(this.#sql, runId), Date.now(), completionOf(this.#sql, run)),
          callerId: run.caller_id,
          finished,
          paused,
          usage: { prompt_tokens: run.prompt_tokens, completion_tokens: run.completion_tokens },
          error: run.status === "failed" && run.error ? (JSON.parse(run.error) as { code: string; message: string }) : null,
          pendingApprovals: paused
            ? this.#sql.all<{ approval_id: string; tool: string }>`
                SELECT id AS approval_id, tool FROM approvals WHERE run_id = ${runId} AND status = 'pending' ORDER BY created_at, id`
            : [],
        };
      await this.#nextEvent(runId, deadline - Date.now());
    }
  }

  /** Admin: the run with every event, its S4 §6 trace and the prompt manifest of each model call. */
  async runDetail(runId: string): Promise<{
    view: RunView;
    events: RunEvent[];
    trace: TraceEvent[];
    manifests: StoredManifest[];
    toolCalls: { request: ToolRequest | null; response: ToolResponse | null }[];
  } | null> {
    const run = getRun(this.#sql, runId);
    if (!run) return null;
    const manifests = this.#sql.all<{
      turn_id: string;
    }>`SELECT turn_id FROM prompt_manifests WHERE turn_id >= ${`${runId}:`} AND turn_id < ${`${runId};`} ORDER BY seq`
      .map((r) => getManifest(this.#sql, r.turn_id))
      .filter((m): m is StoredManifest => m !== undefined);
    const executions = runToolExecutions(this.#sql, runId);
    return {
      view: runView(run, executions, Date.now(), completionOf(this.#sql, run)),
      toolCalls: executions.map((e) => ({
        request: e.request ? (JSON.parse(e.request) as ToolRequest) : null,
        response: e.response ? (JSON.parse(e.response) as ToolResponse) : null,
      })),
      events: listEvents(this.#sql, run, 0, 100_000),
      trace: listTraces(this.#sql, runId),
      manifests,
    };
  }

  /** Cancels a queued or running run (`run.cancelled`); a finished run is left as it is. */
  async cancelRun(
    runId: string,
  ): Promise<{ ok: true; status: RunStatus } | { ok: false; reason: "not_found" | "finished"; status?: RunStatus }> {
    return this.#engine.cancel(runId);
  }

  /** The history for one of this session's runs: turns before its message (see buildHistory). */
  async #runHistory(o: { beforeSeq: number; spec: RunSpec; fixedTokens: number }) {
    const state = this.#currentSession();
    const r = await this.#history(state, { window: o.spec.model, fixedTokens: o.fixedTokens, caps: o.spec.caps, beforeSeq: o.beforeSeq });
    if (!r.ok) return { ok: false as const, estimatedTokens: r.estimatedTokens, inputBudget: r.inputBudget };
    return { ok: true as const, messages: r.messages, summaries: r.summaries };
  }

  /** S4 §1.2 checkpoint: the state, its revision, the bounded recent messages and the trace tail. */
  async checkpoint(identity: SessionIdentity): Promise<Checkpoint> {
    return this.#checkpointOf((await this.#state(identity)).sessionId);
  }

  /** The checkpoint with the recent messages of generation `sessionId`. */
  #checkpointOf(sessionId: string): Checkpoint {
    const row = this.#sql.one<{ revision: number; updated_ts: number; state: string; trace_tail: string }>`
      SELECT revision, updated_ts, state, trace_tail FROM checkpoint WHERE id = 1`;
    const recent = latestMessages(this.#sql, sessionId, RECENT_MESSAGES).map((m) => ({ role: m.role, content: m.content }));
    return {
      session_id: sessionId,
      revision: row?.revision ?? 0,
      updated_ts: row?.updated_ts ?? 0,
      state: row ? State.parse(JSON.parse(row.state)) : EMPTY_STATE,
      recent_messages: recent,
      trace_tail: row ? (JSON.parse(row.trace_tail) as string[]) : [],
    };
  }

  #saveCheckpoint(state: State, traces: readonly NotesTrace[]): void {
    const row = this.#sql.one<{ trace_tail: string }>`SELECT trace_tail FROM checkpoint WHERE id = 1`;
    const tail = [...(row ? (JSON.parse(row.trace_tail) as string[]) : []), ...traces.map((t) => JSON.stringify(t))].slice(-TRACE_TAIL);
    this.#writeCheckpoint(state, tail);
  }

  /** Writes the checkpoint at the next revision. */
  #writeCheckpoint(state: State, tail: readonly string[]): void {
    const row = this.#sql.one<{ revision: number }>`SELECT revision FROM checkpoint WHERE id = 1`;
    const revision = (row?.revision ?? 0) + 1;
    this.#sql
      .run`INSERT INTO checkpoint (id, revision, updated_ts, state, trace_tail) VALUES (1, ${revision}, ${Date.now() / 1000}, ${JSON.stringify(state)}, ${JSON.stringify(tail)})
                  ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, updated_ts = excluded.updated_ts, state = excluded.state, trace_tail = excluded.trace_tail`;
  }

  /**
   * S4 §2 for one assistant reply: strips NOTES from the visible text, applies the
   * patch, runs its actions, and persists the new checkpoint. Malformed NOTES are traced, never fatal.
   */
  async applyAssistantNotes(
    identity: SessionIdentity,
    reply: string,
  ): Promise<{ visible: string; checkpoint: Checkpoint; traces: NotesTrace[]; compaction: "now" | "smart" | null }> {
    const current = await this.checkpoint(identity);
    const result = processAssistantNotes(current.state, reply);
    if (result.traces.length > 0 || result.state !== current.state) this.#saveCheckpoint(result.state, result.traces);
    // New decisions and the episode summary become searchable memory (S4 §5).
    const now = new Date();
    for (const decision of result.state.decisions.filter((d) => !current.state.decisions.includes(d))) {
      await remember(this.#sql, { kind: "decision", text: decision, from_seq: null, to_seq: null }, now);
    }
    if (result.state.episode_summary && result.state.episode_summary !== current.state.episode_summary) {
      await remember(this.#sql, { kind: "note", text: result.state.episode_summary, from_seq: null, to_seq: null }, now);
    }
    if (result.compaction) await this.compactNow(identity, result.compaction === "now" ? 2 : DEFAULT_KEEP_TURNS);
    return { visible: result.visible, checkpoint: await this.checkpoint(identity), traces: result.traces, compaction: result.compaction };
  }

  /** Stores a memory item (idempotent: same kind and text, same id). */
  async remember(identity: SessionIdentity, item: { kind: MemoryKind; text: string }): Promise<MemoryItem> {
    await this.#state(identity);
    return remember(this.#sql, { kind: item.kind, text: item.text, from_seq: null, to_seq: null }, new Date());
  }

  /**
   * A run's retrieval (S4 §5): the best memory items for its user message, redacted with every secret in force;
   * the compaction summary the history puts in L6 is left out (the model would read it twice).
   */
  #retrieveMemory(query: string, bounds: RetrievalBounds): RetrievedMemory | null {
    const summary = this.#latestSummary(this.#currentSession().sessionId);
    return retrieveForTurn(this.#sql, query, bounds, secretValuesFromEnv(this.env), summary ? [summary.id] : []);
  }

  /** The newest stored compaction summary of the current generation. */
  #latestSummary(sessionId: string): MemoryItem | undefined {
    const first = this.#sql.one<{ seq: number }>`SELECT MIN(seq) AS seq FROM transcript WHERE session_id = ${sessionId}`;
    return latestSummary(this.#sql, first?.seq ?? 0);
  }

  /**
   * Stores a compaction summary (a derived artifact with evidence pointers) as a
   * memory item and archives it to R2 (create-only). The transcript itself is kept.
   */
  async #storeSummary(
    state: { sessionKey: string; agentId: string; sessionId: string },
    summary: { fromSeq: number; toSeq: number; evidence: [number, number][]; text: string },
  ): Promise<MemoryItem> {
    const item = await remember(
      this.#sql,
      { kind: "summary", text: summary.text, from_seq: summary.fromSeq, to_seq: summary.toSeq },
      new Date(),
    );
    const key = summaryArchiveKey(state.agentId, state.sessionKey, state.sessionId, summary.fromSeq, summary.toSeq);
    const body = `${JSON.stringify({ id: item.id, session_id: state.sessionId, from_seq: summary.fromSeq, to_seq: summary.toSeq, evidence: summary.evidence, text: summary.text })}\n`;
    try {
      await putCreateOnly(this.env.AUDIT, key, body);
    } catch {
      // The summary is derived and kept in the object; the archive copy is written again by the next compaction.
    }
    return item;
  }

  /** Compacts now (the model's condense actions): everything but the last `keepTurns` turns becomes a summary. */
  async compactNow(identity: SessionIdentity, keepTurns = DEFAULT_KEEP_TURNS): Promise<MemoryItem | null> {
    const state = await this.#state(identity);
    const previous = this.#latestSummary(state.sessionId);
    const rows = listMessages(this.#sql, state.sessionId, previous?.to_seq ?? 0, HISTORY_WINDOW);
    const { summary } = compact(rows, keepTurns);
    return summary ? this.#storeSummary(state, summary) : null;
  }

  /**
   * The history for the next model turn (S3 §6 caps, S1 §1.5 budget, S1 §5.3
   * compaction): stored summaries plus the newest rows after them, bounded, so the
   * cost does not grow with the transcript. `over_budget` when even the compacted
   * history cannot fit — the caller must not call the model.
   */
  async buildHistory(
    identity: SessionIdentity,
    o: { window: ModelWindow; fixedTokens: number; keepTurns?: number; caps?: ContextCaps },
  ): Promise<
    | { ok: true; messages: ContextMessage[]; summaries: string[]; estimatedTokens: number }
    | { ok: false; error: "over_budget"; estimatedTokens: number; inputBudget: number }
  > {
    return this.#history(await this.#state(identity), o);
  }

  async #history(
    state: { sessionKey: string; agentId: string; sessionId: string },
    o: { window: ModelWindow; fixedTokens: number; keepTurns?: number; caps?: ContextCaps; beforeSeq?: number },
  ): Promise<
    | { ok: true; messages: ContextMessage[]; summaries: string[]; estimatedTokens: number }
    | { ok: false; error: "over_budget"; estimatedTokens: number; inputBudget: number }
  > {
    const previous = this.#latestSummary(state.sessionId);
    const after = previous?.to_seq ?? 0;
    const limitSeq = o.beforeSeq ?? Number.MAX_SAFE_INTEGER;
    // Only as many of the newest rows as the context can use, page by page: per-turn cost does not grow with the transcript.
    const rows = collectRecentRows(
      (beforeSeq, limit) => messagesBefore(this.#sql, state.sessionId, after, Math.min(beforeSeq, limitSeq), limit),
      o.caps,
    );
    const summaries = previous ? [previous.text] : [];
    const summaryTokens = summaries.reduce((n, t) => n + summaryTokensInL6(t), 0);
    let prepared: ReturnType<typeof prepareHistory>;
    try {
      prepared = prepareHistory(rows, {
        window: o.window,
        fixedTokens: o.fixedTokens + summaryTokens,
        keepTurns: o.keepTurns ?? DEFAULT_KEEP_TURNS,
        ...(o.caps ? { caps: o.caps } : {}),
      });
    } catch (err) {
      if (err instanceof OverBudgetError)
        return { ok: false, error: "over_budget", estimatedTokens: err.estimatedInputTokens, inputBudget: err.inputBudget };
      throw err;
    }
    if (prepared.summary) {
      await this.#storeSummary(state, prepared.summary);
      summaries.push(prepared.summary.text);
    }
    return { ok: true, messages: prepared.messages, summaries, estimatedTokens: prepared.estimatedTokens };
  }

  /**
   * An assistant reply with the fragments of a secret split over replies redacted; earlier replies rewritten
   * unless `apply` is false (the debug log's look at a reply before it is stored).
   */
  #redactSplitReply(sessionId: string, content: string, apply = true): string {
    const split = redactSplitSecrets(this.#sql, sessionId, "assistant", content, secretValuesFromEnv(this.env));
    if (apply) applySplitRewrites(this.#sql, split.rewrites);
    return split.text;
  }

  /** Admin: grants a capability (S4 §1.1), removing it from pending. Audited. */
  async grantCapability(identity: SessionIdentity, cap: string): Promise<Checkpoint> {
    const current = await this.checkpoint(identity);
    this.#saveCheckpoint(grantCapability(current.state, cap), []);
    await this.#auditAdmin("capability.granted", { capability: cap, session_id: current.session_id });
    return this.checkpoint(identity);
  }

  /** Admin: revokes a granted capability. Audited. */
  async revokeCapability(identity: SessionIdentity, cap: string): Promise<Checkpoint> {
    const current = await this.checkpoint(identity);
    this.#saveCheckpoint(revokeCapability(current.state, cap), []);
    await this.#auditAdmin("capability.revoked", { capability: cap, session_id: current.session_id });
    return this.checkpoint(identity);
  }

  /** The current generation and its S5 type (creating the session on first use), for the sandbox bootstrap. */
  async sessionInfo(identity: SessionIdentity): Promise<{ sessionId: string; sessionType: SessionType }> {
    const state = await this.#state(identity);
    return { sessionId: state.sessionId, sessionType: this.#sessionType() };
  }

  /** The inline L2 (S5 `session.system_prompt`) set for generation `sessionId`, if any. */
  #systemPrompt(sessionId: string): StoredSystemPrompt | undefined {
    const row = this.#sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = ${`system_prompt:${sessionId}`}`;
    return row ? (JSON.parse(row.value) as StoredSystemPrompt) : undefined;
  }

  /** Admin: the inline L2 of generation `sessionId` (null: none set); `gone` when it is not the current generation. */
  async systemPrompt(identity: SessionIdentity, sessionId: string): Promise<SystemPromptAnswer> {
    const state = await this.#state(identity);
    if (state.sessionId !== sessionId) return { ok: false, reason: "gone" };
    return { ok: true, prompt: this.#systemPrompt(sessionId) ?? null };
  }

  /**
   * Admin: sets (`text`) or clears (null) the inline L2 of the current generation; the next model call uses it.
   * Audited with its hash and size only — the text itself stays out of the audit stream.
   */
  async setSystemPrompt(identity: SessionIdentity, sessionId: string, text: string | null): Promise<SystemPromptAnswer> {
    const state = await this.#state(identity);
    if (state.sessionId !== sessionId) return { ok: false, reason: "gone" };
    const key = `system_prompt:${sessionId}`;
    const previous = this.#systemPrompt(sessionId);
    let prompt: StoredSystemPrompt | null = null;
    if (text === null) {
      this.#sql.run`DELETE FROM session_meta WHERE key = ${key}`;
      if (previous) await this.#auditAdmin("session.system_prompt_cleared", { session_id: sessionId, sha256: previous.sha256 });
    } else {
      const sha256 = await sha256Hex(text);
      prompt = { text, sha256, bytes: new TextEncoder().encode(text).length, set_at: new Date().toISOString() };
      this.#sql.run`INSERT INTO session_meta (key, value) VALUES (${key}, ${JSON.stringify(prompt)})
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value`;
      await this.#auditAdmin("session.system_prompt_set", { session_id: sessionId, sha256, bytes: prompt.bytes });
    }
    return { ok: true, prompt };
  }

  /** Stores the hash-only prompt manifest of a turn (idempotent per turn id; a different one is refused). */
  async recordPromptManifest(turnId: string, manifest: PromptManifest): Promise<RecordResult> {
    return recordManifest(this.#sql, turnId, manifest, new Date());
  }

  /** The prompt manifest of one turn, for admins. */
  async promptManifest(turnId: string): Promise<StoredManifest | null> {
    return getManifest(this.#sql, turnId) ?? null;
  }

  /** The session's most recent prompt manifests, newest first. */
  async promptManifests(limit = 50): Promise<StoredManifest[]> {
    return listManifests(this.#sql, limit);
  }
}
