/**
 * Who may talk to an agent through a chat channel (issue 24 §3, D-074): `channels.<name>.senders`.
 *
 * Checked after the platform's signature and before any turn is submitted, on the verified sender's platform id
 * and the id of the chat it wrote in (Telegram chat, Slack / Discord channel, Standard Webhooks room):
 * - `open`: everyone;
 * - `allowlist`: a sender whose user id or chat id is in `allow`;
 * - `pairing`: those, and senders an admin paired. Anyone else gets a pairing code — 8 characters from an alphabet
 *   without look-alikes (no 0/O, 1/I/L), drawn with crypto.getRandomValues, valid one hour, single-use — and
 *   nothing else; while that code is pending, asking again gives the same code.
 * A refused message is counted (D1, per agent, channel and sender) and never queued; the pairing code is sent at
 * most once per sender per 10-minute window, however many messages or redeliveries arrive. An `allowlist` refusal
 * is silent (the platform's acknowledgement only). Inside the window a pairing sender whose code is still pending gets
 * `pending` (D-076): a channel whose acknowledgement itself carries text to the sender (Discord's interaction
 * response) says that the code is pending, without the code and without sending anything; the others stay silent.
 */
import type { SenderPolicyConfig } from "../config/schema";
import { countRefusal, pendingCode, releaseClaim, type SenderKey, senderPaired } from "./sender-store";

/** How long a pairing code may be approved. */
export const PAIRING_TTL_MS = 60 * 60_000;
/** A refused sender is answered at most once per this window. */
export const REFUSAL_REPLY_WINDOW_MS = 10 * 60_000;
/** The pairing code alphabet: upper-case letters and digits without 0 O 1 I L. */
export const PAIRING_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789";
export const PAIRING_CODE_LENGTH = 8;
/** A well-formed pairing code. */
export const PAIRING_CODE = /^[ABCDEFGHJKMNPQRSTUVWXYZ23456789]{8}$/;

/** A fresh pairing code (uniform over the alphabet: bytes that would bias the modulo are drawn again). */
export function newPairingCode(): string {
  const n = PAIRING_ALPHABET.length;
  const limit = 256 - (256 % n);
  let code = "";
  while (code.length < PAIRING_CODE_LENGTH) {
    for (const byte of crypto.getRandomValues(new Uint8Array(16))) {
      if (byte < limit && code.length < PAIRING_CODE_LENGTH) code += PAIRING_ALPHABET[byte % n];
    }
  }
  return code;
}

/** The message a refused sender receives under `pairing`. */
export function pairingText(code: string): string {
  return `This agent only talks to approved people. Your pairing code is ${code} (valid for one hour): send it to the operator to get access.`;
}

/** What a pairing sender is told inside the window, where the acknowledgement carries text: the code, not repeated, is pending. */
export const PAIRING_PENDING_TEXT =
  "This agent only talks to approved people. A pairing code was already given to you and is still pending: send it to the operator to get access. Write again after 10 minutes to see it once more.";

/** Whether the configuration alone lets this sender in. */
export function allowedByConfig(policy: SenderPolicyConfig, senderId: string, chatId: string): boolean {
  return policy.mode === "open" || policy.allow.includes(senderId) || policy.allow.includes(chatId);
}

/**
 * The verdict on one message: let it run, or drop it — with the one answer to send now, if any. `pending`: no answer
 * is due (one was given in this window) but the sender's pairing code is pending (`PAIRING_PENDING_TEXT`).
 */
export type SenderVerdict =
  | { allowed: true }
  | {
      allowed: false;
      mode: "allowlist" | "pairing";
      answer: { text: string; release: () => Promise<void> } | null;
      pending: boolean;
    };

/** Decides whether the sender may start a turn; counts a refusal and prepares its once-per-window answer. */
export async function checkSender(
  db: D1Database,
  policy: SenderPolicyConfig,
  o: SenderKey & { chatId: string },
  nowMs = Date.now(),
): Promise<SenderVerdict> {
  if (allowedByConfig(policy, o.sender, o.chatId)) return { allowed: true };
  const key: SenderKey = { agentId: o.agentId, channel: o.channel, sender: o.sender };
  if (policy.mode === "pairing" && (await senderPaired(db, key))) return { allowed: true };
  const mode = policy.mode === "pairing" ? "pairing" : "allowlist";
  const { claim, codePending } = await countRefusal(db, key, nowMs, REFUSAL_REPLY_WINDOW_MS);
  if (mode === "allowlist") return { allowed: false, mode, answer: null, pending: false };
  if (claim === null) return { allowed: false, mode, answer: null, pending: codePending };
  const release = () => releaseClaim(db, key, claim);
  const code = await pendingCode(db, key, newPairingCode(), nowMs, PAIRING_TTL_MS);
  if (code === null) {
    await release();
    return { allowed: false, mode, answer: null, pending: false };
  }
  return { allowed: false, mode, answer: { text: pairingText(code), release }, pending: false };
}
