/**
 * Channel sender policies, the admin side (issue 24 §3, D-074; the check is src/channels/sender-policy.ts):
 *   GET  /api/admin/channels/pairings                  pending, unexpired pairing codes (oldest first)
 *   POST /api/admin/channels/pairings/{code}/approve   approves one code once: its sender may talk to that agent on
 *                                                      that channel → 200; 404 unknown, 409 already used, 410 expired
 *   GET  /api/admin/channels/senders                   refused (last 30 days, D-083) and paired senders, with how many messages were refused
 * An approval is audited in the gateway's own stream (`channel.pairing.approved`).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { PAIRING_CODE } from "../../channels/sender-policy";
import { approvePairing, listSenders, pendingPairings } from "../../channels/sender-store";
import { GATEWAY_AUDIT_AGENT } from "../../config/schema";
import { GatewayError } from "../../errors";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const Filter = z.object({
  agent_id: z.string().max(64).optional().openapi({ description: "Only this agent's" }),
  limit: z.coerce.number().int().min(1).max(500).default(100).openapi({ description: "At most this many (1-500, default 100)" }),
});

const Pairing = z
  .object({
    code: z.string(),
    agent_id: z.string(),
    channel: z.enum(["telegram", "slack", "discord", "standard"]),
    sender: z.string().openapi({ description: "The platform's user id of the sender who asked" }),
    created_at: z.string(),
    expires_at: z.string(),
  })
  .openapi("ChannelPairing");

const listRoute = createRoute({
  method: "get",
  path: "/channels/pairings",
  summary: "Pending pairing codes of channels whose senders policy is `pairing`",
  request: { query: Filter },
  responses: {
    200: { description: "Pending, unexpired codes, oldest first", content: json(z.object({ pairings: z.array(Pairing) })) },
    400: { description: "A bad filter", content: json(ErrorEnvelope) },
    401: unauthorized,
  },
});

const approveRoute = createRoute({
  method: "post",
  path: "/channels/pairings/{code}/approve",
  summary: "Approve a pairing code: its sender may talk to that agent on that channel from the next message on",
  request: {
    params: z.object({ code: z.string().regex(PAIRING_CODE, "a pairing code: 8 characters of A-Z and 2-9 without I, L, O") }),
  },
  responses: {
    200: { description: "Approved", content: json(Pairing.extend({ approved_at: z.string() }).openapi("ChannelPairingApproved")) },
    400: { description: "Not a pairing code", content: json(ErrorEnvelope) },
    401: unauthorized,
    404: { description: "No such code", content: json(ErrorEnvelope) },
    409: { description: "The code was already used", content: json(ErrorEnvelope) },
    410: { description: "The code expired", content: json(ErrorEnvelope) },
  },
});

const Sender = z
  .object({
    agent_id: z.string(),
    channel: z.string(),
    sender: z.string(),
    refused: z.int().openapi({ description: "Messages from this sender acknowledged and dropped (never run)" }),
    last_refused_at: z.string().nullable(),
    paired_at: z.string().nullable().openapi({ description: "When an admin approved this sender's pairing code" }),
  })
  .openapi("ChannelSender");

const sendersRoute = createRoute({
  method: "get",
  path: "/channels/senders",
  summary: "Senders a channel's senders policy refused (with a count) or an admin paired",
  description:
    "Senders refused in the last 30 days — a refused sender's row is pruned 30 days after its last refusal (D-083), so its count restarts if it writes again — and every paired sender (never pruned).",
  request: { query: Filter },
  responses: {
    200: { description: "Most recently refused first", content: json(z.object({ senders: z.array(Sender) })) },
    400: { description: "A bad filter", content: json(ErrorEnvelope) },
    401: unauthorized,
  },
});

/** An admin change in the gateway's own audit stream (agent `gateway`, its main session). */
async function auditGateway(c: Context<AppEnv>, eventType: string, payload: Record<string, unknown>): Promise<void> {
  const sessionKey = `agent:${GATEWAY_AUDIT_AGENT}:main`;
  await c.env.SESSIONS.getByName(sessionKey).recordAuditEvent({ sessionKey, agentId: GATEWAY_AUDIT_AGENT }, eventType, "admin", payload);
}

/** Why a code was not approved: 404 unknown, 409 used, 410 expired. */
function refusal(status: "unknown" | "used" | "expired", code: string): GatewayError {
  if (status === "unknown") return new GatewayError("resource.not_found", `no pairing code ${code}`);
  if (status === "used") return new GatewayError("conflict", `pairing code ${code} was already used`);
  return new GatewayError("gone", `pairing code ${code} expired; the sender gets a new one by writing again`);
}

/** The channel sender routes (mounted under /api/admin). */
export function adminChannelSenderRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(listRoute, async (c) => {
    const { agent_id, limit } = c.req.valid("query");
    return c.json({ pairings: (await pendingPairings(c.env.DB, Date.now(), limit, agent_id)) as z.infer<typeof Pairing>[] }, 200);
  });

  app.openapi(approveRoute, async (c) => {
    const { code } = c.req.valid("param");
    const outcome = await approvePairing(c.env.DB, code, new Date());
    if (outcome.status !== "approved") throw refusal(outcome.status, code);
    const { pairing } = outcome;
    await auditGateway(c, "channel.pairing.approved", {
      code,
      agent_id: pairing.agent_id,
      channel: pairing.channel,
      sender: pairing.sender,
    });
    return c.json(pairing as z.infer<typeof Pairing> & { approved_at: string }, 200);
  });

  app.openapi(sendersRoute, async (c) => {
    const { agent_id, limit } = c.req.valid("query");
    return c.json({ senders: await listSenders(c.env.DB, limit, agent_id) }, 200);
  });

  return app;
}
