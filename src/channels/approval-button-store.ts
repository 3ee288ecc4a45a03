/**
 * The D1 side of approvals from inside a chat (issue 24 §2, D-075; migrations/0018_chat_approvals.sql): the hashed
 * tokens of the Approve / Deny buttons, looked up by hash when a button is pressed, and claimed — every button of the
 * approval at once, in one statement — by the first press that reaches them.
 */
import type { ChatDecision } from "./approval-buttons";

/** A button as stored: what its token is bound to, and whether the approval's buttons were already used. */
export interface ButtonRow {
  approval_id: string;
  agent_id: string;
  decision: ChatDecision;
  channel: "telegram" | "slack";
  chat_id: string;
  expires_at: string;
  used_at: string | null;
  used_by: string | null;
  used_event: string | null;
}

/** One button to record. */
export interface NewButton {
  tokenSha256: string;
  approvalId: string;
  agentId: string;
  decision: ChatDecision;
  channel: "telegram" | "slack";
  chatId: string;
  createdAt: string;
  expiresAt: string;
}

/**
 * The insert of a button, for the batch that reserves the approval's index row: it writes only if that reservation
 * did (an approval refused by the pending limits gets no buttons).
 */
export function buttonStatement(db: D1Database, b: NewButton): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO approval_buttons (token_sha256, approval_id, agent_id, decision, channel, chat_id, created_at, expires_at)
       SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE EXISTS (SELECT 1 FROM approvals WHERE approval_id = ?2)`,
    )
    .bind(b.tokenSha256, b.approvalId, b.agentId, b.decision, b.channel, b.chatId, b.createdAt, b.expiresAt);
}

/** The button whose token hashes to `tokenSha256`, or null (a token nobody issued). */
export async function findButton(db: D1Database, tokenSha256: string): Promise<ButtonRow | null> {
  return db
    .prepare(
      `SELECT approval_id, agent_id, decision, channel, chat_id, expires_at, used_at, used_by, used_event
       FROM approval_buttons WHERE token_sha256 = ?1`,
    )
    .bind(tokenSha256)
    .first<ButtonRow>();
}

/** How long buttons are kept past their approval's expiry (a late press is then answered "expired", not "invalid"). */
const KEEP_AFTER_EXPIRY_MS = 7 * 86_400_000;

/**
 * Claims every button of `approvalId` for one press: true for exactly one of any number of concurrent presses
 * (approve and deny, or one button twice), false once they were claimed.
 */
export async function claimButtons(db: D1Database, approvalId: string, by: string, event: string, now: Date): Promise<boolean> {
  const claimed = await db
    .prepare("UPDATE approval_buttons SET used_at = ?1, used_by = ?2, used_event = ?3 WHERE approval_id = ?4 AND used_at IS NULL")
    .bind(now.toISOString(), by, event, approvalId)
    .run();
  return claimed.meta.changes > 0;
}

/** Buttons deleted per cron tick at most (a large backlog goes over several ticks, each statement short). */
export const BUTTON_PRUNE_LIMIT = 1_000;

/**
 * Deletes buttons a week past their approval's expiry, oldest first, at most `limit`; the number deleted. Run by the
 * cron tick (src/scheduler/tick.ts), not by presses: approvals decided in the dashboard or left to expire leave their
 * buttons too, and nobody may ever press again.
 */
export async function pruneExpiredButtons(db: D1Database, now: Date, limit = BUTTON_PRUNE_LIMIT): Promise<number> {
  const before = new Date(now.getTime() - KEEP_AFTER_EXPIRY_MS).toISOString();
  const done = await db
    .prepare(
      `DELETE FROM approval_buttons WHERE token_sha256 IN
         (SELECT token_sha256 FROM approval_buttons WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)`,
    )
    .bind(before, limit)
    .run();
  return done.meta.changes;
}
