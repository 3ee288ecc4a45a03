/**
 * Channel replies (issue 10; S1 §5.5): when a run started by a chat message
 * ends, its final answer goes back to where the message came from — once.
 *
 * The reply is an outbox row written in the same transaction as the run (in
 * the SessionDO that holds it) and sent from the object's alarm; external
 * channels never stream, so there is exactly one reply per turn, sent when the
 * run has ended. "Exactly once" is kept like this:
 *
 * - before each part is sent the row is marked `sending` (committed), and after
 *   the platform accepted it the part is counted — a retry continues with the
 *   next part, never repeats one;
 * - a platform that ANSWERED with a failure (429, 5xx, a retryable Slack error)
 *   did not post the message: the part is retried with backoff (honouring
 *   `retry_after`), at most `MAX_ATTEMPTS` attempts;
 * - a send with no answer (the connection dropped, or the object died while a
 *   row was `sending`) may have been posted: Telegram, Slack and Discord have no
 *   idempotency key, so it is NOT sent again — the reply is marked `unknown`
 *   and audited. Standard Webhooks receivers dedupe on `webhook-id`, so there it
 *   is retried.
 */
import { disclosureRefusalMessage } from "../prompts/disclosure";
import { sanitize } from "../prompts/leak-guard/invisible";
import { checkOutput } from "../prompts/output-guard";
import { redactText } from "../security/redact";
import { boundSecret, urlOrigin, withheldMessage } from "../security/secret-origins";
import { ensureLazyTables, readLazy } from "../sessions/lazy-tables";
import type { Sql } from "../storage/sql";
import { postDiscordChannelMessage, sendDiscordFollowup, splitDiscordText } from "./discord";
import { jobFailureText } from "./job-reports";
import { postSlackMessage } from "./slack";
import { postSignedWebhook, webhookKey } from "./standard-webhooks";
import { sendTelegramMessage, splitTelegramText } from "./telegram";

/**
 * Where a reply goes, resolved when the message was accepted. `tokenOrigin`: where the deployment's own config
 * sends the bot token (issue 20 §5; absent on older rows: the bundled file's origin). `job`: the "reply" is a
 * scheduled job's report to a chat (issue 24 §1, src/scheduler/chat-notify.ts) — posted to the chat, not in reply
 * to a message, and a run that did not end with a report says so in the job's words (src/channels/job-reports.ts).
 */
export type ReplyTarget =
  | { channel: "telegram"; apiBaseUrl: string; chatId: string; replyTo: number | null; tokenOrigin?: string; job?: JobReport }
  | { channel: "slack"; apiBaseUrl: string; channel_id: string; threadTs: string | null; tokenOrigin?: string; job?: JobReport }
  | { channel: "standard"; url: string; userId: string; roomId: string; inReplyTo: string }
  /**
   * `token`: the interaction's token, a credential for 15 minutes, kept only here (never in events or logs);
   * `tokenOrigin`: the origin the deployment's own config sends it to — never anywhere else.
   */
  | { channel: "discord"; apiBaseUrl: string; applicationId: string; token: string; tokenOrigin: string | null }
  /** A job's report to a Discord channel (issue 24 §1, D-076): posted with DISCORD_BOT_TOKEN, not an interaction token. */
  | { channel: "discord"; apiBaseUrl: string; channelId: string; tokenOrigin?: string; job: JobReport };

/** The job a chat report belongs to. */
export interface JobReport {
  jobId: string;
}

export const MAX_ATTEMPTS = 6;
const BASE_DELAY_MS = 2_000;
const MAX_DELAY_MS = 10 * 60_000;
/** Slack accepts up to 40,000 characters; longer answers are sent as several messages in the thread. */
const SLACK_LIMIT = 39_000;

/** Queues the reply of `runId` (call inside the transaction that creates the run; it creates the outbox first). */
export function enqueueReply(sql: Sql, runId: string, target: ReplyTarget): void {
  ensureLazyTables(sql, "reply_outbox"); // an object no channel message reached has no outbox (D-062)
  sql.run`INSERT INTO reply_outbox (run_id, target, status, updated_at) VALUES (${runId}, ${JSON.stringify(target)}, 'pending', ${new Date().toISOString()})
          ON CONFLICT (run_id) DO NOTHING`;
}

/**
 * When the alarm must next send a reply (a pending reply of a finished run), or null (also: no outbox yet). A row
 * left `sending` is due at once: only an alarm pass sends, one at a time, so outside a pass it was cut short and
 * must be settled (`deliverReplies`) even when nothing else would bring the alarm back.
 */
export function nextReplyAt(sql: Sql): number | null {
  return readLazy(
    sql,
    "reply_outbox",
    null,
    () =>
      // Issue 24 §2: an approval's chat prompt is a row of this outbox too, keyed by the approval (approval-prompts.ts).
      sql.one<{ at: number | null }>`
      SELECT MIN(at) AS at FROM (
        SELECT CASE o.status WHEN 'sending' THEN 0 ELSE o.next_attempt_at END AS at FROM reply_outbox o JOIN runs r ON r.id = o.run_id
        WHERE o.status IN ('pending', 'sending') AND r.status IN ('completed', 'failed', 'cancelled')
        UNION ALL
        SELECT CASE o.status WHEN 'sending' THEN 0 ELSE o.next_attempt_at END FROM reply_outbox o JOIN approvals a ON a.id = o.run_id
        WHERE o.status IN ('pending', 'sending'))`?.at ?? null,
  );
}

interface Row extends Record<string, SqlStorageValue> {
  run_id: string;
  target: string;
  status: string;
  parts_sent: number;
  message_ids: string;
  attempts: number;
  run_status: string;
  run_output: string | null;
  run_error: string | null;
  /** 1 when the run ended in a failure-loop escalation (`run.completed` with `needs_guidance`). */
  escalated: number;
}

export interface ReplyHost {
  sql: Sql;
  storage: DurableObjectStorage;
  env: Pick<Env, "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN" | "DISCORD_BOT_TOKEN" | "STANDARD_WEBHOOK_SECRET">;
  secrets: readonly string[];
  /** Records an audit event about the run's reply. */
  audit(eventType: string, runId: string, payload: Record<string, unknown>): void;
  fetch?: typeof fetch;
}

/** How long before the next attempt: backoff from the attempts made, or the platform's `retry_after` if longer. */
export function retryDelayMs(attempts: number, retryAfterSeconds: number | undefined): number {
  return Math.max(retryAfterSeconds ? retryAfterSeconds * 1000 : 0, Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 4 ** (attempts - 1)));
}

/** What one send answered: the platform's message id, or why not (`answered`: the platform said so). */
export type PartResult =
  | { ok: true; messageId: string }
  | { ok: false; retry: boolean; answered: boolean; retryAfterSeconds?: number; error: string };

/** Sends every due reply; first settles rows a previous instance left `sending`. */
export async function deliverReplies(host: ReplyHost, now = Date.now()): Promise<void> {
  const { sql } = host;
  const interrupted = readLazy(
    sql,
    "reply_outbox",
    [],
    // An approval's prompt (keyed `apr_…`) is settled by approval-prompts.ts, which audits it on its run.
    () =>
      sql.all<{
        run_id: string;
        target: string;
      }>`SELECT run_id, target FROM reply_outbox WHERE status = 'sending' AND substr(run_id, 1, 4) <> 'apr_'`,
  );
  for (const left of interrupted) {
    const target = JSON.parse(left.target) as ReplyTarget;
    // A receiver that dedupes (Standard Webhooks) gets it again; Telegram and Slack might already show it.
    if (target.channel === "standard") sql.run`UPDATE reply_outbox SET status = 'pending' WHERE run_id = ${left.run_id}`;
    else settle(host, left.run_id, "unknown", "interrupted while sending; not sent again (it may have been posted)");
  }
  const due = readLazy(sql, "reply_outbox", [], () => dueReplies(sql, now));
  for (const row of due) await deliverOne(host, row);
}

/** Pending replies of finished runs whose attempt is due, oldest first (at most 20 per pass). */
function dueReplies(sql: Sql, now: number): Row[] {
  return sql.all<Row>`
    SELECT o.run_id, o.target, o.status, o.parts_sent, o.message_ids, o.attempts, r.status AS run_status, r.output AS run_output, r.error AS run_error,
           EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = o.run_id AND e.event_type = 'run.completed'
                   AND json_extract(e.payload, '$.needs_guidance') = 1) AS escalated
    FROM reply_outbox o JOIN runs r ON r.id = o.run_id
    WHERE o.status = 'pending' AND r.status IN ('completed', 'failed', 'cancelled') AND o.next_attempt_at <= ${now}
    ORDER BY o.next_attempt_at LIMIT 20`;
}

function settle(host: ReplyHost, runId: string, status: "delivered" | "failed" | "unknown" | "skipped", error: string | null): void {
  host.storage.transactionSync(() => {
    host.sql
      .run`UPDATE reply_outbox SET status = ${status}, last_error = ${error}, updated_at = ${new Date().toISOString()} WHERE run_id = ${runId}`;
    host.audit(`reply.${status}`, runId, error ? { error } : {});
  });
}

/**
 * A completed run's answer as a channel receives it: redacted, and the refusal if it carries hidden-layer text
 * (issue 20 §2: the engine already guards the output; a channel reply is checked once more before it leaves), and
 * without characters no reader sees (issue 33).
 */
export function guardedReplyText(output: string, secrets: readonly string[]): string {
  return checkOutput(output).blocked ? disclosureRefusalMessage() : sanitize(redactText(output, secrets));
}

/**
 * What an external channel gets for a failure-loop escalation (S1 §3.4: one code and an actionable sentence,
 * no partial tool traces). The full escalation — tools, errors, output snippets — stays in the run view and
 * the run's events; the session's transcript keeps it too, so the next message continues from it.
 */
export const ESCALATION_REPLY =
  "[internal.error] I stopped after repeated tool errors. Please reply with different inputs or another approach, or ask an operator to check the run.";

/** The text a finished run answers with: the output of a completed run; failed and cancelled runs say so briefly. */
function replyText(row: Row, target: ReplyTarget, secrets: readonly string[]): string {
  if ("job" in target && target.job) {
    const failure = jobFailureText({
      ...target.job,
      runId: row.run_id,
      status: row.run_status,
      escalated: Boolean(row.escalated),
      error: row.run_error,
    });
    if (failure !== null) return failure;
  }
  if (row.run_status === "completed" && row.escalated) return ESCALATION_REPLY;
  if (row.run_status === "completed") return guardedReplyText(row.run_output ?? "", secrets);
  if (row.run_status === "failed") return "Sorry, I could not answer that just now. Please try again later.";
  return "";
}

async function deliverOne(host: ReplyHost, row: Row): Promise<void> {
  const { sql, storage } = host;
  const target = JSON.parse(row.target) as ReplyTarget;
  const text = replyText(row, target, host.secrets);
  if (text.trim() === "") return settle(host, row.run_id, "skipped", null);
  const parts = splitFor(target, text);
  const ids = JSON.parse(row.message_ids) as string[];
  let attempts = row.attempts;
  for (let part = row.parts_sent; part < parts.length; part++) {
    storage.transactionSync(() => {
      sql.run`UPDATE reply_outbox SET status = 'sending', updated_at = ${new Date().toISOString()} WHERE run_id = ${row.run_id}`;
    });
    const result = await sendPart(host, target, row.run_id, parts[part] as string, part);
    attempts++;
    if (result.ok) {
      ids.push(result.messageId);
      const done = part === parts.length - 1;
      storage.transactionSync(() => {
        sql.run`UPDATE reply_outbox SET status = ${done ? "delivered" : "pending"}, parts_sent = ${part + 1}, message_ids = ${JSON.stringify(ids)},
                       attempts = ${attempts}, last_error = NULL, updated_at = ${new Date().toISOString()}
                WHERE run_id = ${row.run_id}`;
        if (done) host.audit("reply.delivered", row.run_id, { channel: target.channel, parts: parts.length, message_ids: ids });
      });
      continue;
    }
    if (!result.answered && target.channel !== "standard") {
      return settle(host, row.run_id, "unknown", `${result.error}; not sent again (it may have been posted)`);
    }
    if (!result.retry || attempts >= MAX_ATTEMPTS) return settle(host, row.run_id, "failed", result.error);
    const wait = retryDelayMs(attempts, result.retryAfterSeconds);
    storage.transactionSync(() => {
      sql.run`UPDATE reply_outbox SET status = 'pending', attempts = ${attempts}, last_error = ${result.error}, next_attempt_at = ${Date.now() + wait},
                     updated_at = ${new Date().toISOString()}
              WHERE run_id = ${row.run_id}`;
      host.audit("reply.retrying", row.run_id, { channel: target.channel, attempt: attempts, error: result.error });
    });
    return;
  }
}

/** Why a Discord follow-up was not sent: the config in force moved the API away from the deployment's origin. */
export const DISCORD_WITHHELD =
  'the Discord interaction token is withheld: channel "discord" is configured at another origin than the deployment\'s own config names; deploy the new channels.discord.apiBaseUrl instead';

/** The bot tokens replies are posted with (each bound to its channel's origin, issue 20 §5). */
export type BotTokenName = "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN" | "DISCORD_BOT_TOKEN";

/** The bot token for a reply to `target`, unless it is missing or bound to another origin (then never sent). */
export function botToken(
  host: ReplyHost,
  name: BotTokenName,
  target: { channel: string; apiBaseUrl: string; tokenOrigin?: string },
): { ok: true; value: string } | { ok: false; failure: PartResult } {
  const deployment = target.tokenOrigin !== undefined ? { [name]: target.tokenOrigin } : undefined;
  const token = boundSecret(host.env, name, target.apiBaseUrl, deployment);
  if (token.ok) return token;
  const error = token.reason === "missing" ? `${name} is not set` : withheldMessage(name, `channel "${target.channel}"`);
  return { ok: false, failure: { ok: false, retry: false, answered: true, error } };
}

/** Buttons a message carries (issue 24 §2): Telegram's `reply_markup`, Slack's `blocks`. */
export interface PartMarkup {
  telegram?: Record<string, unknown>;
  slack?: Record<string, unknown>[];
}

/** Sends one part of a message to `target` (with `markup` when given); never throws. */
export async function sendPart(
  host: ReplyHost,
  target: ReplyTarget,
  runId: string,
  text: string,
  part: number,
  markup: PartMarkup = {},
): Promise<PartResult> {
  const signal = AbortSignal.timeout(15_000);
  if (target.channel === "telegram") {
    const token = botToken(host, "TELEGRAM_BOT_TOKEN", target);
    if (!token.ok) return token.failure;
    const r = await sendTelegramMessage({
      ...(host.fetch ? { fetch: host.fetch } : {}),
      apiBaseUrl: target.apiBaseUrl,
      botToken: token.value,
      chatId: target.chatId,
      text,
      ...(target.replyTo !== null && part === 0 ? { replyTo: target.replyTo } : {}),
      ...(markup.telegram ? { replyMarkup: markup.telegram } : {}),
      signal,
    });
    return r.ok ? { ok: true, messageId: String(r.messageId) } : { ...r, answered: r.status !== null };
  }
  if (target.channel === "slack") {
    const token = botToken(host, "SLACK_BOT_TOKEN", target);
    if (!token.ok) return token.failure;
    const r = await postSlackMessage({
      ...(host.fetch ? { fetch: host.fetch } : {}),
      apiBaseUrl: target.apiBaseUrl,
      botToken: token.value,
      channel: target.channel_id,
      text,
      threadTs: target.threadTs,
      ...(markup.slack ? { blocks: markup.slack } : {}),
      signal,
    });
    return r.ok ? { ok: true, messageId: r.messageId } : { ...r, answered: r.status !== null };
  }
  if (target.channel === "discord" && "channelId" in target) {
    const token = botToken(host, "DISCORD_BOT_TOKEN", target);
    if (!token.ok) return token.failure;
    const r = await postDiscordChannelMessage({
      ...(host.fetch ? { fetch: host.fetch } : {}),
      apiBaseUrl: target.apiBaseUrl,
      botToken: token.value,
      channelId: target.channelId,
      text,
      signal,
    });
    return r.ok ? r : { ...r, answered: r.status !== null };
  }
  if (target.channel === "discord") {
    // No bot token: the interaction token in the URL authorizes the follow-up, so it goes only where the deployment sends it.
    if (urlOrigin(target.apiBaseUrl) !== target.tokenOrigin) return { ok: false, retry: false, answered: true, error: DISCORD_WITHHELD };
    const r = await sendDiscordFollowup({ ...(host.fetch ? { fetch: host.fetch } : {}), ...target, text, signal });
    return r.ok ? r : { ...r, answered: r.status !== null };
  }
  const key = webhookKey(host.env.STANDARD_WEBHOOK_SECRET);
  if (!key) return { ok: false, retry: false, answered: true, error: "STANDARD_WEBHOOK_SECRET is not set to a whsec_ secret" };
  const id = `msg_${runId.slice(-32)}`;
  const body = JSON.stringify({
    type: "message.reply",
    data: { run_id: runId, user_id: target.userId, room_id: target.roomId, in_reply_to: target.inReplyTo, message: text },
  });
  const sent = await postSignedWebhook({ url: target.url, key, id, body, timeoutMs: 15_000, ...(host.fetch ? { fetch: host.fetch } : {}) });
  if (sent.ok) return { ok: true, messageId: id };
  return {
    ok: false,
    retry: sent.retry,
    answered: sent.status !== null,
    error: sent.status === null ? "no answer from the reply URL" : sent.error,
  };
}

/** The parts a reply is sent in, at the target platform's limit. */
function splitFor(target: ReplyTarget, text: string): string[] {
  if (target.channel === "telegram") return splitTelegramText(text);
  if (target.channel === "slack") return splitPlain(text, SLACK_LIMIT);
  if (target.channel === "discord") return splitDiscordText(text);
  return [text];
}

/** Splits plain text into parts of at most `limit` code units (at a newline when one is near), losslessly. */
function splitPlain(text: string, limit: number): string[] {
  const parts: string[] = [];
  let rest = text;
  while (rest.length > limit) {
    let cut = rest.lastIndexOf("\n", limit);
    if (cut < limit / 2) cut = limit;
    parts.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  if (rest.length > 0) parts.push(rest);
  return parts;
}
