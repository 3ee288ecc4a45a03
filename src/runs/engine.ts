/**
 * The run engine: executes a session's queued runs inside its SessionDO, one
 * at a time, in arrival order, driven by the object's alarm (S3 §2, S4 §3,
 * §7, S1 §1.5, DESIGN "Tool calls", "Failure loop").
 *
 * Runs start inline, in the call that queued them (issue 23, D-051): `drain` is serialized per object, so a
 * message that arrives while a run executes joins the same drain and runs after it, in arrival order; the
 * alarm only resumes a drain this instance lost (eviction, crash), and `busy` tells it whether one is live.
 *
 * A run is a loop of rounds: a tool round when calls are planned (tool-round.ts,
 * gated by gate.ts), else a model round (model-round.ts: buildPrompt →
 * reserveBudget → callModel → interpretReply). Every step is persisted — in one
 * storage transaction with the events it emits (round-commits.ts, lifecycle.ts)
 * — before the next begins, so a run interrupted by eviction, a deploy or a
 * crash resumes where it stopped:
 * - a model call that was in flight is made again (it had no effect);
 * - a tool call is marked `started` before its handler runs and `done` with
 *   its result after; a call found `started` on resume had its effect, or not,
 *   and is never run again (read-only tools excepted) — its result says so.
 * After MAX_EXECUTIONS interrupted attempts a run fails rather than loop. The
 * D1 index rows are shipped after each commit (ship.ts).
 */
import type { RunLine } from "../observability/logger";
import { classifyDisclosureRequest, disclosureRefusalMessage, REFUSE_SYSTEM_PROMPT } from "../prompts/disclosure";
import "../tools/builtin";
import { tools as defaultRegistry } from "../tools/registry";
import { type ApprovalDecision, decideApproval, expireOverdue } from "./approval-flow";
import { completionOutput, recordedCompletion } from "./completion";
import { INITIAL_FAILURE_LOOP } from "./failure-loop";
import type { Finish, RunContext, RunHost } from "./host";
import { finishRun, startRun } from "./lifecycle";
import { modelRound } from "./model-round";
import { commitRunEnd } from "./round-commits";
import { prefetchRunReads, recordRefusedTurn } from "./round-prompt";
import { shipRunIndex } from "./ship";
import type { RunSpec } from "./spec";
import {
  countExecution,
  getRun,
  isTerminal,
  loadFailureLoop,
  nextRunnable,
  parseSpec,
  type RunRow,
  type RunStatus,
  requestCancel,
  resetExecutions,
  saveFailureLoop,
  transcriptContent,
  unfinishedToolCalls,
} from "./store";
import { toolRound } from "./tool-round";
import { dropRound, logTurn } from "./turn-line";

export { setupOnlyReason } from "./gate";
export type { RunHost } from "./host";
export { REFUSED_TURN_NOTE } from "./round-prompt";

/** What a caller waiting for a run gets when it stops: its row, and its log lines held for the caller (D-068). */
export interface Stopped {
  row: RunRow;
  lines: RunLine[];
}

/** A run interrupted this many times fails instead of starting again. */
export const MAX_EXECUTIONS = 3;
/** How long a run runs before the D1 index is told it is running (a shorter run is indexed once, when it ends). */
export const RUNNING_INDEX_DELAY_MS = 1_000;

/** The SessionDO's run engine: drains the queue, cancels, and records decisions on approvals. */
export class RunEngine {
  readonly #ctx: RunContext;
  /** In-flight work of the run executing now, so that cancel can stop it at once. */
  readonly #controllers = new Map<string, AbortController>();
  /** The drain executing in this instance, if any (in memory: an evicted instance's drain is resumed by the alarm). */
  #draining: Promise<void> | null = null;
  /** The run `startInline` started in its storing transaction; its drain does not count it as a second execution. */
  #startedInline: string | null = null;
  /** Callers waiting for a run to stop (end or pause), handed its last row from memory and its held lines. */
  readonly #settled = new Map<string, ((stopped: Stopped) => void)[]>();

  constructor(host: RunHost) {
    this.#ctx = { host, registry: host.registry ?? defaultRegistry, configured: new Map(), envNames: new Map() };
  }

  /** Whether a drain is executing in this instance now. */
  get busy(): boolean {
    return this.#draining !== null;
  }

  /**
   * Executes runs until none is queued; one drain per instance at a time (a call while one is live joins it,
   * and that drain picks the new run up after the current one). Called inline by enqueue, and by the alarm.
   */
  drain(): Promise<void> {
    if (!this.#draining) this.#draining = Promise.resolve().then(() => this.#drainAll());
    return this.#draining;
  }

  /**
   * Resolves with the run's row (from memory) when this instance stops executing it — ended, or paused for approval —
   * and the run's own log lines, held for the caller meanwhile instead of printed (D-068). The caller prints them
   * with its answer, or hands them back to `forget`.
   */
  whenStopped(runId: string): Promise<Stopped> {
    this.#ctx.host.logger.hold(runId);
    return new Promise((resolve) => {
      this.#settled.set(runId, [...(this.#settled.get(runId) ?? []), resolve]);
    });
  }

  /** Forgets the waiters of a run (a caller that timed out, or will not answer with `taken`): the lines held for them print now. */
  forget(runId: string, taken: readonly RunLine[] = []): void {
    this.#settled.delete(runId);
    this.#ctx.host.logger.release(runId, taken);
  }

  /** Reads the run's D1-held inputs (agent configured? env key names?) before its first commit, so none splits it. */
  async prefetch(runId: string, spec: RunSpec | undefined): Promise<void> {
    // Behind a live run the memos still hold that run's answers: this run reads its own when it starts.
    if (spec && !this.busy) await prefetchRunReads(this.#ctx, runId, spec).catch(() => {});
  }

  /** The drain loop. It ends in the same step as its empty check: a run queued after it starts a new drain. */
  async #drainAll(): Promise<void> {
    try {
      for (;;) {
        const run = nextRunnable(this.#ctx.host.sql);
        if (!run) return;
        await this.execute(run);
      }
    } finally {
      this.#draining = null;
    }
  }

  /** Requests cancellation. Queued runs end at once; a running one stops at its next step (its in-flight call is aborted). */
  cancel(runId: string): { ok: true; status: RunStatus } | { ok: false; reason: "not_found" | "finished"; status?: RunStatus } {
    const { sql, storage } = this.#ctx.host;
    const run = getRun(sql, runId);
    if (!run) return { ok: false, reason: "not_found" };
    if (isTerminal(run.status)) return { ok: false, reason: "finished", status: run.status };
    if (run.status === "queued" || run.status === "awaiting_approval") {
      const reason = run.status === "queued" ? "cancelled before it started" : "cancelled while waiting for an approval";
      storage.transactionSync(() => finishRun(this.#ctx, run, { status: "cancelled", reason }));
      void shipRunIndex(this.#ctx.host, runId);
      return { ok: true, status: "cancelled" };
    }
    requestCancel(sql, runId);
    this.#controllers.get(runId)?.abort();
    return { ok: true, status: "running" };
  }

  /**
   * Called inside the transaction that stores a run the caller starts inline at once (issue 23: the run's start
   * joins that commit). Only when no drain is live and no older run is runnable: otherwise the drain starts it.
   */
  startInline(runId: string): void {
    if (this.busy) return;
    const run = nextRunnable(this.#ctx.host.sql);
    if (run?.id !== runId) return;
    startRun(this.#ctx, run);
    this.#startedInline = runId;
  }

  /** Executes (or resumes) one run to its end (or pause). Never throws: an unexpected error fails the run. */
  async execute(initial: RunRow): Promise<void> {
    const { sql, storage } = this.#ctx.host;
    const spec = parseSpec(initial);
    const refusal = spec ? tooManyExecutions(initial) : NO_SPEC;
    if (refusal || !spec) {
      storage.transactionSync(() => {
        // A run without a spec is started first, so its log reads started → failed.
        if (!spec && initial.status === "queued") startRun(this.#ctx, initial);
        finishRun(this.#ctx, initial, refusal ?? NO_SPEC);
      });
      return this.#stopped(initial.id);
    }
    const startedInline = this.#startedInline === initial.id;
    this.#startedInline = null;
    if (!startedInline)
      storage.transactionSync(() => {
        if (initial.status === "queued") startRun(this.#ctx, initial);
        else countExecution(sql, initial.id);
      });
    // Started inline, `initial` was read after the start (the drain reads it): no second read.
    const run = startedInline ? initial : (getRun(sql, initial.id) as RunRow);
    const finish = await this.#run(run, spec);
    if (finish.status === "paused") {
      // Waiting for a human: the decision (or the approval's expiry) puts the run back in the queue.
      // A pause is a clean stop, so it does not count towards MAX_EXECUTIONS.
      resetExecutions(sql, run.id);
      dropRound(this.#ctx, run.id);
      return this.#stopped(run.id);
    }
    const current = getRun(sql, run.id) as RunRow;
    if (isTerminal(current.status)) {
      logTurn(this.#ctx, current, finish);
      return this.#stopped(run.id, current);
    }
    storage.transactionSync(() => finishRun(this.#ctx, current, finish));
    const ended = getRun(sql, run.id) as RunRow;
    logTurn(this.#ctx, ended, finish);
    return this.#stopped(run.id, ended);
  }

  /**
   * The run stopped (its last commit made): callers waiting for it get its row now — the output gate holds their
   * answer until that commit is durable — and the index rows are shipped after, off the caller's path.
   */
  async #stopped(runId: string, row = getRun(this.#ctx.host.sql, runId) as RunRow): Promise<void> {
    const waiting = this.#settled.get(runId) ?? [];
    this.#settled.delete(runId);
    const lines = this.#ctx.host.logger.take(runId);
    if (waiting.length === 0) this.#ctx.host.logger.print(lines);
    for (const [i, resolve] of waiting.entries()) resolve({ row, lines: i === 0 ? lines : [] });
    await shipRunIndex(this.#ctx.host, runId, row.status);
  }

  /** Records a human decision on a pending approval and puts its run back in the queue. Expired → `expired`; decided before → `decided`. */
  decideApproval(approvalId: string, decision: "approve" | "deny", by: string, reason: string | null, now = new Date()): ApprovalDecision {
    return decideApproval(this.#ctx, approvalId, decision, by, reason, now);
  }

  /** Expires pending approvals whose time is up; their runs continue (the call is denied). Returns how many. */
  expireOverdue(now = new Date()): number {
    return expireOverdue(this.#ctx, now);
  }

  /** Runs the loop under the run's abort controller; an unexpected error fails the run. */
  async #run(run: RunRow, spec: RunSpec): Promise<Finish> {
    // The D1 index hears that a run is running only if it still is RUNNING_INDEX_DELAY_MS later; most runs end
    // sooner, and their one index write is the final one (issue 12: one D1 write per turn fewer).
    const announce = setTimeout(() => void shipRunIndex(this.#ctx.host, run.id), RUNNING_INDEX_DELAY_MS);
    const controller = new AbortController();
    this.#controllers.set(run.id, controller);
    try {
      return await this.#loop(run, spec, controller.signal);
    } catch (err) {
      this.#ctx.host.logger.log("error", "run.internal_error", { run_id: run.id, error_name: err instanceof Error ? err.name : "unknown" });
      return { status: "failed", code: "internal.error", message: "the run failed unexpectedly; nothing more was done" };
    } finally {
      clearTimeout(announce);
      this.#controllers.delete(run.id);
    }
  }

  /** The rounds of one run, from wherever it stopped. */
  async #loop(initial: RunRow, spec: RunSpec, signal: AbortSignal): Promise<Finish> {
    const ctx = this.#ctx;
    const { sql } = ctx.host;
    const userMessage = transcriptContent(sql, initial.message_seq);
    if (userMessage === undefined)
      return { status: "failed", code: "internal.error", message: "the run's message is no longer in the session" };
    // A new request after an escalation starts the failure loop afresh: the user has given guidance.
    if (initial.rounds === 0 && loadFailureLoop(sql).mode === "escalated") saveFailureLoop(sql, INITIAL_FAILURE_LOOP);
    for (let first = true; ; first = false) {
      // The first round works on the row `execute` has just read (nothing is awaited in between).
      const run = first ? initial : (getRun(sql, initial.id) as RunRow);
      if (run.cancel_requested || signal.aborted) return { status: "cancelled", reason: "cancelled while running" };
      const pending = unfinishedToolCalls(sql, run.id);
      if (pending.length > 0) {
        const stop = await toolRound(ctx, run, spec, pending, signal);
        if (stop) return stop;
        continue;
      }
      // Issue 21 §1: a recorded automation.complete ends the run after its tool round, with no further model call.
      const completion = recordedCompletion(sql, run.id);
      if (completion) return { status: "completed", output: completionOutput(completion) };
      // Input disclosure guard (S1 §2.5): a refused request never reaches the model.
      if (run.rounds === 0 && classifyDisclosureRequest(userMessage).refuse) {
        const reply = disclosureRefusalMessage();
        await recordRefusedTurn(ctx, run, spec, userMessage);
        const finish = { status: "completed", output: reply, payload: { refused: REFUSE_SYSTEM_PROMPT } } as const;
        commitRunEnd(ctx, run, finish, reply);
        return finish;
      }
      const outcome = await modelRound(ctx, run, spec, userMessage, signal);
      if (outcome) return outcome;
    }
  }
}

/** A run queued without a spec cannot execute. */
const NO_SPEC = { status: "failed", code: "internal.error", message: "this run was queued without a run spec and cannot execute" } as const;

/** A run interrupted MAX_EXECUTIONS times is failed rather than started again. */
function tooManyExecutions(run: RunRow): Extract<Finish, { status: "failed" }> | null {
  if (run.executions < MAX_EXECUTIONS) return null;
  return { status: "failed", code: "internal.error", message: `the run was interrupted ${run.executions} times and was not started again` };
}
