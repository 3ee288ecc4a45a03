/**
 * Environment requests (S5 `request_env_variables`; issue 21 §2), for admins:
 *   GET  /api/admin/env-requests                        the requests, newest first (paged; agent_id, session_id, status)
 *   POST /api/admin/env-requests/{request_id}/values    {values: [{key, value, persist?}], save_to_configuration?}
 *                                                       → 200 the request, now `fulfilled` (once: a second submit is 409)
 * Values are stored encrypted like admin secrets (src/sandbox/env-requests.ts) and are never returned, logged or
 * audited — only key names are. The session's sandbox gets them from the sandbox bootstrap's `env`; the model
 * is told the key names in L6 of the session's later runs (docs/tools.md "Environment requests", D-045).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GATEWAY_AUDIT_AGENT } from "../../config/schema";
import { GatewayError } from "../../errors";
import { type EnvRequestRecord, fulfilEnvRequest, getEnvRequest, listEnvRequests } from "../../sandbox/env-requests";
import { MAX_SECRET_VALUE_CHARS, secretsKey } from "../../security/secrets-store";
import { requireJsonBody } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { invalidListQuery, keyset, NextCursor, pageQuery } from "./paging";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });

const EnvRequest = z
  .object({
    request_id: z.string(),
    agent_id: z.string(),
    session_id: z.string(),
    run_id: z.string().nullable(),
    keys: z.array(
      z.object({
        key: z.string(),
        type: z.enum(["env", "secret"]).optional(),
        required: z.boolean().optional(),
        description: z.string().optional(),
        suggestions: z.array(z.string()).optional(),
      }),
    ),
    status: z.enum(["open", "fulfilled"]),
    created_at: z.string(),
    fulfilled_at: z.string().nullable(),
  })
  .openapi("EnvRequest");

const SubmitValues = z
  .strictObject({
    values: z
      .array(
        z.strictObject({
          key: z.string().min(1).max(128),
          value: z.string().max(MAX_SECRET_VALUE_CHARS),
          persist: z
            .boolean()
            .optional()
            .openapi({ description: "S5 per-key persist: keep the value for every session of the agent (default: save_to_configuration)" }),
        }),
      )
      .min(1)
      .max(50),
    save_to_configuration: z
      .boolean()
      .default(false)
      .openapi({ description: "S5 fallback for keys without `persist` (default false: this session only)" }),
  })
  .openapi("EnvRequestValues");

const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const forbidden = { description: "Not the admin token", content: json(ErrorEnvelope) };

const listRoute = createRoute({
  method: "get",
  path: "/env-requests",
  summary: "Environment requests (request_env_variables), newest first — key names only",
  request: {
    query: z.object({
      ...pageQuery(),
      agent_id: z.string().optional(),
      session_id: z.string().optional(),
      status: z.enum(["open", "fulfilled"]).optional(),
    }),
  },
  responses: {
    200: { description: "Requests", content: json(z.object({ env_requests: z.array(EnvRequest), next_cursor: NextCursor })) },
    400: invalidListQuery,
    401: unauthorized,
    403: forbidden,
  },
});

const submitRoute = createRoute({
  method: "post",
  path: "/env-requests/{request_id}/values",
  summary: "Submit the values of an open environment request (one-way: values are never returned)",
  description:
    "Every requested key not marked `required: false` must be given, and only requested keys. The values are stored encrypted " +
    "(SECRETS_ENCRYPTION_KEY) for the session, or for every session of the agent with `persist`; the request becomes `fulfilled`. " +
    "The session's sandbox receives them in the sandbox bootstrap's `env`; its later runs are told the key names only.",
  middleware: [requireJsonBody] as const,
  request: {
    params: z.object({ request_id: z.string() }),
    body: { required: true, content: { "application/json": { schema: SubmitValues } } },
  },
  responses: {
    200: { description: "The request, now fulfilled", content: json(EnvRequest) },
    400: { description: "Invalid body, a missing required key or a key that was not requested", content: json(ErrorEnvelope) },
    401: unauthorized,
    403: forbidden,
    404: { description: "No such request", content: json(ErrorEnvelope) },
    409: { description: "The request was already fulfilled", content: json(ErrorEnvelope) },
    503: { description: "SECRETS_ENCRYPTION_KEY is not set", content: json(ErrorEnvelope) },
  },
});

const pages = keyset<EnvRequestRecord, [string, string]>("env_requests", ["string", "string"], (r) => [r.created_at, r.request_id]);

/** 400 naming the requested keys not given and the given keys not requested, if any. */
function checkKeys(req: EnvRequestRecord, given: string[]): void {
  const requested = new Set(req.keys.map((k) => k.key));
  const missing = req.keys.filter((k) => k.required !== false && !given.includes(k.key)).map((k) => k.key);
  if (missing.length > 0) throw new GatewayError("invalid.request", `missing values for requested keys: ${missing.join(", ")}`);
  const extra = given.filter((k) => !requested.has(k));
  if (extra.length > 0) throw new GatewayError("invalid.request", `keys not in request ${req.request_id}: ${extra.join(", ")}`);
  const dup = given.filter((k, i) => given.indexOf(k) !== i);
  if (dup.length > 0) throw new GatewayError("invalid.request", `keys given twice: ${[...new Set(dup)].join(", ")}`);
}

/** The env-request routes. */
export function adminEnvRequestRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(listRoute, async (c) => {
    const q = c.req.valid("query");
    const { items, next_cursor } = await pages.serve(q, (after, limit) =>
      listEnvRequests(c.env.DB, { agentId: q.agent_id, sessionId: q.session_id, status: q.status, after, limit }),
    );
    return c.json({ env_requests: items, next_cursor }, 200);
  });

  app.openapi(submitRoute, async (c) => {
    const { request_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const req = await getEnvRequest(c.env.DB, request_id);
    if (!req) throw new GatewayError("resource.not_found", `no env request ${request_id}`);
    if (req.status !== "open") throw new GatewayError("conflict", `env request ${request_id} is already ${req.status}`);
    checkKeys(
      req,
      body.values.map((v) => v.key),
    );
    const key = await secretsKey(c.env.SECRETS_ENCRYPTION_KEY);
    if (!key)
      throw new GatewayError("secrets.unavailable", "storing values needs SECRETS_ENCRYPTION_KEY (base64 of 32 bytes), which is not set");
    const typeOf = new Map(req.keys.map((k) => [k.key, k.type ?? "env"]));
    const values = body.values.map((v) => ({
      key: v.key,
      type: typeOf.get(v.key) ?? "env",
      value: v.value,
      persist: v.persist ?? body.save_to_configuration,
    }));
    if (!(await fulfilEnvRequest(c.env.DB, key, req, values, new Date())))
      throw new GatewayError("conflict", `env request ${request_id} is already fulfilled`);
    // Names only: a value never reaches a log line or the audit stream.
    const keys = values.map((v) => v.key);
    c.get("logger").log("info", "admin.env_request", { request_id, action: "fulfilled", keys });
    const sessionKey = `agent:${GATEWAY_AUDIT_AGENT}:main`;
    const persisted = values.filter((v) => v.persist).map((v) => v.key);
    await c.env.SESSIONS.getByName(sessionKey).recordAuditEvent(
      { sessionKey, agentId: GATEWAY_AUDIT_AGENT },
      "env_request.fulfilled",
      "admin",
      {
        request_id,
        session_id: req.session_id,
        keys,
        persisted,
      },
    );
    return c.json((await getEnvRequest(c.env.DB, request_id)) as EnvRequestRecord, 200);
  });
  return app;
}
