/**
 * The sender check of the channel webhooks (issue 24 §3, D-074; the policy is src/channels/sender-policy.ts): called
 * after a message is verified and parsed, before `queue`. A refused message is logged (`channel.sender.refused`, no
 * ids or text) and counted in D1; the caller then acknowledges it to the platform and submits nothing. When the
 * policy has an answer for the sender (a pairing code, once per window), `answer` delivers it — a send that fails
 * gives the window back, so the sender's next message tries again. A channel whose acknowledgement carries text
 * (Discord) also passes `notice`, which receives what to say inside the window when the sender's code is pending.
 */
import type { Context } from "hono";
import { checkSender, PAIRING_PENDING_TEXT } from "../../channels/sender-policy";
import { postSlackMessage } from "../../channels/slack";
import { postSignedWebhook, webhookKey } from "../../channels/standard-webhooks";
import { sendTelegramMessage } from "../../channels/telegram";
import { boundSecret, deploymentConfig, secretOrigins } from "../../security/secret-origins";
import type { AppEnv } from "../router";
import type { Channel } from "./inbound";

/** Sends the policy's answer to the sender; whether it was delivered. */
export type Answer = (text: string) => Promise<boolean>;

/**
 * Whether the sender may start a turn here; a refusal is counted, and answered through `answer` when due (else, with a
 * pairing code pending, `notice` gets the reminder — nothing is sent, the caller's acknowledgement carries it).
 */
export async function senderAllowed(
  c: Context<AppEnv>,
  o: { agentId: string; channel: Channel; sender: string; chatId: string },
  answer: Answer,
  notice?: (text: string) => void,
): Promise<boolean> {
  const policy = c.get("config").channels[o.channel].senders;
  if (!policy || policy.mode === "open") return true; // absent: open, as before issue 24 §3
  const verdict = await checkSender(c.env.DB, policy, o);
  if (verdict.allowed) return true;
  let answered = false;
  if (verdict.answer) {
    answered = await answer(verdict.answer.text).catch(() => false);
    if (!answered) await verdict.answer.release();
  } else if (verdict.pending) notice?.(PAIRING_PENDING_TEXT);
  c.get("logger").log("info", "channel.sender.refused", { channel: o.channel, agent_id: o.agentId, mode: verdict.mode, answered });
  return false;
}

/** The bot token for `name`, bound to the deployment's origin for `apiBaseUrl` (never sent anywhere else). */
export function channelToken(c: Context<AppEnv>, name: "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN", apiBaseUrl: string): string | null {
  const deployment = secretOrigins(deploymentConfig(c.get("config"), c.get("configSource").source));
  const token = boundSecret(c.env, name, apiBaseUrl, deployment);
  return token.ok ? token.value : null;
}

/** An answer in a Telegram chat, in reply to the refused message. */
export function telegramAnswer(c: Context<AppEnv>, chatId: string, replyTo: number): Answer {
  return async (text) => {
    const apiBaseUrl = c.get("config").channels.telegram.apiBaseUrl;
    const botToken = channelToken(c, "TELEGRAM_BOT_TOKEN", apiBaseUrl);
    if (!botToken) return false;
    return (await sendTelegramMessage({ apiBaseUrl, botToken, chatId, text, replyTo, signal: AbortSignal.timeout(5_000) })).ok;
  };
}

/** An answer in a Slack channel, in the refused message's thread. */
export function slackAnswer(c: Context<AppEnv>, channel: string, threadTs: string): Answer {
  return async (text) => {
    const apiBaseUrl = c.get("config").channels.slack.apiBaseUrl;
    const botToken = channelToken(c, "SLACK_BOT_TOKEN", apiBaseUrl);
    if (!botToken) return false;
    return (await postSlackMessage({ apiBaseUrl, botToken, channel, text, threadTs, signal: AbortSignal.timeout(5_000) })).ok;
  };
}

/** An answer to a Standard Webhooks sender: a signed `message.reply` without a run to the configured reply URL. */
export function standardAnswer(c: Context<AppEnv>, to: { userId: string; roomId: string; inReplyTo: string }): Answer {
  return async (text) => {
    const url = c.get("config").channels.standard.replyUrl;
    const key = webhookKey(c.env.STANDARD_WEBHOOK_SECRET);
    if (!url || !key) return false;
    const body = JSON.stringify({
      type: "message.reply",
      data: { user_id: to.userId, room_id: to.roomId, in_reply_to: to.inReplyTo, message: text },
    });
    const sent = await postSignedWebhook({ url, key, id: `msg_pair_${to.inReplyTo}`.slice(0, 200), body, timeoutMs: 5_000 });
    return sent.ok;
  };
}
