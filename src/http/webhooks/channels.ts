/**
 * Chat channels' webhooks (issue 10; S1 §2.4, §5.1, §5.5; DESIGN "Auth", "Idempotency"):
 *   POST /webhooks/telegram/{agent_id}   X-Telegram-Bot-Api-Secret-Token
 *   POST /webhooks/slack/{agent_id}      Slack v0 signature over the raw body (±5 minutes)
 *   POST /webhooks/standard/{agent_id}   Standard Webhooks (webhook-id / -timestamp / -signature)
 *   POST /webhooks/discord/{agent_id}    Discord Interactions, Ed25519 (./discord.ts, issue 24 §4)
 *
 * Each route verifies the sender first — a missing or misconfigured secret fails closed (401), never open —
 * then maps the message to its session key (private chats `dm`, groups `group`), and queues it in that
 * session's Durable Object with the platform's delivery id as the dispatch key (`telegram:<update_id>`,
 * `slack:<event_id>`, `standard:<webhook-id>`): a redelivered or concurrently duplicated message is the same
 * run, deduplicated durably where the run lives. The answer is immediate; the run executes in the object and
 * its final answer is sent back once (src/channels/replies.ts). Channel text is only ever the L6 user message.
 * A disabled channel or an unknown agent is 404.
 */

import { type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { parseSlackPayload } from "../../channels/slack";
import { parseStandardInbound, verifyWebhook, webhookKey } from "../../channels/standard-webhooks";
import { botIdFromToken, parseTelegramUpdate, verifyTelegramSecret } from "../../channels/telegram";
import { parseTelegramPress } from "../../channels/telegram-callbacks";
import { GatewayError } from "../../errors";
import { channelCallerKey } from "../../runs/caller";
import { deploymentConfig, secretOrigins } from "../../security/secret-origins";
import { type AppEnv, createRouter } from "../router";
import { telegramPress } from "./chat-approvals";
import { agentFor, anyVerifies, inboundSecrets, queue, unauthorized, verifiedSlackBody, webhookRoute } from "./inbound";
import { senderAllowed, slackAnswer, standardAnswer, telegramAnswer } from "./sender-gate";

/** Where the deployment's own config sends `name` (a reply's bot token goes there and nowhere else). */
function tokenOrigin(c: Context<AppEnv>, name: "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN"): Record<string, string> {
  const origin = secretOrigins(deploymentConfig(c.get("config"), c.get("configSource").source))[name];
  return origin ? { tokenOrigin: origin } : {};
}

const Acknowledged = z.object({ ok: z.boolean(), ignored: z.boolean().optional(), challenge: z.string().optional() });

/** The webhook routes. */
export function webhookRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(
    webhookRoute("telegram", "Telegram Bot API webhook (X-Telegram-Bot-Api-Secret-Token)", { status: 200, schema: Acknowledged }),
    (async (c: Context<AppEnv>) => {
      const agentId = agentFor(c, "telegram");
      const header = c.req.header("X-Telegram-Bot-Api-Secret-Token") ?? null;
      if (!(await anyVerifies(inboundSecrets(c, "TELEGRAM_WEBHOOK_SECRET"), (s) => verifyTelegramSecret(s, header))))
        throw unauthorized("telegram");
      const botId = botIdFromToken(c.env.TELEGRAM_BOT_TOKEN ?? "");
      if (!botId) throw unauthorized("telegram"); // without the bot token nothing could be answered: fail closed
      const body: unknown = await c.req.json().catch(() => null);
      // Issue 24 §2: a press of an approval's button (callback_query) is an approver's decision, never a turn.
      const press = parseTelegramPress(body);
      if (press) return telegramPress(c, agentId, press);
      const update = parseTelegramUpdate(body);
      if (update.kind === "ignored" || update.fromIsBot) return c.json({ ok: true, ignored: true }, 200);
      const sender = { agentId, channel: "telegram" as const, sender: update.fromId, chatId: update.chatId };
      if (!(await senderAllowed(c, sender, telegramAnswer(c, update.chatId, update.messageId))))
        return c.json({ ok: true, ignored: true }, 200);
      const scope = update.chatType === "private" ? `dm:${update.fromId}` : `group:${update.chatId}`;
      await queue(c, {
        agentId,
        channel: "telegram",
        key: `agent:${agentId}:telegram:${botId}:${scope}`,
        caller: channelCallerKey("telegram", botId, update.fromId),
        message: update.text,
        dispatchKey: `telegram:${update.updateId}`,
        reply: {
          channel: "telegram",
          apiBaseUrl: c.get("config").channels.telegram.apiBaseUrl,
          chatId: update.chatId,
          replyTo: update.messageId,
          ...tokenOrigin(c, "TELEGRAM_BOT_TOKEN"),
        },
      });
      return c.json({ ok: true }, 200);
    }) as never,
  );

  app.openapi(webhookRoute("slack", "Slack Events API webhook (v0 signature)", { status: 200, schema: Acknowledged }), (async (
    c: Context<AppEnv>,
  ) => {
    const agentId = agentFor(c, "slack");
    const raw = await verifiedSlackBody(c);
    let body: unknown = null;
    try {
      body = JSON.parse(raw);
    } catch {
      throw new GatewayError("invalid.request", "the Slack payload is not JSON");
    }
    const payload = parseSlackPayload(body);
    if (payload.kind === "url_verification") return c.json({ challenge: payload.challenge }, 200);
    if (payload.kind === "ignored") return c.json({ ok: true, ignored: true }, 200);
    const sender = { agentId, channel: "slack" as const, sender: payload.user, chatId: payload.channel };
    if (!(await senderAllowed(c, sender, slackAnswer(c, payload.channel, payload.threadTs ?? payload.ts))))
      return c.json({ ok: true, ignored: true }, 200);
    const scope = payload.channelType === "im" ? `dm:${payload.user}` : `group:${payload.channel}`;
    await queue(c, {
      agentId,
      channel: "slack",
      key: `agent:${agentId}:slack:${payload.teamId}:${scope}`,
      caller: channelCallerKey("slack", payload.teamId, payload.user),
      message: payload.text,
      // A message is (channel, ts): a retry carries the same event_id, and a mention also arriving as app_mention has another one.
      dispatchKey: `slack:${payload.channel}:${payload.ts}`,
      reply: {
        channel: "slack",
        apiBaseUrl: c.get("config").channels.slack.apiBaseUrl,
        channel_id: payload.channel,
        threadTs: payload.threadTs ?? payload.ts,
        ...tokenOrigin(c, "SLACK_BOT_TOKEN"),
      },
    });
    return c.json({ ok: true }, 200);
  }) as never);

  app.openapi(
    webhookRoute("standard", "Standard Webhooks message {user_id, room_id, message}", {
      status: 202,
      // `ignored` (no run) when the channel's sender policy refused the sender (issue 24 §3).
      schema: z.object({ ok: z.boolean(), run_id: z.string().optional(), ignored: z.boolean().optional() }),
    }),
    (async (c: Context<AppEnv>) => {
      const agentId = agentFor(c, "standard");
      const keys = inboundSecrets(c, "STANDARD_WEBHOOK_SECRET")
        .map((s) => webhookKey(s))
        .filter((k): k is Uint8Array => k !== null);
      if (keys.length === 0) throw unauthorized("standard");
      const raw = await c.req.text();
      const id = c.req.header("webhook-id") ?? null;
      const headers = { id, timestamp: c.req.header("webhook-timestamp") ?? null, signature: c.req.header("webhook-signature") ?? null };
      const now = Math.floor(Date.now() / 1000);
      let verified = false;
      for (const key of keys) if (!verified) verified = (await verifyWebhook(key, headers, raw, now)).ok;
      if (!verified || !id) throw unauthorized("standard");
      if (!/^[A-Za-z0-9_.:-]{1,200}$/.test(id))
        throw new GatewayError("invalid.request", "webhook-id: letters, digits and _ . : - (at most 200)");
      let body: unknown = null;
      try {
        body = JSON.parse(raw);
      } catch {
        throw new GatewayError("invalid.request", "the body is not JSON");
      }
      const inbound = parseStandardInbound(body);
      if (!inbound.ok) throw new GatewayError("invalid.request", inbound.error);
      const replyUrl = c.get("config").channels.standard.replyUrl;
      const { user_id, room_id, message } = inbound.value;
      const sender = { agentId, channel: "standard" as const, sender: user_id, chatId: room_id };
      if (!(await senderAllowed(c, sender, standardAnswer(c, { userId: user_id, roomId: room_id, inReplyTo: id }))))
        return c.json({ ok: true, ignored: true }, 202);
      const queued = await queue(c, {
        agentId,
        channel: "standard",
        key: `agent:${agentId}:standard:${room_id}:dm:${user_id}`,
        caller: channelCallerKey("standard", room_id, user_id),
        message,
        dispatchKey: `standard:${id}`,
        reply: replyUrl ? { channel: "standard", url: replyUrl, userId: user_id, roomId: room_id, inReplyTo: id } : null,
      });
      return c.json({ ok: true, run_id: queued.runId }, 202);
    }) as never,
  );

  return app;
}
