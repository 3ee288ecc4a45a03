/**
 * Gateway tool callbacks (S5 §Gateway Callback Contract, §6.3; DESIGN §3 "Auth"):
 *   POST /api/admin/sessions/{session_id}/sandbox-token   admin: mints a token bound to that one session
 *   POST /api/admin/sandbox-tokens/{token_id}/revoke     admin: revokes one token (checked on every callback)
 *   POST /v1/sessions/{session_id}/tools/{tool_name}       sandbox: {tool_call_id, args} → {success, result, data?}
 *   POST /proliferate/{session_id}/tools/{tool_name}       the same, at S5's path
 *
 * On the callback routes only a valid sandbox token for that very session is accepted: no token, an api
 * token, the admin token, another session's token or an expired one are all 403 (S5: "reject any
 * non-sandbox caller regardless of bearer token presence"); so is a revoked one. The call runs in the session's Durable
 * Object, once per `(tool, tool_call_id)`, durably (see SessionDO.toolCallback). Tool-level failures are
 * `200 {success:false, result}` with an actionable message; HTTP errors are for the transport: a bad body
 * (400), an unknown or archived session (404, 410), a key reused with other arguments (422).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import { GatewayError } from "../../errors";
import { buildRunSpec } from "../../runs/spec";
import { mintSandboxToken, sandboxSecretUsable, verifySandboxToken } from "../../security/sandbox-token";
import { recordMintedToken, revokeSandboxToken, sandboxTokenRevoked } from "../../security/sandbox-token-store";
import { findSessionKey } from "../../sessions/index-d1";
import { SESSION_ID } from "../../sessions/keys";
import type { ToolCallbackAnswer } from "../../sessions/SessionDO";
import { requireScope } from "../middleware/auth";
import {
  type AppEnv,
  createRouter,
  ErrorEnvelopeSchema as ErrorEnvelope,
  MAX_JSON_DEPTH,
  requireJsonBody,
  withinJsonDepth,
} from "../router";
import { sessionById } from "../session-by-id";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const SessionParam = z.object({ session_id: z.string().regex(SESSION_ID, "a session id (ses_…)") });

/** S5 callback body: the call's idempotency key and the tool's arguments. */
export const CallbackRequest = z
  .strictObject({
    tool_call_id: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[A-Za-z0-9_.:-]+$/, "letters, digits and _ . : - (at most 200)"),
    args: z
      .record(z.string(), z.unknown())
      .refine((args) => withinJsonDepth(args), `nested deeper than ${MAX_JSON_DEPTH} levels`)
      .default({}),
  })
  .openapi("ToolCallbackRequest");

const CallbackResult = z.object({ success: z.boolean(), result: z.string(), data: z.unknown().optional() }).openapi("ToolCallbackResult");

const forbidden = { description: "Not this session's sandbox token", content: json(ErrorEnvelope) };

function callbackRoute(path: string, summary: string) {
  return createRoute({
    method: "post",
    path,
    summary,
    middleware: [requireSandbox(), requireJsonBody] as const,
    request: {
      params: SessionParam.extend({ tool_name: z.string().min(1).max(100) }),
      body: { required: true, content: json(CallbackRequest) },
    },
    responses: {
      200: { description: "The tool's answer (also for tool-level failures: success false)", content: json(CallbackResult) },
      400: { description: "Malformed body", content: json(ErrorEnvelope) },
      403: forbidden,
      404: { description: "No such session", content: json(ErrorEnvelope) },
      410: { description: "The session was archived (/new)", content: json(ErrorEnvelope) },
      422: { description: "tool_call_id reused with different arguments", content: json(ErrorEnvelope) },
    },
  });
}

const mintRoute = createRoute({
  method: "post",
  path: "/api/admin/sessions/{session_id}/sandbox-token",
  summary: "Mint a sandbox token for one session's tool callbacks",
  middleware: [requireScope("admin")] as const,
  request: {
    params: SessionParam,
    body: {
      required: false,
      content: json(z.strictObject({ ttl_seconds: z.int().min(60).max(604_800).optional() }).openapi("SandboxTokenRequest")),
    },
  },
  responses: {
    201: {
      description: "The token (shown once; it is not stored)",
      content: json(
        z.object({ token: z.string(), token_id: z.string(), session_id: z.string(), expires_at: z.string() }).openapi("SandboxToken"),
      ),
    },
    401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
    404: { description: "No such session", content: json(ErrorEnvelope) },
    503: { description: "SANDBOX_TOKEN_SECRET is not set", content: json(ErrorEnvelope) },
  },
});

const TokenId = z.string().regex(/^sbt_[0-9a-f]{24}$/, "a sandbox token id (sbt_ and 24 hex digits)");
const revokeRoute = createRoute({
  method: "post",
  path: "/api/admin/sandbox-tokens/{token_id}/revoke",
  summary: "Revoke one sandbox token by its token_id",
  description:
    "From the next tool callback on, in every isolate, the token is refused (403 auth.forbidden); other tokens of the same session keep working. Revoking again keeps the first revoked_at. Audited as `sandbox_token.revoked`.",
  middleware: [requireScope("admin")] as const,
  request: { params: z.object({ token_id: TokenId }) },
  responses: {
    200: {
      description: "Revoked",
      content: json(
        z
          .object({ token_id: z.string(), session_id: z.string(), expires_at: z.string(), revoked_at: z.string() })
          .openapi("SandboxTokenRevoked"),
      ),
    },
    400: { description: "Not a token id", content: json(ErrorEnvelope) },
    401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
    403: { description: "Not the admin token", content: json(ErrorEnvelope) },
    404: { description: "No token with this id was minted (or it expired more than a day ago)", content: json(ErrorEnvelope) },
  },
});

const notThisSession = (sessionId: string) =>
  new GatewayError("auth.forbidden", `this route accepts only the sandbox token of session ${sessionId}`);

/** Middleware: a valid, unexpired sandbox token for the route's session; anything else is 403. */
export function requireSandbox(): MiddlewareHandler<AppEnv> {
  return async function requireSandbox(c, next) {
    const sessionId = c.req.param("session_id") ?? "";
    const match = /^Bearer ([^\s]+)$/i.exec(c.req.header("Authorization") ?? "");
    const verdict = match?.[1]
      ? await verifySandboxToken(c.env.SANDBOX_TOKEN_SECRET, match[1], sessionId, Math.floor(Date.now() / 1000))
      : null;
    if (!verdict?.ok) throw notThisSession(sessionId);
    if (await sandboxTokenRevoked(c.env.DB, verdict.claims.jti))
      throw new GatewayError("auth.forbidden", `sandbox token ${verdict.claims.jti} was revoked`);
    c.set("principal", { scope: "sandbox", sessionId, tokenId: verdict.claims.jti });
    await next();
  };
}

/**
 * Mints a sandbox token for `sessionId`, records its id in D1 (so it is revocable) and audits
 * `sandbox_token.minted`; 503 without a usable SANDBOX_TOKEN_SECRET, 404 for an unknown session.
 */
export async function mintRecordedSandboxToken(
  env: Env,
  sessionId: string,
  ttlSeconds: number,
): Promise<{ token: string; token_id: string; session_id: string; expires_at: string }> {
  const secret = env.SANDBOX_TOKEN_SECRET;
  if (!sandboxSecretUsable(secret))
    throw new GatewayError(
      "sandbox.unavailable",
      "sandbox tokens need the SANDBOX_TOKEN_SECRET secret (at least 32 characters), which is not set",
    );
  const { stub, sessionKey, agentId } = await sessionById(env, sessionId);
  const { token, claims } = await mintSandboxToken(secret, sessionId, Math.floor(Date.now() / 1000), ttlSeconds);
  const expiresAt = new Date(claims.exp * 1000).toISOString();
  await recordMintedToken(env.DB, { tokenId: claims.jti, sessionId, mintedAt: new Date(), expiresAtSeconds: claims.exp });
  await stub.recordAuditEvent({ sessionKey, agentId }, "sandbox_token.minted", "admin", {
    token_id: claims.jti,
    session_id: sessionId,
    expires_at: expiresAt,
  });
  return { token, token_id: claims.jti, session_id: sessionId, expires_at: expiresAt };
}

/** The routes. */
export function toolCallbackRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(mintRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const body = (await c.req.json().catch(() => ({}))) as { ttl_seconds?: number };
    const ttl = body.ttl_seconds ?? c.get("config").tools.callbacks.sandboxTokenTtlSeconds;
    return c.json(await mintRecordedSandboxToken(c.env, session_id, ttl), 201);
  });

  app.openapi(revokeRoute, async (c) => {
    const { token_id } = c.req.valid("param");
    const revoked = await revokeSandboxToken(c.env.DB, token_id, new Date());
    if (!revoked) throw new GatewayError("resource.not_found", `no sandbox token ${token_id}`);
    const found = revoked.fresh ? await findSessionKey(c.env.DB, revoked.session_id) : null;
    if (found)
      await c.env.SESSIONS.getByName(found.sessionKey).recordAuditEvent(found, "sandbox_token.revoked", "admin", {
        token_id,
        session_id: revoked.session_id,
        revoked_at: revoked.revoked_at,
      });
    const { fresh: _, ...body } = revoked;
    return c.json(body, 200);
  });

  const handler = async (c: Parameters<Parameters<typeof app.openapi>[1]>[0]) => {
    const { session_id, tool_name } = c.req.param() as { session_id: string; tool_name: string };
    const body = CallbackRequest.parse(await c.req.json());
    const config = c.get("config");
    const { stub, agentId } = await sessionById(c.env, session_id);
    // The same policy a run of this agent gets; an agent no longer configured may run nothing.
    const spec = Object.hasOwn(config.agents, agentId) ? buildRunSpec(config, agentId, "sandbox") : null;
    const answer = (await stub.toolCallback(session_id, tool_name, body.tool_call_id, body.args, {
      allow: spec?.tools ?? [],
      policy: spec?.policy ?? { id: config.tools.policy.id, risks: [], approvalRequired: [], channels: {} },
      retentionMs: config.tools.callbacks.retentionSeconds * 1000,
      timeoutMs: config.runs.toolTimeoutMs.max,
    })) as ToolCallbackAnswer;
    if (answer.status !== 200) throw new GatewayError(answer.code, answer.message);
    c.get("logger").log("info", "tool.callback", {
      session_id,
      tool: tool_name,
      tool_call_id: body.tool_call_id,
      success: answer.body.success,
      replayed: answer.replayed,
    });
    if (answer.replayed) c.header("Idempotent-Replayed", "true");
    return c.json(answer.body, 200);
  };
  app.openapi(
    callbackRoute("/v1/sessions/{session_id}/tools/{tool_name}", "Run a gateway-mediated tool for a sandbox (S5)"),
    handler as never,
  );
  app.openapi(callbackRoute("/proliferate/{session_id}/tools/{tool_name}", "The same callback at S5's path"), handler as never);
  return app;
}
