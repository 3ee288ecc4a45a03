/**
 * `message.send` through the chat channels (issue 10; S1 §3.3): outbound sends to anyone other than the
 * sender of the current message go through the `message.send` tool — its policy, approvals and honeypot
 * rules — and end here. Registered when this module loads. A channel that is not enabled in the
 * configuration (no API base URL in the run's context) or has no bot token refuses, and nothing is sent.
 */
import { boundSecret, withheldMessage } from "../security/secret-origins";
import { type ChannelSender, channelSenders, type SendContext } from "./outbound";
import { postSlackMessage } from "./slack";
import { sendTelegramMessage } from "./telegram";

/** The bot token for `apiBaseUrl`; throws (for the log only) when it is missing or bound to another origin. */
function botToken(ctx: SendContext, name: "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN", channel: string, apiBaseUrl: string): string {
  const token = boundSecret(ctx.env ?? {}, name, apiBaseUrl, ctx.secretOrigins);
  if (token.ok) return token.value;
  throw new Error(token.reason === "missing" ? `${name} is not set` : withheldMessage(name, `channel "${channel}"`));
}

const telegram: ChannelSender = {
  async send(msg, ctx) {
    if (!ctx.apiBaseUrl) throw new Error("the telegram channel is not enabled");
    const r = await sendTelegramMessage({
      apiBaseUrl: ctx.apiBaseUrl,
      botToken: botToken(ctx, "TELEGRAM_BOT_TOKEN", "telegram", ctx.apiBaseUrl),
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
    const r = await postSlackMessage({
      apiBaseUrl: ctx.apiBaseUrl,
      botToken: botToken(ctx, "SLACK_BOT_TOKEN", "slack", ctx.apiBaseUrl),
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
