/**
 * Budget alert webhooks (issue 25 §2, D-078): a row of the job notifications' outbox (notify.ts), channel `alert`,
 * queued by the SessionDO whose run-stop batch claimed the alert, delivered by the same alarm capability, signed like
 * a job's webhook (the operator's endpoint key for `v1`, the gateway's key for `v1a`, D-089), retried with the same backoff under one `webhook-id` (SHA-256 of the alert and period), and
 * audited as `usage.alert.notify.*`. The row's key is `alert:<webhook-id>` — there is no run to join: the body is
 * fixed when the alert fires, and `settings.run_id` names the run whose usage crossed the threshold.
 */
import { ensureLazyTables } from "../sessions/lazy-tables";
import type { Sql } from "../storage/sql";
import { webhookIdFor } from "./webhook-id";

/** An alert webhook to queue: where, its fixed body and id, the run that fired it, and the retry settings. */
export interface AlertNotify {
  url: string;
  webhookId: string;
  body: string;
  period: string;
  runId: string;
  maxAttempts: number;
  retryBaseMs: number;
  timeoutMs: number;
}

/** An alert row due for an attempt. */
export interface DueAlertNotify extends Record<string, SqlStorageValue> {
  run_id: string;
  target: string;
  webhook_id: string;
  settings: string;
  body: string;
  attempts: number;
}

/** Queues the alert's webhook (inside the transaction that records the alert; creates the outbox if needed). */
export function enqueueAlertNotify(sql: Sql, a: AlertNotify): void {
  ensureLazyTables(sql, "notify_outbox");
  const settings = JSON.stringify({ maxAttempts: a.maxAttempts, retryBaseMs: a.retryBaseMs, timeoutMs: a.timeoutMs, run_id: a.runId });
  sql.run`INSERT INTO notify_outbox (run_id, job_id, scheduled_for, channel, target, webhook_id, settings, body, status, attempts, next_attempt_at, reported)
          VALUES (${`alert:${a.webhookId}`}, '', ${a.period}, 'alert', ${a.url}, ${a.webhookId}, ${settings}, ${a.body}, 'pending', 0, 0, 1)
          ON CONFLICT (run_id) DO NOTHING`;
}

/** When an alert webhook is next due (null: none pending). Call only when the outbox exists. */
export function nextAlertNotifyAt(sql: Sql): number | null {
  return (
    sql.one<{ at: number | null }>`SELECT MIN(next_attempt_at) AS at FROM notify_outbox WHERE channel = 'alert' AND status = 'pending'`
      ?.at ?? null
  );
}

/** The alert webhooks due at `now`. Call only when the outbox exists. */
export function dueAlertNotifications(sql: Sql, now: number): DueAlertNotify[] {
  return sql.all<DueAlertNotify>`
    SELECT run_id, target, webhook_id, settings, body, attempts FROM notify_outbox
    WHERE channel = 'alert' AND status = 'pending' AND next_attempt_at <= ${now} ORDER BY next_attempt_at LIMIT 20`;
}

/** An alert's webhook id: `msg_` + 32 hex of SHA-256 over (alert key, period) — the same on every retry. */
export function alertWebhookIdFor(alertKey: string, period: string): Promise<string> {
  return webhookIdFor(`usage.alert\n${alertKey}`, period); // the same text hashed as before: ids unchanged
}
