/**
 * Where a webhook receiver gets its `v1` secret (issue 33, D-089). Every outbound webhook's `v1` HMAC is made with
 * a key of its own owner and endpoint (src/scheduler/webhook-keys.ts), so the secret is asked for by URL:
 *   GET /v1/webhook-secret?url=…         an API caller: the key its runs' completion webhooks to that URL carry
 *   GET /api/admin/webhook-secret?url=…  the operator: the key job notifications and budget alerts to it carry
 * The URL is checked with the rules `notify.url` is (a URL no webhook may go to has no secret); its query is not
 * part of the endpoint. The answer is `no-store`: it is a credential. `v1a` needs no secret (the public JWKS).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { GatewayError } from "../errors";
import { checkedWebhookUrl } from "../runs/notify-request";
import { endpointSecret, NO_MASTER, type WebhookOwner, webhookEndpoint } from "../scheduler/webhook-keys";
import { requireScope } from "./middleware/auth";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "./router";

const WebhookSecret = z
  .object({
    endpoint: z.string().openapi({ description: "the URL's origin and path: every webhook to it, whatever its query, carries this key" }),
    secret: z.string().openapi({ description: "whsec_ + base64 of the endpoint's key: verify the v1 signature with it" }),
  })
  .openapi("WebhookSecret");

const json = { "application/json": { schema: ErrorEnvelope } };
const errors = {
  400: { description: "url is missing or not a URL a webhook may go to", content: json },
  401: { description: "Missing or invalid token", content: json },
  403: { description: "A token of the other scope", content: json },
  503: { description: "signing.unavailable: SCHEDULER_WEBHOOK_SECRET is not set", content: json },
};

function secretRoute(door: "api" | "admin") {
  const whose = door === "api" ? "your runs' completion webhooks" : "job notifications and budget alerts";
  return createRoute({
    method: "get",
    path: "/webhook-secret",
    summary: `The v1 secret ${whose} to a URL are signed with`,
    ...(door === "api" ? { middleware: [requireScope("api")] as const } : {}),
    request: {
      query: z.object({
        url: z.string().openapi({ description: "the webhook URL (https)", example: "https://example.com/hooks/gateway" }),
      }),
    },
    responses: {
      200: { description: "The endpoint's secret", content: { "application/json": { schema: WebhookSecret } } },
      ...errors,
    },
  });
}

/** Whose key: the operator's on the admin door; on /v1 the calling caller's, never one named in the request. */
function ownerOf(c: Context<AppEnv>, door: "api" | "admin"): WebhookOwner {
  if (door === "admin") return { operator: true };
  const principal = c.get("principal");
  if (principal?.scope !== "api") throw new GatewayError("auth.forbidden", "this route needs an API token");
  return { callerId: principal.callerId };
}

/** The secret route for `door`'s owner: the calling API caller, or the operator. */
export function webhookSecretRoutes(door: "api" | "admin"): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(secretRoute(door), async (c) => {
    const url = checkedWebhookUrl(c.req.valid("query").url, "url");
    const secret = await endpointSecret(c.env, ownerOf(c, door), url);
    if (!secret) throw new GatewayError("signing.unavailable", NO_MASTER);
    c.header("Cache-Control", "no-store");
    return c.json({ endpoint: webhookEndpoint(url), secret }, 200);
  });
  return app;
}
