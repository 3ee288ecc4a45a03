/**
 * Calls from machines that are not API clients, each verified by what the gateway gave or agreed with it rather
 * than by an API token: chat platforms' webhooks (a signature or secret header per platform) and a sandbox's tool
 * callbacks (the token minted for that one session). Both check their credential per route, since it depends on
 * the route's own parameters (the channel, the session).
 */
import type { Door } from "../callers";

/** The chat channels' webhooks, signed by their platform. */
export const CHANNEL_WEBHOOK_DOOR: Door = { prefix: "/webhooks", credential: "signature" };

/** A sandbox's tool callbacks, at S5's two paths (`/v1/sessions/…/tools/…` and `/proliferate/…`). */
export const TOOL_CALLBACK_DOOR: Door = { prefix: "/", credential: "sandbox" };

import type { OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../router";
import { webhookRoutes } from "./channels";
import { slackInteractivityRoute } from "./chat-approvals";
import { discordWebhookRoute } from "./discord";

/** The chat channels' webhook routes: Telegram, Slack (events, interactivity), Standard Webhooks, and Discord's Interactions endpoint. */
export function channelWebhookRoutes(): OpenAPIHono<AppEnv> {
  const app = webhookRoutes();
  discordWebhookRoute(app);
  slackInteractivityRoute(app);
  return app;
}
export { toolCallbackRoutes } from "./tool-callbacks";
