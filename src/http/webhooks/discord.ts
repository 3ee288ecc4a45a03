/**
 * Discord's Interactions endpoint (issue 24 §4): POST /webhooks/discord/{agent_id}.
 *
 * Every request is verified first (Ed25519 over `X-Signature-Timestamp` + the raw body with DISCORD_PUBLIC_KEY,
 * ±5 minutes); anything that does not verify — no key configured included — is 401, never a throw. A PING is
 * answered PONG. An application command (`/ask message:<text>`) or a message component becomes a turn in its
 * session, deduplicated by the interaction id (`discord:<id>`: a redelivery is the same run), and is acknowledged at
 * once with a deferred response (type 5), so Discord's 3-second limit holds whatever the model does; the final
 * answer is sent as follow-ups through the interaction webhook by the session's reply outbox
 * (src/channels/replies.ts), split at 2,000 characters. The interaction token is a credential: it goes into the
 * reply target and nowhere else (not the log, not the run's events or transcript).
 *
 * Session keys: the application id is the account (as Telegram's bot id is), a guild channel is `group:{channel}`,
 * a DM `dm:{user}`: `agent:{a}:discord:{application_id}:group:{channel_id}` / `…:dm:{user_id}`.
 */
import { type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { parseDiscordInteraction, SNOWFLAKE, verifyDiscordSignature } from "../../channels/discord";
import { GatewayError } from "../../errors";
import { channelCallerKey } from "../../runs/caller";
import { deploymentConfig, urlOrigin } from "../../security/secret-origins";
import type { AppEnv } from "../router";
import { agentFor, queue, signedBody, unauthorized, webhookRoute } from "./inbound";
import { senderAllowed } from "./sender-gate";

/** Interaction response types (Discord): PONG, CHANNEL_MESSAGE_WITH_SOURCE, DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE. */
const PONG = 1;
const MESSAGE = 4;
const DEFERRED = 5;
/** Discord's flag for a message only the invoking user sees. */
const EPHEMERAL = 64;

/**
 * Discord needs an answer to every interaction; a refused sender's is this (ephemeral), except the one per window
 * that carries a pairing code, and, inside that window, the reminder that the code is pending (D-076).
 */
const NOT_ALLOWED = "This agent does not take messages from you.";

const InteractionResponse = z.object({
  type: z.int(),
  data: z.object({ content: z.string(), flags: z.int() }).optional(),
});

/** Adds the Discord Interactions route to the channel webhooks' router. */
export function discordWebhookRoute(app: OpenAPIHono<AppEnv>): void {
  app.openapi(
    webhookRoute("discord", "Discord Interactions endpoint (X-Signature-Ed25519 over X-Signature-Timestamp + body)", {
      status: 200,
      schema: InteractionResponse,
    }),
    (async (c: Context<AppEnv>) => {
      const agentId = agentFor(c, "discord");
      const headers = { signature: c.req.header("X-Signature-Ed25519") ?? null, timestamp: c.req.header("X-Signature-Timestamp") ?? null };
      const raw = await signedBody(
        c,
        "discord",
        "DISCORD_PUBLIC_KEY",
        async (key, body, now) => (await verifyDiscordSignature(key, headers, body, now)).ok,
      );
      const applicationId = c.env.DISCORD_APPLICATION_ID ?? "";
      if (!SNOWFLAKE.test(applicationId)) throw unauthorized("discord"); // nothing could be answered: fail closed
      let body: unknown = null;
      try {
        body = JSON.parse(raw);
      } catch {
        throw new GatewayError("invalid.request", "the Discord payload is not JSON");
      }
      const interaction = parseDiscordInteraction(body);
      // Signed by our key but for another application: not ours to answer.
      if (interaction.applicationId !== null && interaction.applicationId !== applicationId) throw unauthorized("discord");
      if (interaction.kind === "ping") return c.json({ type: PONG }, 200);
      if (interaction.kind === "ignored") {
        // Every interaction needs an answer, or Discord shows the user a failure.
        return c.json({ type: MESSAGE, data: { content: "Use /ask message:<your question>.", flags: EPHEMERAL } }, 200);
      }
      // The interaction's answer carries the policy's text itself (only the invoking user sees it): nothing is sent.
      let said: string | null = null;
      const sender = { agentId, channel: "discord" as const, sender: interaction.userId, chatId: interaction.channelId };
      const say = (text: string) => {
        said = text;
      };
      const allowed = await senderAllowed(
        c,
        sender,
        async (text) => {
          say(text);
          return true;
        },
        say,
      );
      if (!allowed) return c.json({ type: MESSAGE, data: { content: said ?? NOT_ALLOWED, flags: EPHEMERAL } }, 200);
      const scope = interaction.guildId ? `group:${interaction.channelId}` : `dm:${interaction.userId}`;
      await queue(c, {
        agentId,
        channel: "discord",
        key: `agent:${agentId}:discord:${applicationId}:${scope}`,
        caller: channelCallerKey("discord", interaction.guildId ?? applicationId, interaction.userId),
        message: interaction.text,
        dispatchKey: `discord:${interaction.id}`,
        reply: {
          channel: "discord",
          apiBaseUrl: c.get("config").channels.discord.apiBaseUrl,
          applicationId,
          token: interaction.token,
          // An admin-posted config cannot send interaction tokens elsewhere (issue 20 §5): the deployment's origin.
          tokenOrigin: urlOrigin(deploymentConfig(c.get("config"), c.get("configSource").source).channels.discord.apiBaseUrl),
        },
      });
      return c.json({ type: DEFERRED }, 200);
    }) as never,
  );
}
