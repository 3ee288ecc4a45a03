/**
 * The sandbox credential (S5 §6.3): on a tool-callback route only a valid, unexpired, unrevoked sandbox token
 * minted for that very session gets in; no token, an api token, the admin token, another session's token are
 * all 403 (S5: "reject any non-sandbox caller regardless of bearer token presence").
 */
import type { MiddlewareHandler } from "hono";
import { GatewayError } from "../../errors";
import { verifySandboxToken } from "../../security/sandbox-token";
import { sandboxTokenRevoked } from "../../security/sandbox-token-store";
import type { AppEnv } from "../router";

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
