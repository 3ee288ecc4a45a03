/**
 * Job notifications (S3 §4 `notify`): when a job's run ends, its output is
 * delivered to `notify.target`. The delivery is an outbox row in the SessionDO
 * that holds the run, written in the same transaction as the run itself — so
 * neither an eviction nor a failing receiver loses it — and sent from the
 * object's alarm:
 *
 * - `webhook`: a POST signed with the Standard Webhooks scheme — `v1` with
 *   the operator's key for that endpoint, `v1a` with the gateway's Ed25519
 *   key (webhook-keys.ts, D-089); the `webhook-id` is derived from the
 *   firing's run key, so every retry (and any duplicate) carries the same id
 *   and receivers can dedupe. The body is fixed
 *   at the first attempt. Network errors, timeouts, 408, 429 and 5xx are
 *   retried with 4× backoff; other answers (and redirects, which are never
 *   followed) fail the delivery at once.
 * - `telegram`, `slack`, `discord` (issue 24 §1, chat-notify.ts): the run is also queued with a reply outbox row
 *   (src/channels/replies.ts) that posts its output to the chat — once, split, retried like any reply. The
 *   notification row here only follows it: when the reply has settled, its outcome is copied here (and to D1),
 *   audited as `job.notify.*` like a webhook's.
 *
 * The outcome is mirrored to D1 (`job_firings.notify_*`) for the admin API,
 * retried until D1 takes it, and recorded as audit events.
 */
import { enqueueReply } from "../channels/replies";
import { postSignedWebhook } from "../channels/standard-webhooks";
import { type RunCompletion, recordedCompletion } from "../runs/completion";
import { redactText } from "../security/redact";
import { ensureLazyTables, readLazy } from "../sessions/lazy-tables";
import type { Sql } from "../storage/sql";
import { checkUrl } from "../tools/net-policy";
import { type DueAlertNotify, dueAlertNotifications, nextAlertNotifyAt } from "./alert-notify";
import type { ChatNotifySpec } from "./chat-notify";
import { armRunNotify, dueRunNotifications, enqueueRunNotify, nextRunNotifyAt, type RunNotifySpec, runWebhookIdFor } from "./run-notify";
import { type WebhookOwner, type WebhookSecretsEnv, webhookSigning } from "./webhook-keys";

/** Jobs and budget alerts are the operator's webhooks: signed with the operator's endpoint keys (D-089). */
const OPERATOR: WebhookOwner = { operator: true };

/**
 * What a run carries about its notification: a job's webhook or chat report (resolved from config by the tick), or an
 * API caller's completion webhook (run-notify.ts, issue 24 §5).
 */
export type NotifySpec = WebhookNotifySpec | ChatNotifySpec | RunNotifySpec;

/** A signed webhook notification. */
export interface WebhookNotifySpec {
  channel: "webhook";
  target: string;
  webhookId: string;
  jobId: string;
  scheduledFor: string;
  maxAttempts: number;
  retryBaseMs: number;
  timeoutMs: number;
}

/** The longest wait between two attempts. */
const MAX_RETRY_DELAY_MS = 60 * 60_000;
/** How soon an outcome D1 did not take is written again. */
export const REPORT_RETRY_MS = 30_000;

/** Wait after the `attempts`-th failed attempt: base, 4·base, 16·base, … at most an hour. */
export function retryDelayMs(baseMs: number, attempts: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, baseMs * 4 ** Math.max(0, attempts - 1));
}

/**
 * Queues the notification of `runId` (call inside the transaction that creates the run; it creates the outbox first).
 * A chat report also queues the run's reply to the chat, which delivers it.
 */
export function enqueueNotify(sql: Sql, runId: string, spec: NotifySpec): void {
  ensureLazyTables(sql, "notify_outbox"); // an object no notifying job ran in has no outbox (D-062)
  if (spec.channel === "run") {
    enqueueRunNotify(sql, runId, spec);
    return;
  }
  if (spec.channel !== "webhook") {
    enqueueChatNotify(sql, runId, spec);
    return;
  }
  sql.run`INSERT INTO notify_outbox (run_id, job_id, scheduled_for, channel, target, webhook_id, settings, status, attempts, next_attempt_at, reported)
          VALUES (${runId}, ${spec.jobId}, ${spec.scheduledFor}, ${spec.channel}, ${spec.target}, ${spec.webhookId},
                  ${JSON.stringify({ maxAttempts: spec.maxAttempts, retryBaseMs: spec.retryBaseMs, timeoutMs: spec.timeoutMs })},
                  'pending', 0, 0, 1)
          ON CONFLICT (run_id) DO NOTHING`;
}

function enqueueChatNotify(sql: Sql, runId: string, spec: ChatNotifySpec): void {
  // reported = 1: the tick claimed the firing as `pending` in D1, which is what this row says until its reply settles.
  sql.run`INSERT INTO notify_outbox (run_id, job_id, scheduled_for, channel, target, webhook_id, settings, status, attempts, next_attempt_at, reported)
          VALUES (${runId}, ${spec.jobId}, ${spec.scheduledFor}, ${spec.channel}, ${spec.target}, '', '{}', 'pending', 0, 0, 1)
          ON CONFLICT (run_id) DO NOTHING`;
  enqueueReply(sql, runId, spec.reply);
}

/** When the alarm must next deliver or report: the earliest pending attempt of a finished run, or a D1 retry. */
export function nextNotifyAt(sql: Sql, now: number): number | null {
  return readLazy(sql, "notify_outbox", null, () => nextNotifyIn(sql, now));
}

function nextNotifyIn(sql: Sql, now: number): number | null {
  const due = sql.one<{ at: number | null }>`
    SELECT MIN(n.next_attempt_at) AS at FROM notify_outbox n JOIN runs r ON r.id = n.run_id
    WHERE n.status = 'pending' AND n.channel = 'webhook' AND r.status IN ('completed', 'failed', 'cancelled')`;
  const settled = settledChatReplies(sql).length > 0 ? now : null;
  const unreported = sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM notify_outbox WHERE reported = 0`;
  const times = [
    due?.at ?? null,
    settled,
    unreported && unreported.n > 0 ? now + REPORT_RETRY_MS : null,
    nextRunNotifyAt(sql),
    nextAlertNotifyAt(sql),
  ].filter((t): t is number => t !== null);
  return times.length > 0 ? Math.min(...times) : null;
}

interface OutboxRow extends Record<string, SqlStorageValue> {
  run_id: string;
  job_id: string;
  scheduled_for: string;
  channel: string;
  target: string;
  webhook_id: string;
  settings: string;
  body: string | null;
  status: string;
  attempts: number;
  last_error: string | null;
  delivered_at: string | null;
  run_status: string;
  run_output: string | null;
  run_error: string | null;
  agent_id: string;
}

type Attempt = { ok: true; httpStatus: number } | { ok: false; retry: boolean; error: string; httpStatus: number | null };

export interface NotifyHost {
  sql: Sql;
  storage: DurableObjectStorage;
  env: Pick<Env, "DB"> & WebhookSecretsEnv;
  secrets: readonly string[];
  /** Records an audit event about the run's notification. */
  audit(eventType: string, runId: string, payload: Record<string, unknown>): void;
  /** The run's S3 view, as `GET /v1/runs/{run_id}` answers it (the body of an API caller's completion webhook). */
  runView?(runId: string): unknown;
  fetch?: typeof fetch;
}

/** Delivers every due notification of a finished run, then mirrors unreported outcomes to D1. */
export async function deliverNotifications(host: NotifyHost, now = Date.now()): Promise<void> {
  const { sql } = host;
  const due = readLazy(
    sql,
    "notify_outbox",
    null,
    () => sql.all<OutboxRow>`
    SELECT n.*, r.status AS run_status, r.output AS run_output, r.error AS run_error, r.agent_id AS agent_id
    FROM notify_outbox n JOIN runs r ON r.id = n.run_id
    WHERE n.status = 'pending' AND n.channel = 'webhook' AND r.status IN ('completed', 'failed', 'cancelled') AND n.next_attempt_at <= ${now}
    ORDER BY n.next_attempt_at LIMIT 20`,
  );
  if (due === null) return; // no outbox: nothing was ever queued, nothing to report
  for (const row of due) await deliverOne(host, row);
  for (const run of dueRunNotifications(sql, now)) await deliverRunNotify(host, run);
  for (const alert of dueAlertNotifications(sql, now)) await deliverAlertNotify(host, alert);
  followChatReplies(host);
  await reportToD1(host);
}

/** A chat report whose reply has settled (delivered, failed, unknown or skipped) while its notification is pending. */
interface SettledReply extends Record<string, SqlStorageValue> {
  run_id: string;
  job_id: string;
  scheduled_for: string;
  channel: string;
  reply_status: string;
  attempts: number;
  last_error: string | null;
  updated_at: string;
  message_ids: string;
}

/** Chat reports whose reply has settled; none when no reply was ever queued here. */
function settledChatReplies(sql: Sql): SettledReply[] {
  return readLazy(
    sql,
    "reply_outbox",
    [],
    () => sql.all<SettledReply>`
      SELECT n.run_id, n.job_id, n.scheduled_for, n.channel, o.status AS reply_status, o.attempts, o.last_error, o.updated_at, o.message_ids
      FROM notify_outbox n JOIN reply_outbox o ON o.run_id = n.run_id
      WHERE n.status = 'pending' AND n.channel <> 'webhook' AND o.status IN ('delivered', 'failed', 'unknown', 'skipped')
      LIMIT 50`,
  );
}

/**
 * Copies each settled chat reply's outcome to its notification: delivered, or failed with the reply's reason (a send
 * that may or may not have been posted — `unknown` — is not retried, so for the job it failed, saying why).
 */
function followChatReplies(host: NotifyHost): void {
  for (const r of settledChatReplies(host.sql)) {
    const delivered = r.reply_status === "delivered";
    const error = delivered
      ? null
      : r.reply_status === "skipped"
        ? "the run ended with no output to send"
        : (r.last_error ?? r.reply_status);
    const base = { job_id: r.job_id, scheduled_for: r.scheduled_for, channel: r.channel, attempt: r.attempts };
    host.storage.transactionSync(() => {
      host.sql.run`UPDATE notify_outbox SET status = ${delivered ? "delivered" : "failed"}, attempts = ${r.attempts}, last_error = ${error},
                          delivered_at = ${delivered ? r.updated_at : null}, reported = 0
                   WHERE run_id = ${r.run_id}`;
      if (delivered) host.audit("job.notify.delivered", r.run_id, { ...base, message_ids: JSON.parse(r.message_ids) as string[] });
      else host.audit("job.notify.failed", r.run_id, { ...base, error });
    });
  }
}

async function deliverOne(host: NotifyHost, row: OutboxRow): Promise<void> {
  // The body is fixed at the first attempt: every retry sends the same bytes under the same webhook-id.
  const body =
    row.body ??
    JSON.stringify({
      type: "job.run.finished",
      timestamp: new Date().toISOString(),
      data: {
        job_id: row.job_id,
        scheduled_for: row.scheduled_for,
        run_id: row.run_id,
        agent_id: row.agent_id,
        status: row.run_status,
        output: redactText(row.run_output ?? "", host.secrets),
        error: runError(row.run_error, host.secrets),
        // Issue 21 §1: the run's automation completion, or `{status: "missing"}` when it ended without calling it.
        completion: completionField(host, row.run_id),
      },
    });
  if (row.body === null) host.sql.run`UPDATE notify_outbox SET body = ${body} WHERE run_id = ${row.run_id}`;
  const base = { job_id: row.job_id, scheduled_for: row.scheduled_for, channel: row.channel, webhook_id: row.webhook_id };
  await sendAndRecord(host, row, body, { audit: "job.notify", base, reported: 0, owner: OPERATOR });
}

/**
 * An API caller's completion webhook (run-notify.ts): a message already armed is sent again as it is; otherwise the
 * row is armed for the run's state now — its view as the body, a webhook-id of (run, state) — and sent.
 */
async function deliverRunNotify(
  host: NotifyHost,
  due: { run_id: string; status: string; body: string | null; state: string },
): Promise<void> {
  const { sql } = host;
  if (due.status !== "pending" || due.body === null) {
    const view = host.runView?.(due.run_id);
    if (!view) return;
    armRunNotify(sql, due.run_id, due.state, await runWebhookIdFor(due.run_id, due.state), JSON.stringify(view));
  }
  const row = sql.one<OutboxRow>`SELECT * FROM notify_outbox WHERE run_id = ${due.run_id}`;
  if (!row?.body) return;
  const state = (JSON.parse(row.settings) as { state: string }).state;
  const base = { channel: "run", webhook_id: row.webhook_id, state: state.replace(/:\d+$/, "") };
  const caller = sql.one<{ caller_id: string | null }>`SELECT caller_id FROM runs WHERE id = ${row.run_id}`?.caller_id ?? null;
  // The caller's own endpoint key: another caller's secret for the same URL does not verify it (D-089).
  await sendAndRecord(host, row, row.body, {
    audit: "run.notify",
    base,
    reported: 1,
    owner: caller === null ? null : { callerId: caller },
  });
}

/** A budget alert's webhook (alert-notify.ts): its fixed body, audited on the run whose usage fired it. */
async function deliverAlertNotify(host: NotifyHost, row: DueAlertNotify): Promise<void> {
  const { run_id: runId } = JSON.parse(row.settings) as { run_id: string };
  const onRun: NotifyHost = { ...host, audit: (type, _key, payload) => host.audit(type, runId, payload) };
  const base = { channel: "alert", webhook_id: row.webhook_id };
  await sendAndRecord(onRun, row, row.body, { audit: "usage.alert.notify", base, reported: 1, owner: OPERATOR });
}

/**
 * Sends one attempt of an armed notification and records it in one transaction: delivered, retried later with the
 * same id and body (4× backoff), or given up — each audited as `<audit>.delivered|retrying|failed`. `reported` 0
 * queues the outcome for D1 (a job's firing); 1 has nothing to mirror. `owner` picks the endpoint's `v1` key.
 */
async function sendAndRecord(
  host: NotifyHost,
  row: Pick<OutboxRow, "run_id" | "settings" | "attempts" | "target" | "webhook_id">,
  body: string,
  o: { audit: string; base: Record<string, unknown>; reported: 0 | 1; owner: WebhookOwner | null },
): Promise<void> {
  const { sql, storage } = host;
  const settings = JSON.parse(row.settings) as { maxAttempts: number; retryBaseMs: number; timeoutMs: number };
  const attempt = await attemptWebhook(host, row, body, settings.timeoutMs, o.owner);
  const attempts = row.attempts + 1;
  const at = new Date();
  const base = { ...o.base, attempt: attempts };
  storage.transactionSync(() => {
    if (attempt.ok) {
      sql.run`UPDATE notify_outbox SET status = 'delivered', attempts = ${attempts}, last_error = NULL, delivered_at = ${at.toISOString()},
                     reported = ${o.reported}
              WHERE run_id = ${row.run_id}`;
      host.audit(`${o.audit}.delivered`, row.run_id, { ...base, http_status: attempt.httpStatus });
      return;
    }
    const final = !attempt.retry || attempts >= settings.maxAttempts;
    const next = final ? 0 : at.getTime() + retryDelayMs(settings.retryBaseMs, attempts);
    sql.run`UPDATE notify_outbox SET status = ${final ? "failed" : "pending"}, attempts = ${attempts}, last_error = ${attempt.error},
                   next_attempt_at = ${next}, reported = ${o.reported}
            WHERE run_id = ${row.run_id}`;
    host.audit(final ? `${o.audit}.failed` : `${o.audit}.retrying`, row.run_id, {
      ...base,
      http_status: attempt.httpStatus,
      error: attempt.error,
      ...(final ? {} : { next_attempt_at: new Date(next).toISOString() }),
    });
  });
}

/**
 * The run's recorded completion (summary redacted); `missing` when there is none — only job runs are notified, and
 * only once they have ended, so no completion by now means the run never called automation.complete.
 */
function completionField(host: NotifyHost, runId: string): RunCompletion {
  const c = recordedCompletion(host.sql, runId);
  return c ? { ...c, summary: c.summary === null ? null : redactText(c.summary, host.secrets) } : { status: "missing" };
}

/** A failed run's error as `{code, message}` (stored as JSON), redacted; null when the run did not fail. */
function runError(stored: string | null, secrets: readonly string[]): { code: string; message: string } | null {
  if (stored === null) return null;
  try {
    const e = JSON.parse(stored) as { code?: unknown; message?: unknown };
    return { code: String(e.code ?? "internal.error"), message: redactText(String(e.message ?? ""), secrets) };
  } catch {
    return { code: "internal.error", message: redactText(stored, secrets) };
  }
}

/**
 * One signed POST. Nothing is sent unsigned: no master secret, no usable signing key (D-089) or no owner to derive
 * the endpoint's key for fails the delivery at once, with the reason — retrying would not mend configuration.
 */
async function attemptWebhook(
  host: NotifyHost,
  row: Pick<OutboxRow, "target" | "webhook_id">,
  body: string,
  timeoutMs: number,
  owner: WebhookOwner | null,
): Promise<Attempt> {
  const url = checkUrl(row.target);
  if (!url.ok || url.url.protocol !== "https:")
    return { ok: false, retry: false, httpStatus: null, error: "target is not an allowed https URL" };
  const keys = owner ? await webhookSigning(host.env, owner, url.url) : { ok: false as const, error: "the run has no caller to sign for" };
  if (!keys.ok) return { ok: false, retry: false, httpStatus: null, error: keys.error };
  const sent = await postSignedWebhook({
    url: url.url.toString(),
    key: keys.key,
    signer: keys.signer,
    id: row.webhook_id,
    body,
    timeoutMs,
    ...(host.fetch ? { fetch: host.fetch } : {}),
  });
  return sent.ok ? { ok: true, httpStatus: sent.status } : { ok: false, retry: sent.retry, httpStatus: sent.status, error: sent.error };
}

/** Mirrors outcomes to D1's firing records; whatever D1 does not take is tried again later. */
async function reportToD1(host: NotifyHost): Promise<void> {
  const rows = host.sql.all<{
    run_id: string;
    job_id: string;
    scheduled_for: string;
    status: string;
    attempts: number;
    last_error: string | null;
    delivered_at: string | null;
  }>`
    SELECT run_id, job_id, scheduled_for, status, attempts, last_error, delivered_at FROM notify_outbox WHERE reported = 0 LIMIT 50`;
  if (rows.length === 0) return;
  try {
    await host.env.DB.batch(
      rows.map((r) =>
        host.env.DB.prepare(
          `UPDATE job_firings SET notify_status = ?3, notify_attempts = ?4, notify_error = ?5, notified_at = ?6
           WHERE job_id = ?1 AND scheduled_for = ?2`,
        ).bind(r.job_id, r.scheduled_for, r.status, r.attempts, r.last_error, r.delivered_at),
      ),
    );
  } catch {
    return; // D1 unavailable: the rows stay unreported and the alarm comes back.
  }
  for (const r of rows) host.sql.run`UPDATE notify_outbox SET reported = 1 WHERE run_id = ${r.run_id} AND attempts = ${r.attempts}`;
}
