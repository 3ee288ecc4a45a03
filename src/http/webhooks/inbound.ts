/**
 * What every chat channel's inbound webhook route shares (telegram, slack and standard in ./channels.ts, Discord in
 * ./discord.ts, the chat approvals' presses in ./chat-approvals.ts): the secrets a request may be verified with, the
 * refusal when it is not, the route's agent, queuing the verified message in its session, and a route's
 * documentation. Apart from the routes, so the routes import it and it imports none of them.
 */

import { createRoute, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { ReplyTarget } from "../../channels/replies";
import { verifySlackSignature } from "../../channels/slack";
import { GatewayError } from "../../errors";
import { submitTurn } from "../../runs/submit";
import { acceptedSecrets } from "../../security/stored-secrets";
import { type AppEnv, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { providerReady, sessionKeyOrThrow, submitContext } from "../turns";

/** The chat channels with a webhook here (Discord's route is in ./discord.ts). */
export type Channel = "telegram" | "slack" | "standard" | "discord";

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
export function verifiedSlackBody(c: Context<AppEnv>): Promise<string> {
  const headers = { timestamp: c.req.header("X-Slack-Request-Timestamp") ?? null, signature: c.req.header("X-Slack-Signature") ?? null };
  return signedBody(c, "slack", "SLACK_SIGNING_SECRET", async (s, raw, now) => (await verifySlackSignature(s, headers, raw, now)).ok);
}

/**
 * The raw body of a request signed over its exact bytes (Slack, Discord), when one of the accepted values of `secret`
 * verifies it at `now` (seconds); 401 for `channel` otherwise.
 */
export async function signedBody(
  c: Context<AppEnv>,
  channel: Channel,
  secret: "SLACK_SIGNING_SECRET" | "DISCORD_PUBLIC_KEY",
  verify: (secret: string, raw: string, now: number) => Promise<boolean>,
): Promise<string> {
  const raw = await c.req.text();
  const now = Math.floor(Date.now() / 1000);
  if (!(await anyVerifies(inboundSecrets(c, secret), (s) => verify(s, raw, now)))) throw unauthorized(channel);
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
