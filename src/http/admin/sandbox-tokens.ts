/**
 * Sandbox tokens, the admin side of the tool callbacks (S5 §6.3; the callbacks are src/http/webhooks/tool-callbacks.ts):
 *   POST /api/admin/sessions/{session_id}/sandbox-token   mints a token bound to that one session
 *   POST /api/admin/sandbox-tokens/{token_id}/revoke     revokes one token (checked on every callback)
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { mintSandboxToken, sandboxSecretUsable } from "../../security/sandbox-token";
import { recordMintedToken, revokeSandboxToken } from "../../security/sandbox-token-store";
import { findSessionKey } from "../../sessions/index-d1";
import { SESSION_ID } from "../../sessions/keys";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { sessionById } from "../session-by-id";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const SessionParam = z.object({ session_id: z.string().regex(SESSION_ID, "a session id (ses_…)") });

const mintRoute = createRoute({
  method: "post",
  path: "/sessions/{session_id}/sandbox-token",
  summary: "Mint a sandbox token for one session's tool callbacks",
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
  path: "/sandbox-tokens/{token_id}/revoke",
  summary: "Revoke one sandbox token by its token_id",
  description:
    "From the next tool callback on, in every isolate, the token is refused (403 auth.forbidden); other tokens of the same session keep working. Revoking again keeps the first revoked_at. Audited as `sandbox_token.revoked`.",
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

/** The sandbox-token routes (mounted under /api/admin). */
export function adminSandboxTokenRoutes(): OpenAPIHono<AppEnv> {
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

  return app;
}
