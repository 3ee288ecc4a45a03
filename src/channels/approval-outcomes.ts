/**
 * An approval's chat message follows the approval when it is decided elsewhere or expires (issue 24 §2 follow-up,
 * D-081): the Approve / Deny message is edited to the outcome ("Approved by admin", "Expired — nobody decided in
 * time") and its buttons removed — Telegram `editMessageText` without `reply_markup`, Slack `chat.update` without the
 * actions block.
 *
 * The edit rides the prompt's own row of the reply outbox (keyed by the approval id, approval-prompts.ts): the
 * transaction that decides or expires the approval turns a DELIVERED prompt row back to `pending` with an `edit`
 * in its target, so the edit is as durable as the decision and is sent by the same alarm, backoff and attempt limit
 * as the prompt. It is queued at most once per approval (only a delivered row without an `edit` is turned), only for
 * a decision that did not come from the chat itself (a press edits the message from its own request), and never for
 * a prompt that was not delivered: a pending prompt is skipped once its approval is decided, a failed or unknown one
 * has no message to edit. A prompt that was being sent when the decision came gets its edit as it is settled.
 */
import { readLazy } from "../sessions/lazy-tables";
import type { Sql } from "../storage/sql";
import { type ButtonTokens, outcomeLine, slackBlocks } from "./approval-buttons";
import { botToken, MAX_ATTEMPTS, type PartResult, type ReplyHost, type ReplyTarget, retryDelayMs } from "./replies";
import { updateSlackMessage } from "./slack-interactivity";
import type { SendFailure } from "./telegram";
import { editMessageText } from "./telegram-callbacks";

// The approval prompt's types (approval-prompts.ts re-exports them): here, since a prompt's body carries the edit
// this module makes, and approval-prompts.ts drives this module, not the other way round.

/** A chat an approval can be asked in: the run's Telegram or Slack reply target (not a job's report). */
export type PromptTarget = Extract<ReplyTarget, { channel: "telegram" | "slack" }>;

/** What a prompt row's `target` column holds. */
export interface PromptBody {
  to: PromptTarget;
  runId: string;
  text: string;
  /** Until the message is out; null after. */
  tokens: ButtonTokens | null;
  /** Set when the approval was decided elsewhere or expired after the message went out: it is edited to this (D-081). */
  edit?: OutcomeEdit;
}

/** A due row of the prompt outbox. */
export interface DuePrompt extends Record<string, SqlStorageValue> {
  approval_id: string;
  target: string;
  status: string;
  attempts: number;
  message_ids: string;
  approval_status: string;
}

/** What the message is edited to say. */
export interface OutcomeEdit {
  status: "approved" | "denied" | "expired";
  by: string | null;
}

/** A decider that pressed in the chat: the press's request already edited the message. */
const fromChat = (by: string | null): boolean => by !== null && /^(telegram|slack):/.test(by);

/** The line a decided or expired message ends with. */
export function outcomeText(edit: OutcomeEdit): string {
  if (edit.status === "expired") return "⌛ Expired — nobody decided in time. The call was not run.";
  return outcomeLine(edit.status === "approved" ? "approve" : "deny", edit.by ?? "admin");
}

/**
 * Queues the edit of `approvalId`'s delivered chat message to its outcome (call inside the transaction that decides
 * or expires it). Reads nothing in a session without an outbox; changes nothing for a chat's own decision, a prompt
 * not delivered, or one already queued.
 */
export function queueOutcomeEdit(sql: Sql, approvalId: string, edit: OutcomeEdit): void {
  if (fromChat(edit.by)) return;
  readLazy(sql, "reply_outbox", undefined, () => {
    sql.run`UPDATE reply_outbox SET status = 'pending', attempts = 0, next_attempt_at = 0, last_error = NULL,
                   target = json_set(target, '$.edit', json(${JSON.stringify(edit)})), updated_at = ${new Date().toISOString()}
            WHERE run_id = ${approvalId} AND status = 'delivered' AND json_extract(target, '$.edit') IS NULL
              AND json_array_length(message_ids) = 1`;
  });
}

/** For a prompt settled as delivered: queues its edit when the approval was decided (not from the chat) meanwhile. */
export function followDecidedMeanwhile(sql: Sql, approvalId: string): void {
  const a = sql.one<{ status: string; decided_by: string | null }>`SELECT status, decided_by FROM approvals WHERE id = ${approvalId}`;
  if (!a || a.status === "pending") return;
  queueOutcomeEdit(sql, approvalId, { status: a.status as OutcomeEdit["status"], by: a.decided_by });
}

/** A bot token missing or withheld (bound to another origin): not sent, and not worth retrying. */
const unsent = (failure: PartResult): SendFailure => ({ ok: false, retry: false, status: 0, error: failure.ok ? "" : failure.error });

/** The platform call that edits the message; a verdict, never a throw. */
async function editMessage(host: ReplyHost, to: PromptTarget, messageId: string, text: string): Promise<{ ok: true } | SendFailure> {
  const signal = AbortSignal.timeout(15_000);
  const f = host.fetch ? { fetch: host.fetch } : {};
  if (to.channel === "telegram") {
    const token = botToken(host, "TELEGRAM_BOT_TOKEN", to);
    if (!token.ok) return unsent(token.failure);
    // No reply_markup: the inline keyboard goes with the edit.
    const r = await editMessageText({
      ...f,
      apiBaseUrl: to.apiBaseUrl,
      botToken: token.value,
      chatId: to.chatId,
      messageId: Number(messageId),
      text,
      signal,
    });
    // The same edit again (an attempt cut short that had reached Telegram) is answered "not modified": it is done.
    return !r.ok && r.status === 400 && /message is not modified/.test(r.error) ? { ok: true } : r;
  }
  const token = botToken(host, "SLACK_BOT_TOKEN", to);
  if (!token.ok) return unsent(token.failure);
  return updateSlackMessage({
    ...f,
    apiBaseUrl: to.apiBaseUrl,
    botToken: token.value,
    channel: to.channel_id,
    ts: messageId,
    text,
    blocks: slackBlocks(text, null),
    signal,
  });
}

/**
 * Sends a queued edit. Unlike a message, an edit is idempotent (the same text replaces the same message), so an
 * attempt cut short — no answer, or the object gone while the row was `sending` — is tried again, not given up.
 */
export async function deliverOutcomeEdit(host: ReplyHost, row: DuePrompt, body: PromptBody, edit: OutcomeEdit): Promise<void> {
  const { sql, storage } = host;
  const [messageId] = JSON.parse(row.message_ids) as string[];
  const at = () => new Date().toISOString();
  storage.transactionSync(() => {
    sql.run`UPDATE reply_outbox SET status = 'sending', updated_at = ${at()} WHERE run_id = ${row.approval_id}`;
  });
  const result = await editMessage(host, body.to, messageId ?? "", `${body.text}\n\n${outcomeText(edit)}`);
  const attempts = row.attempts + 1;
  const base = { approval_id: row.approval_id, channel: body.to.channel, outcome: edit.status };
  const retry = !result.ok && (result.retry || result.status === null) && attempts < MAX_ATTEMPTS;
  const status = result.ok ? "delivered" : retry ? "pending" : "failed";
  const error = result.ok ? null : result.error;
  const next = Date.now() + (retry ? retryDelayMs(attempts, result.ok ? undefined : result.retryAfterSeconds) : 0);
  storage.transactionSync(() => {
    sql.run`UPDATE reply_outbox SET status = ${status}, attempts = ${attempts}, last_error = ${error}, next_attempt_at = ${next},
                   updated_at = ${at()} WHERE run_id = ${row.approval_id}`;
    const type = result.ok ? "edited" : retry ? "edit_retrying" : "edit_failed";
    host.audit(`approval.prompt.${type}`, body.runId, { ...base, ...(error ? { error, attempt: attempts } : {}) });
  });
}
