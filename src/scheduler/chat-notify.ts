/**
 * Job reports to a chat (issue 24 §1): `notify: {channel: "telegram" | "slack" | "discord", target}` posts the run's final output
 * to that chat through the channel's reply outbox (src/channels/replies.ts) — the same single delivery, splitting at
 * the platform's limit, 429/5xx retries and "never twice" rule as a reply to a chat message.
 *
 * This module is what the scheduler knows about chat channels: which ones a job may report to and what a target
 * looks like on each (checked when the job is written), and the reply target a firing's run is queued with (built
 * by the tick from the configuration in force, so the bot token goes to the origin the deployment binds it to and
 * nowhere else). A new chat channel adds an entry to `CHAT_NOTIFY` and a case to `chatReplyTarget`, and a reply
 * variant to src/channels/replies.ts — as Discord did (D-076: its reports need a bot token, DISCORD_BOT_TOKEN, since
 * the interactions channel only ever holds 15-minute interaction tokens).
 */
import type { ReplyTarget } from "../channels/replies";
import type { GatewayConfig } from "../config/schema";
import type { ConfigRef } from "../runs/spec";
import { deploymentConfig, secretOrigins } from "../security/secret-origins";

/** The chat channels a job may report to: what a target is, and the secret the channel posts with. */
export const CHAT_NOTIFY = {
  telegram: {
    // An integer chat id (negative for groups and channels; Telegram's ids fit in 52 bits), or a public @channelusername.
    target: /^(?:-?[1-9]\d{0,15}|@[A-Za-z][A-Za-z0-9_]{4,31})$/,
    rule: "a Telegram chat id (an integer, negative for groups) or @channelusername",
    secret: "TELEGRAM_BOT_TOKEN",
  },
  slack: {
    // A conversation id: C (public channel), G (private channel or group DM) or D (direct message), then upper-case letters and digits.
    target: /^[CGD][A-Z0-9]{2,31}$/,
    rule: "a Slack channel id (C, G or D followed by upper-case letters and digits, e.g. C0123456789)",
    secret: "SLACK_BOT_TOKEN",
  },
  discord: {
    // A channel id: a snowflake, in practice 17–20 decimal digits (64-bit, never with a leading zero).
    target: /^[1-9]\d{16,19}$/,
    rule: "a Discord channel id (a snowflake: 17–20 digits, e.g. 1234567890123456789)",
    secret: "DISCORD_BOT_TOKEN",
  },
} as const;

export type ChatNotifyChannel = keyof typeof CHAT_NOTIFY;

/** Whether `channel` is a chat channel a job may report to. */
export function isChatNotifyChannel(channel: string): channel is ChatNotifyChannel {
  return Object.hasOwn(CHAT_NOTIFY, channel);
}

/** What a firing's run carries about a chat report: the reply target it is posted through. */
export interface ChatNotifySpec {
  channel: ChatNotifyChannel;
  target: string;
  jobId: string;
  scheduledFor: string;
  reply: ReplyTarget;
}

/**
 * Why a firing cannot report to `channel` under `config` (the channel was turned off after the job was written), or
 * null. The run still runs; the tick records this as the firing's notification failure and queues no report.
 */
export function chatNotifyUnavailable(channel: string, config: GatewayConfig): string | null {
  if (!isChatNotifyChannel(channel) || config.channels[channel].enabled) return null;
  return `the ${channel} channel is not enabled (channels.${channel}.enabled)`;
}

/** Where the deployment's config binds the channel's bot token (a report's token goes there and nowhere else). */
function tokenOrigin(config: GatewayConfig, ref: ConfigRef | undefined, secret: string): { tokenOrigin?: string } {
  const origin = secretOrigins(deploymentConfig(config, ref?.source))[secret];
  return origin ? { tokenOrigin: origin } : {};
}

/** The reply target a report of job `jobId` to `target` on `channel` is queued with, under `config`. */
export function chatReplyTarget(
  channel: ChatNotifyChannel,
  target: string,
  jobId: string,
  config: GatewayConfig,
  ref?: ConfigRef,
): ReplyTarget {
  const origin = tokenOrigin(config, ref, CHAT_NOTIFY[channel].secret);
  switch (channel) {
    case "telegram":
      return { channel, apiBaseUrl: config.channels.telegram.apiBaseUrl, chatId: target, replyTo: null, job: { jobId }, ...origin };
    case "slack":
      return { channel, apiBaseUrl: config.channels.slack.apiBaseUrl, channel_id: target, threadTs: null, job: { jobId }, ...origin };
    case "discord":
      return { channel, apiBaseUrl: config.channels.discord.apiBaseUrl, channelId: target, job: { jobId }, ...origin };
  }
}

/** A firing's chat report, or null when the channel is no longer enabled (`chatNotifyUnavailable`). */
export function chatNotifySpec(
  f: { channel: ChatNotifyChannel; target: string; jobId: string; scheduledFor: string },
  config: GatewayConfig,
  ref?: ConfigRef,
): ChatNotifySpec | null {
  if (chatNotifyUnavailable(f.channel, config) !== null) return null;
  return { ...f, reply: chatReplyTarget(f.channel, f.target, f.jobId, config, ref) };
}
