/**
 * API keys as records, the admin side (issue 25 §1, D-077; the check is src/keys/lookup.ts):
 *   POST   /api/admin/keys                   creates a key → 201 with the key, shown this once
 *   GET    /api/admin/keys                   the records, newest first, paged; never a secret or a hash
 *   POST   /api/admin/keys/{key_id}/rotate   a new secret → 200 with the new key, shown this once; the old one stops
 *                                            working (no overlap)
 *   PATCH  /api/admin/keys/{key_id}          changes its label, agents, expiry or limits → 200 with the record
 *   DELETE /api/admin/keys/{key_id}          revokes the key → 200 with the record
 * Each change is audited in the gateway's own stream (`api_key.created`, `.rotated`, `.updated`, `.revoked`) with
 * the key id, never the key.
 *
 * Issue 33 (D-087): a key acting as a caller GATEWAY_API_TOKENS also names would merge the two into one tenant
 * (sessions, runs, budgets and limits are keyed by the caller id). Creating or patching such a key is 409 unless the
 * admin says `share_caller: true` (moving that caller to key records), which the record shows and the audit keeps.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { GATEWAY_AUDIT_AGENT } from "../../config/schema";
import { GatewayError } from "../../errors";
import { KEY_ID, mintSecret, newKeyId } from "../../keys/format";
import { forgetKey, KEY_PROPAGATION_MS } from "../../keys/lookup";
import { findKey, insertKey, type KeyChanges, type KeyRecord, listKeys, revokeKey, rotateKey, updateKey } from "../../keys/store";
import { AGENT_ID } from "../../sessions/keys";
import { envCallers } from "../middleware/auth";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { invalidListQuery, keyset, NextCursor, pageQuery } from "./paging";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const sharedCallerConflict = {
  description: "caller_id is a caller of GATEWAY_API_TOKENS and share_caller is not true",
  content: json(ErrorEnvelope),
};

const Limits = z
  .strictObject({
    requestsPerMinute: z.int().min(1).max(1_000_000).optional().openapi({ description: "Requests per minute, exact (a D1 counter)" }),
    tokensPerDay: z
      .int()
      .min(1)
      .optional()
      .openapi({ description: "Provider tokens per UTC day over every agent, reserved before each model call" }),
  })
  .openapi("ApiKeyLimits");

const CreateKey = z
  .strictObject({
    caller_id: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/, "1-64 letters, digits, _ . -")
      .openapi({ description: "The caller the key acts as: its runs, limits and budgets count against `api:<caller_id>`" }),
    label: z.string().min(1).max(200),
    agents: z
      .union([z.literal("all"), z.array(z.string().regex(AGENT_ID, "an agent id")).min(1).max(200)])
      .openapi({ description: '"all", or the agent ids the key may use (each must be configured)' }),
    expires_at: z.iso
      .datetime({ offset: true })
      .optional()
      .openapi({ description: "When the key stops working (ISO 8601, in the future)" }),
    limits: Limits.optional(),
    share_caller: z
      .boolean()
      .optional()
      .openapi({
        description:
          "true: `caller_id` may be a caller of GATEWAY_API_TOKENS, and the key shares its runs, conversations, budgets and " +
          "limits on purpose (moving that caller to key records); without it such a caller_id is 409",
      }),
  })
  .openapi("ApiKeyCreate");

const UpdateKey = z
  .strictObject({
    label: CreateKey.shape.label.optional(),
    agents: CreateKey.shape.agents.optional(),
    expires_at: z.iso
      .datetime({ offset: true })
      .nullable()
      .optional()
      .openapi({ description: "A new expiry in the future, or null for none" }),
    limits: Limits.optional().openapi({ description: "Replaces the key's limits (`{}` removes them)" }),
    share_caller: z.boolean().optional().openapi({
      description: "Shares the caller with GATEWAY_API_TOKENS on purpose, or stops (409 while an env token names the caller)",
    }),
  })
  .openapi("ApiKeyUpdate");

const KeyView = z
  .object({
    key_id: z.string(),
    caller_id: z.string(),
    label: z.string(),
    agents: z.union([z.literal("all"), z.array(z.string())]),
    prefix: z.string().openapi({ description: "`sgw_<key_id>_` and the secret's first 4 characters, to tell keys apart" }),
    created_at: z.string(),
    rotated_at: z.string().nullable(),
    last_used_at: z.string().nullable().openapi({ description: "Updated at most once a minute" }),
    expires_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
    limits: Limits,
    share_caller: z
      .literal(true)
      .optional()
      .openapi({ description: "Present (true) only on a key that shares its caller with GATEWAY_API_TOKENS on purpose" }),
  })
  .openapi("ApiKey");

const KeyWithSecret = KeyView.extend({
  key: z.string().openapi({ description: "`sgw_<key_id>_<secret>`: shown this once, never again (only a salted hash is stored)" }),
}).openapi("ApiKeyCreated");

const KeyIdParam = z.object({ key_id: z.string().regex(KEY_ID, "a key id (16 hex digits)") });

const createRouteDef = createRoute({
  method: "post",
  path: "/keys",
  summary: "Create an API key record (the key is shown once)",
  description:
    "The key (`sgw_<key_id>_<secret>`) is in this answer only: store it now. It acts as `caller_id` on /v1 and the OpenAI routes, " +
    "for the listed agents only, until `expires_at` or until revoked. Audited as `api_key.created` (without the key).",
  request: { body: { required: true, content: { "application/json": { schema: CreateKey } } } },
  responses: {
    201: { description: "Created: the key, shown once", content: json(KeyWithSecret) },
    400: { description: "Invalid body: an unknown field or agent, an expiry not in the future", content: json(ErrorEnvelope) },
    401: unauthorized,
    409: sharedCallerConflict,
  },
});

const listRouteDef = createRoute({
  method: "get",
  path: "/keys",
  summary: "List API key records, newest first (never a secret)",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `key_id`, descending.",
  request: { query: z.object({ ...pageQuery() }) },
  responses: {
    200: { description: "Key records, newest first", content: json(z.object({ keys: z.array(KeyView), next_cursor: NextCursor })) },
    400: invalidListQuery,
    401: unauthorized,
  },
});

const rotateRouteDef = createRoute({
  method: "post",
  path: "/keys/{key_id}/rotate",
  summary: "Rotate an API key: a new secret, shown once; the old one stops working",
  description:
    `No overlap: the old secret is refused at once on this isolate and within ${KEY_PROPAGATION_MS / 1000} s on every other. ` +
    "A revoked key cannot be rotated (404). Audited as `api_key.rotated` (without the key).",
  request: { params: KeyIdParam },
  responses: {
    200: { description: "Rotated: the new key, shown once", content: json(KeyWithSecret) },
    400: { description: "Not a key id", content: json(ErrorEnvelope) },
    401: unauthorized,
    404: { description: "No such key, or it was revoked", content: json(ErrorEnvelope) },
  },
});

const updateRouteDef = createRoute({
  method: "patch",
  path: "/keys/{key_id}",
  summary: "Change an API key's label, agents, expiry, limits or caller sharing",
  description:
    `Applied at once on this isolate and within ${KEY_PROPAGATION_MS / 1000} s on every other. The caller and the secret ` +
    "never change (rotate for a new secret). A revoked key cannot be changed (404). Audited as `api_key.updated`.",
  request: { params: KeyIdParam, body: { required: true, content: { "application/json": { schema: UpdateKey } } } },
  responses: {
    200: { description: "Changed", content: json(KeyView) },
    400: {
      description: "Not a key id; an unknown field or agent, an expiry not in the future, an empty body",
      content: json(ErrorEnvelope),
    },
    401: unauthorized,
    404: { description: "No such key, or it was revoked", content: json(ErrorEnvelope) },
    409: sharedCallerConflict,
  },
});

const revokeRouteDef = createRoute({
  method: "delete",
  path: "/keys/{key_id}",
  summary: "Revoke an API key",
  description:
    `Refused (401) at once on this isolate and within ${KEY_PROPAGATION_MS / 1000} s on every other. Revoking again keeps the ` +
    "first `revoked_at`. The record stays listed. Audited once as `api_key.revoked`.",
  request: { params: KeyIdParam },
  responses: {
    200: { description: "Revoked", content: json(KeyView) },
    400: { description: "Not a key id", content: json(ErrorEnvelope) },
    401: unauthorized,
    404: { description: "No such key", content: json(ErrorEnvelope) },
  },
});

type KeyViewBody = z.infer<typeof KeyView>;

/** A record as the API shows it (`agents: "all"` for every agent; `share_caller` only where it is true). */
function view(r: KeyRecord): KeyViewBody {
  const { share_caller, ...rest } = r;
  return { ...rest, agents: r.agents ?? "all", ...(share_caller ? { share_caller: true as const } : {}) };
}

/** What an audit event says about a key: never the key, its secret or its prefix. */
function audited(r: KeyRecord): Record<string, unknown> {
  return {
    key_id: r.key_id,
    caller_id: r.caller_id,
    label: r.label,
    agents: r.agents ?? "all",
    expires_at: r.expires_at,
    limits: r.limits,
    share_caller: r.share_caller,
  };
}

/** An admin change in the gateway's own audit stream (agent `gateway`, its main session). */
async function auditGateway(c: Context<AppEnv>, eventType: string, payload: Record<string, unknown>): Promise<void> {
  const sessionKey = `agent:${GATEWAY_AUDIT_AGENT}:main`;
  await c.env.SESSIONS.getByName(sessionKey).recordAuditEvent({ sessionKey, agentId: GATEWAY_AUDIT_AGENT }, eventType, "admin", payload);
}

/** The body's agents, each configured (400 naming the first that is not); null for "all". */
function configuredAgents(c: Context<AppEnv>, agents: "all" | string[]): string[] | null {
  if (agents === "all") return null;
  const configured = c.get("config").agents;
  for (const [i, id] of agents.entries())
    if (!Object.hasOwn(configured, id)) throw new GatewayError("invalid.request", `agents[${i}]: unknown agent "${id}"`);
  return [...new Set(agents)];
}

/** The expiry as stored (ISO 8601 UTC); 400 unless it is in the future. */
function futureExpiry(expiresAt: string | undefined, now: Date): string | null {
  if (expiresAt === undefined) return null;
  const at = new Date(expiresAt);
  if (at.getTime() <= now.getTime()) throw new GatewayError("invalid.request", "expires_at: must be in the future");
  return at.toISOString();
}

/** D-087: 409 when GATEWAY_API_TOKENS names `callerId` and the key would not share it on purpose. */
async function refuseSharedCaller(c: Context<AppEnv>, callerId: string, share: boolean): Promise<void> {
  if (share || !(await envCallers(c.env, c.get("logger"))).has(callerId)) return;
  throw new GatewayError(
    "conflict",
    `caller_id: "${callerId}" is a caller of GATEWAY_API_TOKENS: a key acting as it would share that caller's runs, ` +
      "conversations, budgets and limits; send share_caller: true to share them on purpose (moving the caller to key " +
      "records), or choose another caller_id",
  );
}

/** The same check for a PATCH of `keyId`: its stored sharing unless the body changes it (an unknown key is the route's 404). */
async function refuseSharedCallerOnPatch(c: Context<AppEnv>, keyId: string, share: boolean | undefined): Promise<void> {
  const current = await findKey(c.env.DB, keyId);
  if (current && current.revoked_at === null) await refuseSharedCaller(c, current.caller_id, share ?? current.share_caller);
}

const keyPages = keyset<KeyRecord, [string, string]>("keys", ["string", "string"], (r) => [r.created_at, r.key_id]);

/** The API key routes (mounted under /api/admin). */
export function adminKeyRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(createRouteDef, async (c) => {
    const body = c.req.valid("json");
    const now = new Date();
    const agents = configuredAgents(c, body.agents);
    const expiresAt = futureExpiry(body.expires_at, now);
    await refuseSharedCaller(c, body.caller_id, body.share_caller === true);
    const keyId = newKeyId();
    const { key, stored } = await mintSecret(keyId);
    const record = await insertKey(c.env.DB, {
      keyId,
      callerId: body.caller_id,
      label: body.label,
      agents,
      secret: stored,
      now,
      expiresAt,
      limits: body.limits ?? {},
      shareCaller: body.share_caller === true,
    });
    await auditGateway(c, "api_key.created", audited(record));
    return c.json({ ...view(record), key }, 201);
  });

  app.openapi(listRouteDef, async (c) => {
    const page = await keyPages.serve(c.req.valid("query"), (after, limit) => listKeys(c.env.DB, { limit, ...(after ? { after } : {}) }));
    return c.json({ keys: page.items.map(view), next_cursor: page.next_cursor }, 200);
  });

  app.openapi(rotateRouteDef, async (c) => {
    const { key_id } = c.req.valid("param");
    const { key, stored } = await mintSecret(key_id);
    const record = await rotateKey(c.env.DB, key_id, stored, new Date());
    if (!record) throw new GatewayError("resource.not_found", `no live key ${key_id} (unknown or revoked)`);
    forgetKey(key_id);
    await auditGateway(c, "api_key.rotated", audited(record));
    return c.json({ ...view(record), key }, 200);
  });

  app.openapi(updateRouteDef, async (c) => {
    const { key_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const changes: KeyChanges = {};
    if (body.label !== undefined) changes.label = body.label;
    if (body.agents !== undefined) changes.agents = configuredAgents(c, body.agents);
    if (body.expires_at !== undefined) changes.expiresAt = body.expires_at === null ? null : futureExpiry(body.expires_at, new Date());
    if (body.limits !== undefined) changes.limits = body.limits;
    if (body.share_caller !== undefined) changes.shareCaller = body.share_caller;
    if (Object.keys(changes).length === 0)
      throw new GatewayError("invalid.request", "nothing to change: send label, agents, expires_at or limits");
    await refuseSharedCallerOnPatch(c, key_id, body.share_caller);
    const record = await updateKey(c.env.DB, key_id, changes);
    if (!record) throw new GatewayError("resource.not_found", `no live key ${key_id} (unknown or revoked)`);
    forgetKey(key_id);
    await auditGateway(c, "api_key.updated", audited(record));
    return c.json(view(record), 200);
  });

  app.openapi(revokeRouteDef, async (c) => {
    const { key_id } = c.req.valid("param");
    const revoked = await revokeKey(c.env.DB, key_id, new Date());
    if (!revoked) throw new GatewayError("resource.not_found", `no key ${key_id}`);
    forgetKey(key_id);
    const { fresh, ...record } = revoked;
    if (fresh) await auditGateway(c, "api_key.revoked", { ...audited(record), revoked_at: record.revoked_at });
    return c.json(view(record), 200);
  });

  return app;
}
