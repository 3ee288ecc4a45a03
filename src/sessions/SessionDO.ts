/**
 * SessionDO: one Durable Object per session key (DESIGN §1), SQLite-backed — a facade.
 *
 * It owns the storage and the single-threaded execution of one session, and nothing else: the constructor wires
 * the modules of src/sessions/ to this object's storage, each RPC method delegates to one of them, and `alarm()`
 * hands over to the capability runner (src/sessions/capabilities.ts). Its collaborators are `#private` fields, so
 * nothing but the RPC methods is reachable over RPC (the PImpl idea of workers-oauth-provider's OAuthProvider).
 * RPC methods return results rather than throwing for expected refusals.
 *
 * Where things are: session-state (who the session is, D1 index), enqueue (a message in, its run queued),
 * run-queries + run-waiters (reading runs, long polls), generations (/new, /resume, snapshots, messages),
 * checkpoint (S4 checkpoint, NOTES, capabilities, memory), history (history, compaction, retrieval),
 * tool-callbacks + tool-host (S5 callbacks), system-prompt, session-audit (the audit stream), run-host (the run
 * engine's view of the session); the *-store modules hold the SQL.
 */
import { DurableObject } from "cloudflare:workers";
import { auditHead } from "../audit/outbox";
import { isolateLogSinks } from "../observability/r2-logs";
import { type ApprovalRow, getApproval } from "../runs/approvals";
import { RunEngine } from "../runs/engine";
import type { ReleaseStreamOptions } from "../runs/release-stream";
import type { RunStatus } from "../runs/store";
import type { ReleasedSlice } from "../runs/stream-release";
import type { RunView } from "../runs/view";
import { migrate } from "../storage/sql";
import type { SessionType } from "../tools/registry";
import { AlarmRunner, alarmNow } from "./capabilities";
import { type Checkpoint, changeCapability, checkpoint } from "./checkpoint";
import { type SessionContext, sessionContext } from "./context";
import { channelReplies, jobNotifications } from "./deliveries";
import type { Enqueued, EnqueueInput } from "./enqueue";
import {
  exportTranscript,
  type GenerationResult,
  generationMessages,
  newGeneration,
  restoreSnapshot,
  resumeGeneration,
  type Snapshot,
} from "./generations";
import { shipIndexNow } from "./index-outbox";
import { approvalExpiry, enqueueInline, firingReports, RunBundles, resumeDecided, runDrain } from "./run-capabilities";
import { createRunHost } from "./run-host";
import { type AwaitedRun, awaitInline, awaitRun, type RunDetail, runDetail, runEvents, runRecord } from "./run-queries";
import { releasedSlice, releaseStream } from "./run-release";
import { RunWaiters } from "./run-waiters";
import { SESSION_MIGRATIONS } from "./schema";
import { recordAuditEvent } from "./session-audit";
import { ensureSession, type SessionIdentity, sessionListed, sessionType } from "./session-state";
import { markCreated } from "./session-store";
import { windowOf } from "./ship-window";
import { Shipping } from "./shipping";
import { getSystemPrompt, type SystemPromptAnswer, setSystemPrompt } from "./system-prompt";
import { idempotencyPurge, type ToolCallbackAnswer, type ToolCallbackPolicy, ToolCallbacks } from "./tool-callbacks";
import type { TranscriptRow } from "./transcript";
import { SessionSockets } from "./websocket";

export type { Checkpoint } from "./checkpoint";
export type { GenerationResult } from "./generations";
export type { SessionIdentity } from "./session-state";
export type { StoredSystemPrompt, SystemPromptAnswer } from "./system-prompt";
export type { ToolCallbackAnswer, ToolCallbackPolicy } from "./tool-callbacks";
export type { SessionLimitsInput } from "./transcript-limits";

/** The Durable Object of one session key: RPC methods that delegate to src/sessions modules, and the alarm. */
export class SessionDO extends DurableObject<Env> {
  readonly #cx: SessionContext;
  readonly #engine: RunEngine;
  readonly #waiters = new RunWaiters();
  readonly #alarms: AlarmRunner;
  readonly #callbacks: ToolCallbacks;
  readonly #sockets: SessionSockets;

  constructor(ctx: DurableObjectState, env: Env) {
    // A copy, updated in place with the admin-stored secrets: the run engine and every module hold this one object.
    super(ctx, { ...env });
    const cx = sessionContext(ctx, this.env, env);
    this.#cx = cx;
    this.#engine = new RunEngine(createRunHost(cx, this.#waiters));
    const drain = runDrain(cx, this.#engine);
    this.#sockets = new SessionSockets(cx, this, (runId) => this.#waiters.wake(runId));
    // The order each alarm runs them in (the order the alarm always ran this work): add new background work here.
    this.#alarms = new AlarmRunner(ctx.storage, [
      approvalExpiry(cx, this.#engine),
      idempotencyPurge(cx),
      drain,
      new Shipping(cx, new RunBundles(cx)),
      jobNotifications(cx),
      firingReports(cx),
      channelReplies(cx),
      this.#sockets.upkeep(),
    ]);
    const flushLogs = () => isolateLogSinks(this.env.AUDIT).flushSoon();
    windowOf(ctx.storage).afterTimerPass = () => this.#alarms.settle(this.#engine.busy).then(flushLogs);
    this.#callbacks = new ToolCallbacks(cx, () => this.#alarms.reschedule());
    this.#waiters.listen((runId) => this.#sockets.onRunEvent(runId));
    // Apply the schema before any RPC runs; blockConcurrencyWhile holds every other event until done.
    ctx.blockConcurrencyWhile(async () => {
      migrate(ctx.storage, cx.sql, SESSION_MIGRATIONS);
      markCreated(cx.sql, new Date().toISOString());
      // Work left by an interrupted run is picked up again even if its alarm was lost.
      if (drain.nextAlarmAt(Date.now()) !== null) await alarmNow(ctx.storage);
    });
  }

  /** Runs the background capabilities (queued runs first among the shipping), then sets the next alarm. */
  override async alarm(): Promise<void> {
    await this.#alarms.run(() => this.#cx.refreshSecrets());
    isolateLogSinks(this.env.AUDIT).flushSoon(); // not awaited: the isolate's sinks (also after a timer's pass, D-061)
  }

  /** The WebSocket conversation route (src/sessions/websocket.ts): the Worker's admitted upgrade, then the socket's frames. */
  override async fetch(request: Request): Promise<Response> {
    return this.#sockets.accept(request);
  }
  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    await this.#sockets.message(ws, message);
  }
  override async webSocketClose(ws: WebSocket): Promise<void> {
    await this.#sockets.closed(ws);
  }
  override async webSocketError(ws: WebSocket): Promise<void> {
    await this.#sockets.closed(ws);
  }

  /** A gateway tool callback from a sandbox (S5), executed once per `(tool, tool_call_id)` (see tool-callbacks.ts). */
  async toolCallback(
    sessionId: string,
    calledAs: string,
    toolCallId: string,
    args: Record<string, unknown>,
    p: ToolCallbackPolicy,
  ): Promise<ToolCallbackAnswer> {
    return this.#callbacks.answer(sessionId, calledAs, toolCallId, args, p);
  }

  /** Today's chain head of this object's audit stream for `day` (for verification). */
  async auditHead(day: string): Promise<{ counter: number; sha256: string }> {
    return auditHead(this.#cx.sql, day);
  }

  /** Records an agent-level event in this session's audit stream (creating the session if needed). */
  async recordAuditEvent(identity: SessionIdentity, eventType: string, actor: string, payload: Record<string, unknown>): Promise<void> {
    return recordAuditEvent(this.#cx, identity, eventType, actor, payload);
  }

  /** Admin: approves or denies a pending approval (S1 §3.3); its run resumes here, inline, after the answer too (D-059). */
  async decideApproval(
    approvalId: string,
    decision: "approve" | "deny",
    decidedBy: string,
    reason: string | null,
  ): Promise<{ ok: true; approval: ApprovalRow } | { ok: false; reason: "not_found" | "decided" | "expired"; approval?: ApprovalRow }> {
    const result = this.#engine.decideApproval(approvalId, decision, decidedBy, reason);
    if (!result.ok && result.reason !== "expired") return result;
    const started = await resumeDecided(this.#cx, this.#engine, () => this.#alarms.expedite(), result.approval?.run_id);
    // D1 hears of the decision before the admin's call returns: the pending limits and admin lists read it there.
    await shipIndexNow(this.#cx);
    if (!started) await this.#alarms.reschedule(); // else the watchdog armed for the run reschedules when it fires
    return result;
  }

  /** One approval as stored here. */
  async approval(approvalId: string): Promise<ApprovalRow | null> {
    return getApproval(this.#cx.sql, approvalId) ?? null;
  }

  /**
   * Stores a user message (redacted) and queues a run for it; idempotent per `dispatchKey` (see enqueue.ts). The
   * run starts at once, behind any run executing here, and goes on after this call answers (the watchdog alarm
   * keeps the object alive meanwhile and resumes the run if it is lost).
   */
  async enqueueMessage(identity: SessionIdentity, input: EnqueueInput): Promise<Enqueued> {
    const { queued } = await enqueueInline(this.#cx, this.#engine, identity, input, () => this.#alarms.expedite());
    await sessionListed(this.#cx); // a new session is listed before the call answers (issue 23)
    return queued;
  }

  /** `enqueueMessage`, then waits for its run to stop, in one call (`POST /v1/runs` with `Prefer: wait`, issue 12). */
  async enqueueAndAwait(
    identity: SessionIdentity,
    input: EnqueueInput,
    waitMs: number,
    opts: { untilPaused?: boolean } = {},
  ): Promise<{ queued: Enqueued; done: AwaitedRun | null }> {
    const { queued, stopped } = await enqueueInline(this.#cx, this.#engine, identity, input, () => this.#alarms.expedite(), true);
    // Issue 23: answered from the row the engine hands back when the run stops, once its last commit is durable.
    const q = { runId: queued.runId, waitMs, untilPaused: opts.untilPaused };
    const { sql } = this.#cx;
    const done = stopped
      ? await awaitInline(sql, this.#waiters, this.#engine, stopped, q)
      : await awaitRun(sql, this.#waiters, queued.runId, waitMs, opts);
    await sessionListed(this.#cx, true); // a new session, listed with its run's rows in one D1 batch (D-069)
    return { queued, done };
  }

  /** `/new`: archives the current generation to R2 and starts another. Nothing changes if the archive fails. */
  async newSession(identity: SessionIdentity): Promise<GenerationResult> {
    return newGeneration(this.#cx, identity);
  }

  /** `/resume <session_id>`: brings back an archived generation of this same session key. */
  async resumeSession(identity: SessionIdentity, targetSessionId: string): Promise<GenerationResult> {
    return resumeGeneration(this.#cx, identity, targetSessionId);
  }

  /** Admin: restores a `save_snapshot` snapshot into a new generation (refused while a run is active). */
  async restoreSnapshot(
    identity: SessionIdentity,
    snapshot: Snapshot,
  ): Promise<{ ok: true; previousSessionId: string; checkpoint: Checkpoint } | { ok: false; reason: "archive_failed" | "busy" }> {
    return restoreSnapshot(this.#cx, identity, snapshot);
  }

  /** Every message of a generation, in order; with `page`, those after `afterSeq`, at most `limit`. */
  async messages(sessionId: string, page?: { afterSeq: number; limit: number }): Promise<TranscriptRow[] | null> {
    return generationMessages(this.#cx, sessionId, page);
  }

  /** A generation's transcript as JSONL, byte-stable. */
  async exportTranscript(sessionId: string): Promise<string | null> {
    return exportTranscript(this.#cx, sessionId);
  }

  /** A run in S3 §5's shape, with the caller that queued it (for access checks), or null. */
  async runRecord(runId: string): Promise<{ view: RunView; callerId: string | null; sessionId: string } | null> {
    return runRecord(this.#cx.sql, runId);
  }

  /** A run's lifecycle events after `afterSeq`, and whether the run has ended (long-polls up to `waitMs`). */
  async runEvents(runId: string, afterSeq = 0, limit = 500, waitMs = 0): ReturnType<typeof runEvents> {
    return runEvents(this.#cx.sql, this.#waiters, runId, { afterSeq, limit, waitMs });
  }

  /** Waits (at most `waitMs`, capped at 60 s) for a run to end — or, with `untilPaused`, to pause for approval. */
  async awaitRun(runId: string, waitMs: number, opts: { untilPaused?: boolean } = {}): Promise<AwaitedRun | null> {
    return awaitRun(this.#cx.sql, this.#waiters, runId, waitMs, opts);
  }

  /** Issue 23: one read of a streaming caller — text released past `after`, and the run (see runs/stream-release.ts). */
  async releasedText(runId: string, after: number, waitMs: number): Promise<ReleasedSlice<AwaitedRun>> {
    return releasedSlice(this.#cx.sql, this.#waiters, runId, after, waitMs);
  }

  /** D-060: a guarded stream in one RPC — frames of released text until the run ends or pauses (runs/release-stream.ts). */
  async releaseStream(runId: string, o: ReleaseStreamOptions): Promise<ReadableStream<Uint8Array>> {
    return releaseStream(this.#cx.sql, this.#waiters, runId, o);
  }

  /** Admin: the run with every event, its S4 §6 trace and the prompt manifest of each model call. */
  async runDetail(runId: string): Promise<RunDetail | null> {
    return runDetail(this.#cx.sql, runId);
  }

  /** Cancels a queued or running run (`run.cancelled`); a finished run is left as it is. */
  async cancelRun(
    runId: string,
  ): Promise<{ ok: true; status: RunStatus } | { ok: false; reason: "not_found" | "finished"; status?: RunStatus }> {
    const result = this.#engine.cancel(runId);
    if (result.ok) await shipIndexNow(this.#cx); // a cancelled run, and its approval, are listed as such on return
    return result;
  }

  /** S4 §1.2 checkpoint: the state, its revision, the bounded recent messages and the trace tail. */
  async checkpoint(identity: SessionIdentity): Promise<Checkpoint> {
    return checkpoint(this.#cx, identity);
  }

  /** Admin: grants a capability (S4 §1.1), removing it from pending. Audited. */
  async grantCapability(identity: SessionIdentity, cap: string): Promise<Checkpoint> {
    return changeCapability(this.#cx, identity, cap, "grant");
  }

  /** Admin: revokes a granted capability. Audited. */
  async revokeCapability(identity: SessionIdentity, cap: string): Promise<Checkpoint> {
    return changeCapability(this.#cx, identity, cap, "revoke");
  }

  /** The current generation and its S5 type (creating the session on first use), for the sandbox bootstrap. */
  async sessionInfo(identity: SessionIdentity): Promise<{ sessionId: string; sessionType: SessionType }> {
    const state = await ensureSession(this.#cx, identity);
    return { sessionId: state.sessionId, sessionType: sessionType(this.#cx) };
  }

  /** Admin: the inline L2 of generation `sessionId` (null: none set); `gone` when it is not the current generation. */
  async systemPrompt(identity: SessionIdentity, sessionId: string): Promise<SystemPromptAnswer> {
    return getSystemPrompt(this.#cx, identity, sessionId);
  }

  /** Admin: sets (`text`) or clears (null) the inline L2 of the current generation. Audited (hash and size only). */
  async setSystemPrompt(identity: SessionIdentity, sessionId: string, text: string | null): Promise<SystemPromptAnswer> {
    return setSystemPrompt(this.#cx, identity, sessionId, text);
  }
}
