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

import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { ReplyTarget } from "../../channels/replies";
import { parseSlackPayload, verifySlackSignature } from "../../channels/slack";
import { parseStandardInbound, verifyWebhook, webhookKey } from "../../channels/standard-webhooks";
import { botIdFromToken, parseTelegramUpdate, verifyTelegramSecret } from "../../channels/telegram";
import { parseTelegramPress } from "../../channels/telegram-callbacks";
import { GatewayError } from "../../errors";
import { channelCallerKey } from "../../runs/caller";
import { submitTurn } from "../../runs/submit";
import { deploymentConfig, secretOrigins } from "../../security/secret-origins";
import { acceptedSecrets } from "../../security/stored-secrets";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { providerReady, sessionKeyOrThrow, submitContext } from "../turns";
import { telegramPress } from "./chat-approvals";
import { senderAllowed, slackAnswer, standardAnswer, telegramAnswer } from "./sender-gate";

/** The chat channels with a webhook here (Discord's route is in ./discord.ts). */
export type Channel = "telegram" | "slack" | "standard" | "discord";

/** Where the deployment's own config sends `name` (a reply's bot token goes there and nowhere else). */
function tokenOrigin(c: Context<AppEnv>, name: "TELEGRAM_BOT_TOKEN" | "SLACK_BOT_TOKEN"): Record<string, string> {
  const origin = secretOrigins(deploymentConfig(c.get("config"), c.get("configSource").source))[name];
  return origin ? { tokenOrigin: origin } : {};
}

/**
 * The values of an inbound secret a request may be verified with: the current one, and the one it replaced while
 * `channels.secretRotationOverlapSeconds` lasts (a sender that has not switched yet keeps working).
 */
export function inboundSecrets(
  c: Context<AppEnv>,
  name: "TELEGRAM_WEBHOOK_SECRET" | "SLACK_SIGNING_SECRET" | "STANDARD_WEBHOOK_SECRET" | "DISCORD_PUBLIC_KEY",
): string[] {
  return acceptedSecrets(c.env, name, Date.now(), c.get("config").channels.secretRotationOverlapSeconds);
}

/** Whether any of `secrets` verifies the request (each check is itself constant-time). */
export async function anyVerifies(secrets: string[], verify: (secret: string) => Promise<boolean>): Promise<boolean> {
  for (const secret of secrets) if (await verify(secret)) return true;
  return false;
}

/** The refusal of every request that could not be verified (S3 envelope, 401). */
export const unauthorized = (channel: Channel) => new GatewayError("auth.unauthorized", `the ${channel} webhook could not be verified`);

/**
 * The raw body of a Slack request (Events API or interactivity) whose v0 signature one of the accepted signing
 * secrets verifies, within the timestamp window; 401 otherwise.
 */
export async function verifiedSlackBody(c: Context<AppEnv>): Promise<string> {
  const raw = await c.req.text();
  const headers = { timestamp: c.req.header("X-Slack-Request-Timestamp") ?? null, signature: c.req.header("X-Slack-Signature") ?? null };
  const now = Math.floor(Date.now() / 1000);
  const verified = await anyVerifies(
    inboundSecrets(c, "SLACK_SIGNING_SECRET"),
    async (s) => (await verifySlackSignature(s, headers, raw, now)).ok,
  );
  if (!verified) throw unauthorized("slack");
  return raw;
}

/** The agent of the route, if the channel is enabled and the agent exists. */
export function agentFor(c: Context<AppEnv>, channel: Channel): string {
  const agentId = c.req.param("agent_id") ?? "";
  const config = c.get("config");
  if (!config.channels[channel].enabled) throw new GatewayError("resource.not_found", `the ${channel} channel is not enabled`);
  if (!Object.hasOwn(config.agents, agentId)) throw new GatewayError("resource.not_found", `unknown agent "${agentId}"`);
  return agentId;
}

/** Queues a channel message in its session (deduplicated by `dispatchKey`); returns whether it was new. */
export async function queue(
  c: Context<AppEnv>,
  o: { agentId: string; channel: Channel; key: string; caller: string; message: string; dispatchKey: string; reply: ReplyTarget | null },
): Promise<{ runId: string; duplicate: boolean }> {
  await providerReady(c);
  const { queued } = await submitTurn(submitContext(c), {
    agentId: o.agentId,
    session: sessionKeyOrThrow(o.key),
    message: o.message,
    source: o.channel,
    channel: o.channel,
    // Per-caller limits count against the message's sender (issue 20 §4, src/runs/caller.ts).
    callerKey: o.caller,
    dispatchKey: o.dispatchKey,
    ...(o.reply ? { reply: o.reply } : {}),
  });
  c.get("logger").log("info", "channel.message", {
    channel: o.channel,
    agent_id: o.agentId,
    run_id: queued.runId,
    duplicate: queued.duplicate === true,
  });
  return { runId: queued.runId, duplicate: queued.duplicate === true };
}

const json = (schema: z.ZodType) => ({ "application/json": { schema } });

/**
 * A webhook route's documentation. The body is not validated by a schema: it must be verified as the exact bytes
 * the platform signed before it is parsed, so each handler reads the raw text itself.
 */
export function webhookRoute(channel: Channel, summary: string, accepted: { status: 200 | 202; schema: z.ZodType }) {
  return createRoute({
    method: "post",
    path: `/${channel}/{agent_id}`,
    summary,
    request: { params: z.object({ agent_id: z.string() }) },
    responses: {
      [accepted.status]: { description: "Accepted (or acknowledged and ignored)", content: json(accepted.schema) },
      400: { description: "A verified but malformed payload", content: json(ErrorEnvelope) },
      401: { description: "Not verified (bad, stale or missing signature, or a missing secret)", content: json(ErrorEnvelope) },
      404: { description: "Channel not enabled, or unknown agent", content: json(ErrorEnvelope) },
    },
  });
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
