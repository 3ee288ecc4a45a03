/**
 * An approval's message to the chat its run came from (issue 24 §2, D-075): "the agent wants to run X — Approve /
 * Deny", sent through the reply outbox like the run's own answer, so it is retried on 429/5xx with the same backoff,
 * never sent twice (a send left without an answer is `unknown`, not repeated), and never lost across an eviction.
 *
 * The prompt is a row of `reply_outbox` keyed by the approval id (`apr_…`; a run's reply is keyed by the run id),
 * written in the transaction that creates the approval, and only for a run whose agent has approvers on that channel
 * (`RunSpec.chatApprovals`) and whose conversation has a Telegram or Slack reply target — a run that never waits for
 * an approval, or waits in a session without one, reads and writes nothing here. Its target holds the chat, the
 * guarded text and the two buttons' tokens; the tokens are removed from the row once the message is out. A prompt
 * whose approval was decided (or expired) before it could be sent is skipped; one delivered before is edited to
 * the outcome through the same row (approval-outcomes.ts, D-081).
 */

import { readLazy } from "../sessions/lazy-tables";
import { buttonStatement } from "./approval-button-store";
import { mintButtonTokens, type PromptApproval, promptText, slackBlocks, telegramKeyboard, tokenDigest } from "./approval-buttons";
import { type DuePrompt, deliverOutcomeEdit, followDecidedMeanwhile, type PromptBody, type PromptTarget } from "./approval-outcomes";
import { MAX_ATTEMPTS, type ReplyHost, type ReplyTarget, retryDelayMs, sendPart } from "./replies";

/** What the approval step does with a chat prompt (the engine's RunHost.chatApprovalPrompt, src/runs/host.ts). */
export interface ChatApprovalPrompt {
  /** The D1 statements that record the buttons (hashed), for the batch that reserves the approval. */
  buttons(db: D1Database, a: { approvalId: string; agentId: string; createdAt: string; expiresAt: string }): Promise<D1PreparedStatement[]>;
  /** Queues the message; call inside the transaction that stores the approval. */
  enqueue(a: PromptApproval & { run_id: string }): void;
}

/** The chat of `runId`'s conversation, when it came from Telegram or Slack (its reply row says where). */
function promptTarget(host: Pick<ReplyHost, "sql">, runId: string): PromptTarget | null {
  const row = readLazy(
    host.sql,
    "reply_outbox",
    undefined,
    () => host.sql.one<{ target: string }>`SELECT target FROM reply_outbox WHERE run_id = ${runId}`,
  );
  if (!row) return null;
  const target = JSON.parse(row.target) as ReplyTarget;
  if (target.channel !== "telegram" && target.channel !== "slack") return null;
  return target.job ? null : target;
}

/** The chat prompt of an approval `runId` asks for, or null when its conversation is not a Telegram or Slack chat. */
export function chatApprovalPrompt(host: Pick<ReplyHost, "sql" | "secrets">, runId: string): ChatApprovalPrompt | null {
  const to = promptTarget(host, runId);
  if (!to) return null;
  const tokens = mintButtonTokens();
  const chatId = to.channel === "telegram" ? to.chatId : to.channel_id;
  return {
    buttons: async (db, a) => {
      const rows = await Promise.all(
        (["approve", "deny"] as const).map(async (decision) =>
          buttonStatement(db, {
            tokenSha256: await tokenDigest(tokens[decision]),
            approvalId: a.approvalId,
            agentId: a.agentId,
            decision,
            channel: to.channel,
            chatId,
            createdAt: a.createdAt,
            expiresAt: a.expiresAt,
          }),
        ),
      );
      return rows;
    },
    enqueue: (a) => {
      const body: PromptBody = { to, runId: a.run_id, text: promptText(a, host.secrets), tokens };
      host.sql
        .run`INSERT INTO reply_outbox (run_id, target, status, updated_at) VALUES (${a.id}, ${JSON.stringify(body)}, 'pending', ${new Date().toISOString()})
                   ON CONFLICT (run_id) DO NOTHING`;
    },
  };
}

/** Sends every due approval prompt; first settles prompts a previous instance left `sending` (not sent again). */
export async function deliverApprovalPrompts(host: ReplyHost, now = Date.now()): Promise<void> {
  const { sql } = host;
  const rows = readLazy(
    sql,
    "reply_outbox",
    [],
    () => sql.all<DuePrompt>`
      SELECT o.run_id AS approval_id, o.target, o.attempts, o.status, o.message_ids, a.status AS approval_status FROM reply_outbox o JOIN approvals a ON a.id = o.run_id
      WHERE o.status = 'sending' OR (o.status = 'pending' AND o.next_attempt_at <= ${now}) ORDER BY o.next_attempt_at LIMIT 20`,
  );
  for (const row of rows) {
    const body = JSON.parse(row.target) as PromptBody;
    if (body.edit) await deliverOutcomeEdit(host, row, body, body.edit);
    else if (row.status === "sending")
      settle(host, row.approval_id, body, "unknown", "interrupted while sending; not sent again (it may have been posted)");
    else if (row.approval_status !== "pending")
      settle(host, row.approval_id, body, "skipped", `the approval was ${row.approval_status} before its message went out`);
    else await deliverPrompt(host, row, body);
  }
}

async function deliverPrompt(host: ReplyHost, row: DuePrompt, body: PromptBody): Promise<void> {
  const { sql, storage } = host;
  storage.transactionSync(() => {
    sql.run`UPDATE reply_outbox SET status = 'sending', updated_at = ${new Date().toISOString()} WHERE run_id = ${row.approval_id}`;
  });
  const tokens = body.tokens;
  const markup = tokens ? { telegram: telegramKeyboard(tokens), slack: slackBlocks(body.text, tokens) } : {};
  const result = await sendPart(host, body.to, body.runId, body.text, 0, markup);
  const attempts = row.attempts + 1;
  if (result.ok) return settle(host, row.approval_id, body, "delivered", null, result.messageId);
  if (!result.answered) return settle(host, row.approval_id, body, "unknown", `${result.error}; not sent again (it may have been posted)`);
  if (!result.retry || attempts >= MAX_ATTEMPTS) return settle(host, row.approval_id, body, "failed", result.error);
  const next = Date.now() + retryDelayMs(attempts, result.retryAfterSeconds);
  storage.transactionSync(() => {
    sql.run`UPDATE reply_outbox SET status = 'pending', attempts = ${attempts}, last_error = ${result.error}, next_attempt_at = ${next},
                   updated_at = ${new Date().toISOString()} WHERE run_id = ${row.approval_id}`;
    host.audit("approval.prompt.retrying", body.runId, {
      approval_id: row.approval_id,
      channel: body.to.channel,
      attempt: attempts,
      error: result.error,
    });
  });
}

/** Ends a prompt's delivery (the tokens leave the row: the chat has them, or nobody will) and audits it on its run. */
function settle(
  host: ReplyHost,
  approvalId: string,
  body: PromptBody,
  status: "delivered" | "failed" | "unknown" | "skipped",
  error: string | null,
  messageId?: string,
): void {
  const kept = JSON.stringify({ ...body, tokens: null });
  const ids = JSON.stringify(messageId ? [messageId] : []);
  host.storage.transactionSync(() => {
    host.sql.run`UPDATE reply_outbox SET status = ${status}, target = ${kept}, message_ids = ${ids}, last_error = ${error},
                   parts_sent = ${messageId ? 1 : 0}, updated_at = ${new Date().toISOString()} WHERE run_id = ${approvalId}`;
    // Decided (or expired) while the message was on its way: it is edited to the outcome next (D-081).
    if (status === "delivered") followDecidedMeanwhile(host.sql, approvalId);
    host.audit(`approval.prompt.${status}`, body.runId, {
      approval_id: approvalId,
      channel: body.to.channel,
      ...(messageId ? { message_id: messageId } : {}),
      ...(error ? { error } : {}),
    });
  });
}
