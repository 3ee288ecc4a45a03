/**
 * The cron tick (wrangler.toml `* * * * *`; DESIGN "Scheduler"). Short and
 * bounded, and it never runs a model call itself:
 *
 * 1. one query finds enabled jobs whose next slot has come (at most
 *    `scheduler.maxFiringsPerTick`, oldest first; the rest wait for the next tick);
 * 2. one D1 batch (a transaction) claims each firing by inserting its run key
 *    `(job_id, scheduled_for)` — conditional on the job still being enabled with
 *    the next run this tick read — and moves the job to its next slot. A tick that
 *    overlaps or repeats finds the key taken (or the job moved on) and claims
 *    nothing. The same batch takes over claims a dead tick left behind (older than
 *    the lease) and writes the heartbeat;
 * 3. each claimed firing goes to a SessionDO through src/runs/submit.ts (`isolated` → a fresh `job` session
 *    per firing, `main_like` → the agent's main session) under the same run key,
 *    which the object dedupes — so a firing handed over twice is still one run;
 * 4. one batch records the outcomes;
 * 5. one bounded statement prunes refused channel senders past their retention (D-083), so a flood of distinct
 *    unknown senders cannot grow D1 without bound; a failure there is logged and retried next tick.
 *
 * Missed windows are not replayed (S3 §4): a job fires the latest slot that has
 * come, once, and its next run is the first slot after it; a one-shot fires once
 * and is disabled. Everything is timed by the controller's `scheduledTime`.
 */

import { pruneExpiredButtons } from "../channels/approval-button-store";
import { REFUSAL_REPLY_WINDOW_MS } from "../channels/sender-policy";
import { pruneRefusedSenders } from "../channels/sender-store";
import type { GatewayConfig } from "../config/schema";
import type { Logger } from "../observability/logger";
import { jobCallerKey } from "../runs/caller";
import type { ConfigRef } from "../runs/spec";
import { submitTurn } from "../runs/submit";
import { parseSessionKey } from "../sessions/keys";
import { chatNotifySpec, chatNotifyUnavailable, isChatNotifyChannel } from "./chat-notify";
import type { NotifySpec } from "./notify";
import { dueFiring } from "./slots";
import { webhookIdFor } from "./webhook-id";

/** A claim older than this belongs to a tick that died: a later tick takes it over. */
export const CLAIM_LEASE_MS = 2 * 60_000;
/** Hand-overs per firing before it is given up as failed. */
export const MAX_DISPATCH_ATTEMPTS = 5;
/** A tick starts no new hand-over after this long (the rest are taken over after the lease). */
export const DISPATCH_BUDGET_MS = 20_000;

/** A claimed firing: the job as it was when claimed. */
export interface Firing {
  jobId: string;
  scheduledFor: string;
  agentId: string;
  message: string;
  mode: "isolated" | "main_like";
  notifyChannel: string;
  notifyTarget: string;
  missed: number;
  attempts: number;
}

export type DispatchOutcome =
  | { ok: true; runId: string; sessionKey: string }
  /** The firing cannot run (e.g. its agent left the configuration): recorded, not retried. */
  | { ok: false; skip: true; error: string };

/** Hands a firing to its SessionDO. Throwing leaves the claim for a later tick. */
export type Dispatcher = (firing: Firing) => Promise<DispatchOutcome>;

export interface TickReport {
  scheduledTime: string;
  due: number;
  claimed: number;
  recovered: number;
  dispatched: number;
  skipped: number;
  failed: number;
  /** Hand-overs that threw or did not start in time; their claims are taken over after the lease. */
  deferred: number;
  /** Refused channel senders' rows pruned this tick (at most SENDER_PRUNE_LIMIT, D-083). */
  sendersPruned: number;
}

/** The session key a firing runs in. */
export function firingSessionKey(f: Pick<Firing, "agentId" | "jobId" | "scheduledFor" | "mode">): string {
  if (f.mode === "main_like") return `agent:${f.agentId}:main`;
  // scope `job`, channel `job`, account = job id, peer = the slot in compact ISO form (no ':' in key parts).
  return `agent:${f.agentId}:job:${f.jobId}:job:${f.scheduledFor.replaceAll("-", "").replaceAll(":", "")}`;
}

/** The run key of a firing, as the SessionDO dedupes it. */
export const dispatchKeyOf = (f: Pick<Firing, "jobId" | "scheduledFor">) => `job:${f.jobId}:${f.scheduledFor}`;

/** What a firing's run is queued with for its notification: a signed webhook, a chat report, or nothing. */
async function notifySpecOf(f: Firing, config: GatewayConfig, ref?: ConfigRef): Promise<NotifySpec | null> {
  const at = { jobId: f.jobId, scheduledFor: f.scheduledFor };
  if (isChatNotifyChannel(f.notifyChannel)) return chatNotifySpec({ channel: f.notifyChannel, target: f.notifyTarget, ...at }, config, ref);
  if (f.notifyChannel !== "webhook") return null;
  const n = config.scheduler.notify;
  return {
    channel: "webhook",
    target: f.notifyTarget,
    webhookId: await webhookIdFor(f.jobId, f.scheduledFor),
    ...at,
    maxAttempts: n.maxAttempts,
    retryBaseMs: n.retryBaseMs,
    timeoutMs: n.timeoutMs,
  };
}

/** The production dispatcher: queues the firing's run in its SessionDO. */
export function sessionDispatcher(env: Pick<Env, "SESSIONS">, config: GatewayConfig, ref?: ConfigRef): Dispatcher {
  return async (f) => {
    const agent = Object.hasOwn(config.agents, f.agentId) ? config.agents[f.agentId] : undefined;
    if (!agent) return { ok: false, skip: true, error: `agent "${f.agentId}" is not in the configuration` };
    const parsed = parseSessionKey(firingSessionKey(f));
    if (!parsed.ok) return { ok: false, skip: true, error: parsed.error };
    const notify = await notifySpecOf(f, config, ref);
    const { queued, sessionKey } = await submitTurn(
      { env, config, ...(ref ? { configRef: ref } : {}) },
      {
        agentId: f.agentId,
        session: parsed.key,
        message: f.message,
        source: "job",
        channel: "job",
        task: "automation",
        // Each job is its own caller for the per-caller limits (issue 20 §4).
        callerKey: jobCallerKey(f.jobId),
        dispatchKey: dispatchKeyOf(f),
        job: { jobId: f.jobId, scheduledFor: f.scheduledFor, missed: f.missed },
        notify,
      },
    );
    return { ok: true, runId: queued.runId, sessionKey };
  };
}

interface DueRow {
  job_id: string;
  kind: "every" | "once";
  interval_ms: number | null;
  anchor_ms: number;
  next_run_ms: number;
}

interface ClaimedRow {
  job_id: string;
  scheduled_for: string;
  agent_id: string;
  message: string;
  mode: "isolated" | "main_like";
  notify_channel: string;
  notify_target: string;
  missed: number;
  attempts: number;
}

/**
 * Step 5: prunes refused senders past their retention (D-083) and chat approval buttons a week past their approval's
 * expiry; a D1 failure is logged (the next tick tries again), never thrown. Answers the senders pruned.
 */
async function pruneSenders(db: D1Database, now: number, logger: Logger): Promise<number> {
  const failed = (event: "scheduler.senders_prune" | "scheduler.buttons_prune") => (err: unknown) => {
    logger.log("warn", event, { error_name: err instanceof Error ? err.name : "error" });
    return 0;
  };
  const [senders] = await Promise.all([
    pruneRefusedSenders(db, now, REFUSAL_REPLY_WINDOW_MS).catch(failed("scheduler.senders_prune")),
    pruneExpiredButtons(db, new Date(now)).catch(failed("scheduler.buttons_prune")),
  ]);
  return senders;
}

/** Runs one tick at `controller.scheduledTime`. */
export async function runSchedulerTick(
  env: Pick<Env, "DB" | "SESSIONS">,
  controller: Pick<ScheduledController, "scheduledTime" | "cron">,
  logger: Logger,
  o: { config: GatewayConfig; configRef?: ConfigRef; dispatch?: Dispatcher },
): Promise<TickReport> {
  const started = Date.now();
  const db = env.DB;
  const now = controller.scheduledTime;
  const nowIso = new Date(now).toISOString();
  const tick = `tick_${crypto.randomUUID().replaceAll("-", "")}`;
  const max = o.config.scheduler.maxFiringsPerTick;

  // 1. Due jobs.
  const due = (
    await db
      .prepare(
        `SELECT job_id, kind, interval_ms, anchor_ms, next_run_ms FROM jobs
         WHERE enabled = 1 AND next_run_ms IS NOT NULL AND next_run_ms <= ?1 ORDER BY next_run_ms, job_id LIMIT ?2`,
      )
      .bind(now, max)
      .all<DueRow>()
  ).results;

  // 2. Claims, take-overs and the heartbeat, in one transaction.
  const statements: D1PreparedStatement[] = [
    db
      .prepare(
        "INSERT INTO gateway_heartbeats (name, last_at, detail) VALUES ('cron', ?1, ?2) ON CONFLICT (name) DO UPDATE SET last_at = excluded.last_at, detail = excluded.detail",
      )
      .bind(nowIso, JSON.stringify({ cron: controller.cron })),
    db
      .prepare(
        `UPDATE job_firings SET tick = ?1, claimed_at = ?2, attempts = attempts + 1
         WHERE rowid IN (SELECT rowid FROM job_firings WHERE status = 'claimed' AND claimed_at < ?3 ORDER BY claimed_at LIMIT ?4)`,
      )
      .bind(tick, nowIso, new Date(now - CLAIM_LEASE_MS).toISOString(), max),
  ];
  for (const job of due) {
    const firing = dueFiring({ kind: job.kind, intervalMs: job.interval_ms, anchorMs: job.anchor_ms, nextRunMs: job.next_run_ms }, now);
    if (!firing) continue;
    const slot = new Date(firing.slotMs).toISOString();
    statements.push(
      db
        .prepare(
          `INSERT INTO job_firings (job_id, scheduled_for, agent_id, tick, status, message, mode, notify_target, missed, claimed_at,
                                   notify_channel, notify_status)
           SELECT job_id, ?2, agent_id, ?3, 'claimed', message, mode, notify_target, ?4, ?5,
                  notify_channel, CASE notify_channel WHEN 'none' THEN 'none' ELSE 'pending' END
           FROM jobs WHERE job_id = ?1 AND enabled = 1 AND next_run_ms = ?6
           ON CONFLICT (job_id, scheduled_for) DO NOTHING`,
        )
        .bind(job.job_id, slot, tick, firing.missed, nowIso, job.next_run_ms),
      db
        .prepare(
          `UPDATE jobs SET next_run_ms = ?2, last_fired_at = ?3, enabled = CASE kind WHEN 'once' THEN 0 ELSE enabled END
           WHERE job_id = ?1 AND enabled = 1 AND next_run_ms = ?4`,
        )
        .bind(job.job_id, firing.nextRunMs, slot, job.next_run_ms),
    );
  }
  const results = await db.batch(statements);
  const recovered = results[1]?.meta.changes ?? 0;

  // 3. Hand each claimed firing (new or taken over) to its SessionDO.
  const claimed = (
    await db
      .prepare(
        `SELECT job_id, scheduled_for, agent_id, message, mode, notify_channel, notify_target, missed, attempts
         FROM job_firings WHERE tick = ?1 AND status = 'claimed' ORDER BY scheduled_for, job_id`,
      )
      .bind(tick)
      .all<ClaimedRow>()
  ).results;
  const dispatch = o.dispatch ?? sessionDispatcher(env, o.config, o.configRef);
  const updates: D1PreparedStatement[] = [];
  let dispatched = 0;
  let skipped = 0;
  let failed = 0;
  let deferred = 0;
  const settle = (row: ClaimedRow, status: "skipped" | "failed", error: string) => {
    updates.push(
      db
        .prepare(
          `UPDATE job_firings SET status = ?4, error = ?5, notify_status = CASE notify_status WHEN 'pending' THEN 'none' ELSE notify_status END
           WHERE job_id = ?1 AND scheduled_for = ?2 AND tick = ?3 AND status = 'claimed'`,
        )
        .bind(row.job_id, row.scheduled_for, tick, status, error),
    );
  };
  const handOver = async (row: ClaimedRow) => {
    if (row.attempts > MAX_DISPATCH_ATTEMPTS) {
      failed++;
      settle(row, "failed", `not handed over after ${MAX_DISPATCH_ATTEMPTS} attempts`);
      logger.log("error", "scheduler.firing", { job_id: row.job_id, scheduled_for: row.scheduled_for, outcome: "failed" });
      return;
    }
    const firing: Firing = {
      jobId: row.job_id,
      scheduledFor: row.scheduled_for,
      agentId: row.agent_id,
      message: row.message,
      mode: row.mode,
      notifyChannel: row.notify_channel,
      notifyTarget: row.notify_target,
      missed: row.missed,
      attempts: row.attempts,
    };
    let outcome: DispatchOutcome;
    try {
      outcome = await dispatch(firing);
    } catch (err) {
      deferred++;
      const error = err instanceof Error ? err.name : "error";
      updates.push(
        db
          .prepare("UPDATE job_firings SET error = ?4 WHERE job_id = ?1 AND scheduled_for = ?2 AND tick = ?3 AND status = 'claimed'")
          .bind(row.job_id, row.scheduled_for, tick, `hand-over failed (${error}); retried after the lease`),
      );
      logger.log("warn", "scheduler.firing", {
        job_id: row.job_id,
        scheduled_for: row.scheduled_for,
        outcome: "deferred",
        error_name: error,
      });
      return;
    }
    if (!outcome.ok) {
      skipped++;
      settle(row, "skipped", outcome.error);
      logger.log("warn", "scheduler.firing", { job_id: row.job_id, scheduled_for: row.scheduled_for, outcome: "skipped" });
      return;
    }
    dispatched++;
    // A chat report whose channel was turned off since the job was written: the run went without one; say why here.
    const notifyError = chatNotifyUnavailable(row.notify_channel, o.config);
    updates.push(
      db
        .prepare(
          `UPDATE job_firings SET status = 'dispatched', run_id = ?4, session_key = ?5, dispatched_at = ?6, error = NULL,
                  notify_status = CASE WHEN ?7 IS NULL THEN notify_status ELSE 'failed' END, notify_error = COALESCE(?7, notify_error)
           WHERE job_id = ?1 AND scheduled_for = ?2 AND tick = ?3 AND status = 'claimed'`,
        )
        .bind(row.job_id, row.scheduled_for, tick, outcome.runId, outcome.sessionKey, new Date().toISOString(), notifyError),
    );
    logger.log("info", "scheduler.firing", {
      job_id: row.job_id,
      scheduled_for: row.scheduled_for,
      outcome: "dispatched",
      run_id: outcome.runId,
      missed: row.missed,
    });
  };

  // A small pool of concurrent hand-overs; none starts after the budget (their claims wait for the lease).
  const queue = [...claimed];
  const worker = async () => {
    for (let row = queue.shift(); row; row = queue.shift()) {
      if (Date.now() - started > DISPATCH_BUDGET_MS) {
        deferred++;
        continue;
      }
      await handOver(row);
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.config.scheduler.dispatchConcurrency, claimed.length) }, worker));

  // 4. Outcomes.
  if (updates.length > 0) await db.batch(updates);
  const sendersPruned = await pruneSenders(db, now, logger);
  const report: TickReport = {
    scheduledTime: nowIso,
    due: due.length,
    claimed: claimed.length - recovered,
    recovered,
    dispatched,
    skipped,
    failed,
    deferred,
    sendersPruned,
  };
  const { scheduledTime: _, sendersPruned: senders_pruned, ...counts } = report;
  logger.log("info", "scheduler.tick", {
    scheduled_time: nowIso,
    cron: controller.cron,
    ...counts,
    senders_pruned,
    duration_ms: Date.now() - started,
  });
  return report;
}
