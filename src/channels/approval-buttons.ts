/**
 * Approvals from inside a chat (issue 24 §2, D-075), the pure parts: the decision tokens the Approve / Deny buttons
 * carry, the message that asks for the decision, and the platform markup (a Telegram inline keyboard, Slack Block
 * Kit buttons).
 *
 * A token is 16 random bytes in base64url (22 characters); a button carries `apv1:<token>` (27 bytes, well inside
 * Telegram's 64-byte `callback_data`). Only the token's SHA-256 is stored (D1 `approval_buttons`, with the approval,
 * the decision, the agent, the channel and the chat it was sent to), so the token is unforgeable (128 bits of
 * randomness) and any alteration — another approval's id, the other decision, one changed character — is a token
 * nobody issued. It is single-use: the first press that reaches an approval claims all of its buttons at once.
 *
 * The message is built from the approval as the SessionDO stores it (arguments already redacted) and passes the
 * guards everything sent out passes: the output guard (hidden-layer text is withheld, not shown) and the secret
 * redaction (patterns and every configured secret value), within a bounded length.
 */

import { sha256Hex } from "../prompts/hash";
import { checkOutput } from "../prompts/output-guard";
import { redactText } from "../security/redact";

/** What a button's payload looks like: `apv1:` and the token. */
const BUTTON_DATA = /^apv1:([A-Za-z0-9_-]{22})$/;

/** The two decisions a chat may take. */
export type ChatDecision = "approve" | "deny";

/** The tokens of one approval's two buttons. */
export interface ButtonTokens {
  approve: string;
  deny: string;
}

/** A fresh, random token (16 bytes, base64url without padding). */
export function mintButtonToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

/** Two fresh tokens, one per decision. */
export const mintButtonTokens = (): ButtonTokens => ({ approve: mintButtonToken(), deny: mintButtonToken() });

/** What a button carries (Telegram `callback_data`, Slack `value`). */
export const buttonData = (token: string): string => `apv1:${token}`;

/** The token in a button's payload; null when the payload is not one of ours (any other shape, or too long). */
export function parseButtonData(data: unknown): string | null {
  if (typeof data !== "string" || data.length > 64) return null;
  return BUTTON_DATA.exec(data)?.[1] ?? null;
}

/** Whether a payload at least claims to be an approval button (a malformed one is answered, not ignored). */
export const looksLikeButton = (data: unknown): boolean => typeof data === "string" && data.startsWith("apv1:");

/** The SHA-256 a token is stored under. */
export const tokenDigest = (token: string): Promise<string> => sha256Hex(token);

/** Longest argument summary in a chat's approval message, in characters. */
export const MAX_ARGS_SUMMARY = 400;
const MAX_VALUE = 120;
const MAX_KEYS = 8;

/** What an approval message says about the call. */
export interface PromptApproval {
  id: string;
  tool: string;
  /** The arguments as stored (already redacted), JSON text. */
  args: string;
  expires_at: string;
}

/** A value, short: JSON text cut to `MAX_VALUE` characters. */
function shortValue(v: unknown): string {
  const text = typeof v === "string" ? JSON.stringify(v) : (JSON.stringify(v) ?? "null");
  return text.length > MAX_VALUE ? `${text.slice(0, MAX_VALUE - 1)}…` : text;
}

/** The arguments in a few `key: value` lines, bounded (the model is hostile: nothing it wrote gets long). */
export function argsSummary(args: string): string {
  let parsed: unknown = args;
  try {
    parsed = JSON.parse(args);
  } catch {
    /* shown as text */
  }
  let lines: string[];
  if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
    const entries = Object.entries(parsed as Record<string, unknown>);
    lines = entries.slice(0, MAX_KEYS).map(([k, v]) => `${k.slice(0, 40)}: ${shortValue(v)}`);
    if (entries.length > MAX_KEYS) lines.push(`… and ${entries.length - MAX_KEYS} more`);
  } else lines = [shortValue(parsed)];
  const text = lines.join("\n");
  return text.length > MAX_ARGS_SUMMARY ? `${text.slice(0, MAX_ARGS_SUMMARY - 1)}…` : text;
}

/** The arguments' summary as it may leave: hidden-layer text withheld, secrets redacted. */
export function guardedArgsSummary(args: string, secrets: readonly string[]): string {
  const summary = argsSummary(args);
  if (checkOutput(summary).blocked) return "(arguments withheld: ask an operator to look at the approval)";
  return redactText(summary, secrets);
}

/** The message that asks the chat for a decision. */
export function promptText(a: PromptApproval, secrets: readonly string[]): string {
  return [
    `Approval needed: the agent wants to run ${a.tool}`,
    guardedArgsSummary(a.args, secrets),
    `Expires ${a.expires_at} (approval ${a.id.slice(0, 12)}…${a.id.slice(-6)}). Only the agent's approvers can decide here.`,
  ].join("\n\n");
}

/** How a decided message ends: the outcome and who decided. */
export function outcomeLine(decision: ChatDecision, decider: string): string {
  return decision === "approve" ? `✅ Approved by ${decider}` : `⛔ Denied by ${decider}`;
}

/** Telegram's inline keyboard for the two buttons. */
export function telegramKeyboard(tokens: ButtonTokens): Record<string, unknown> {
  return {
    inline_keyboard: [
      [
        { text: "✅ Approve", callback_data: buttonData(tokens.approve) },
        { text: "⛔ Deny", callback_data: buttonData(tokens.deny) },
      ],
    ],
  };
}

/** Action ids of the Slack buttons (what a `block_actions` payload names). */
export const SLACK_ACTIONS = { approve: "sophie_approval_approve", deny: "sophie_approval_deny" } as const;

/** Slack's Block Kit for the message: the text as plain_text (no mentions, no links), then the two buttons. */
export function slackBlocks(text: string, tokens: ButtonTokens | null): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = [{ type: "section", text: { type: "plain_text", text: text.slice(0, 2900), emoji: true } }];
  if (tokens)
    blocks.push({
      type: "actions",
      block_id: "sophie_approval",
      elements: [
        button("Approve", SLACK_ACTIONS.approve, "primary", tokens.approve),
        button("Deny", SLACK_ACTIONS.deny, "danger", tokens.deny),
      ],
    });
  return blocks;
}

function button(label: string, actionId: string, style: string, token: string): Record<string, unknown> {
  return { type: "button", action_id: actionId, style, text: { type: "plain_text", text: label }, value: buttonData(token) };
}

/** The decider as a chat shows it: `telegram:<id>` / `slack:<id>`, and the @username when the platform gave a plain one. */
export function deciderLabel(decidedBy: string, username: string | null): string {
  const name = username && /^[A-Za-z0-9_.-]{1,64}$/.test(username) ? ` (@${username})` : "";
  return `${decidedBy}${name}`;
}
