/**
 * Completion webhooks for API callers (issue 24 §5, D-073): a run started with `notify: {url}` on `POST /v1/runs` or
 * `POST /v1/chat/messages` POSTs its S3 run view (the body `GET /v1/runs/{run_id}` answers) to that URL whenever it
 * stops — completed, failed, cancelled — or waits for an approval.
 *
 * It is a row of the job notifications' outbox (notify.ts), channel `run`, queued in the transaction that queues the
 * run, delivered by the same alarm pass, signed like them but with the caller's own endpoint key for `v1` (derived from
 * SCHEDULER_WEBHOOK_SECRET for the run's caller and the URL, webhook-keys.ts, D-089) beside the gateway's `v1a`,
 * retried with the same backoff under one `webhook-id`, and audited (`run.notify.*`). One row per run, re-armed per state: the row holds the
 * message being sent (or last sent) and the state it is about (`settings.state`); when the run reaches another
 * notifiable state and that message has settled, the row is armed again with a new body and a new webhook-id. Each
 * approval pause is its own state (`awaiting_approval:<round>`), so a run that pauses twice notifies twice. A state the
 * run leaves before its message was armed (an approval decided within the same alarm pass) is not sent: the run's
 * latest state is. There is no D1 firing to mirror, so the row is always `reported`.
 */
import type { Sql } from "../storage/sql";

/** A run's completion webhook, as the API doors queue it. */
export interface RunNotifySpec {
  channel: "run";
  target: string;
  maxAttempts: number;
  retryBaseMs: number;
  timeoutMs: number;
}

/** A run-notification row with something due: the state the run is in now, and the one its row last armed for. */
export interface DueRunNotify extends Record<string, SqlStorageValue> {
  run_id: string;
  status: string;
  body: string | null;
  state: string;
  sent_state: string | null;
}

/** Queues the run's completion webhook (inside the run's own transaction; the outbox exists: notify.ts made it). */
export function enqueueRunNotify(sql: Sql, runId: string, spec: RunNotifySpec): void {
  const settings = JSON.stringify({ maxAttempts: spec.maxAttempts, retryBaseMs: spec.retryBaseMs, timeoutMs: spec.timeoutMs, state: null });
  sql.run`INSERT INTO notify_outbox (run_id, job_id, scheduled_for, channel, target, webhook_id, settings, status, attempts, next_attempt_at, reported)
          VALUES (${runId}, '', '', 'run', ${spec.target}, '', ${settings}, 'pending', 0, 0, 1)
          ON CONFLICT (run_id) DO NOTHING`;
}

/**
 * Run rows with work: a message armed and due again, a first message, or a settled message about a state the run
 * has left for another notifiable one. `due_at` is when (0: now).
 */
function candidates(sql: Sql): (DueRunNotify & { due_at: number })[] {
  return sql.all<DueRunNotify & { due_at: number }>`
    SELECT run_id, status, body, state, sent_state, CASE WHEN status = 'pending' THEN next_attempt_at ELSE 0 END AS due_at FROM (
      SELECT n.run_id, n.status, n.body, n.next_attempt_at, json_extract(n.settings, '$.state') AS sent_state,
             CASE r.status WHEN 'awaiting_approval'
               THEN 'awaiting_approval:' || COALESCE((SELECT MAX(a.round) FROM approvals a WHERE a.run_id = r.id), 0)
               ELSE r.status END AS state
      FROM notify_outbox n JOIN runs r ON r.id = n.run_id
      WHERE n.channel = 'run' AND r.status IN ('completed', 'failed', 'cancelled', 'awaiting_approval'))
    WHERE status = 'pending' OR sent_state IS NOT state
    ORDER BY CASE WHEN sent_state IS NOT state THEN 0 ELSE next_attempt_at END
    LIMIT 50`;
}

/** When a run notification is next due (null: none). */
export function nextRunNotifyAt(sql: Sql): number | null {
  const times = candidates(sql).map((c) => c.due_at);
  return times.length > 0 ? Math.min(...times) : null;
}

/** The run notifications due at `now`. */
export function dueRunNotifications(sql: Sql, now: number): DueRunNotify[] {
  return candidates(sql).filter((c) => c.due_at <= now);
}

/** Arms the row with the message about `state`: its fixed body and webhook-id, attempts from zero. */
export function armRunNotify(sql: Sql, runId: string, state: string, webhookId: string, body: string): void {
  sql.run`UPDATE notify_outbox SET status = 'pending', webhook_id = ${webhookId}, body = ${body}, attempts = 0, next_attempt_at = 0,
                 last_error = NULL, delivered_at = NULL, settings = json_set(settings, '$.state', ${state})
          WHERE run_id = ${runId}`;
}

/** A run notification's webhook id: `msg_` + 32 hex of SHA-256 over (run id, state) — the same on every retry. */
export async function runWebhookIdFor(runId: string, state: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`run\n${runId}\n${state}`)));
  return `msg_${[...digest.slice(0, 16)].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}
