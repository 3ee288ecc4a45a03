/**
 * `message.send` through the chat channels (issue 10; S1 §3.3): outbound sends to anyone other than the
 * sender of the current message go through the `message.send` tool — its policy, approvals and honeypot
 * rules — and end here. Registered when this module loads. A channel that is not enabled in the
 * configuration (no API base URL in the run's context) or has no bot token refuses, and nothing is sent.
 */
import { type ChannelSender, channelSenders } from "./outbound";
import { postSlackMessage } from "./slack";
import { sendTelegramMessage } from "./telegram";

const telegram: ChannelSender = {
  async send(msg, ctx) {
    if (!ctx.apiBaseUrl) throw new Error("the telegram channel is not enabled");
    if (!ctx.env?.TELEGRAM_BOT_TOKEN) throw new Error("TELEGRAM_BOT_TOKEN is not set");
    const r = await sendTelegramMessage({
      apiBaseUrl: ctx.apiBaseUrl,
      botToken: ctx.env.TELEGRAM_BOT_TOKEN,
      chatId: msg.to,
      text: msg.text,
      signal: ctx.signal,
    });
    if (!r.ok) throw new Error(r.error);
    return { messageId: String(r.messageId) };
  },
};

const slack: ChannelSender = {
  async send(msg, ctx) {
    if (!ctx.apiBaseUrl) throw new Error("the slack channel is not enabled");
    if (!ctx.env?.SLACK_BOT_TOKEN) throw new Error("SLACK_BOT_TOKEN is not set");
    const r = await postSlackMessage({
      apiBaseUrl: ctx.apiBaseUrl,
      botToken: ctx.env.SLACK_BOT_TOKEN,
      channel: msg.to,
      text: msg.text,
      threadTs: null,
      signal: ctx.signal,
    });
    if (!r.ok) throw new Error(r.error);
    return { messageId: r.messageId };
  },
};

if (!channelSenders.get("telegram")) channelSenders.register("telegram", telegram);
if (!channelSenders.get("slack")) channelSenders.register("slack", slack);
