/**
 * `GET /.well-known/jwks.json` (issue 33, D-089): the public half of the gateway's signing key, with the retired keys
 * still listed, as a JWKS (RFC 7517; Ed25519 keys per RFC 8037). Anyone may read it — it is what a webhook
 * receiver checks `v1a` signatures with, and what a later issue's run receipts are checked with — so it needs no
 * token and may be cached. A gateway without a usable key answers `503 signing.unavailable` naming the problem
 * (never a 500, never an empty key set a verifier could take as "nothing is signed").
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../errors";
import { gatewaySigningKeys } from "../security/signing-key";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "./router";

/** How long a verifier may keep the set: short enough that a rotation reaches it within minutes. */
export const JWKS_MAX_AGE_SECONDS = 300;

const Jwk = z
  .object({
    kty: z.literal("OKP"),
    crv: z.literal("Ed25519"),
    kid: z.string().openapi({ description: "the key id; the key in use is first" }),
    x: z.string().openapi({ description: "the public key, 32 bytes in unpadded base64url" }),
    use: z.literal("sig"),
    alg: z.literal("EdDSA"),
  })
  .openapi("Jwk");

const JwksSchema = z
  .object({ keys: z.array(Jwk) })
  .openapi("Jwks", { description: "The gateway's signing keys: the current one first, then the retired ones still accepted" });

const jwksRoute = createRoute({
  method: "get",
  path: "/.well-known/jwks.json",
  summary: "The gateway's public signing keys (JWKS): verify v1a webhook signatures with them",
  description: `Public; \`Cache-Control: public, max-age=${JWKS_MAX_AGE_SECONDS}\`. docs/api.md, Completion webhooks.`,
  responses: {
    200: { description: "The key set", content: { "application/json": { schema: JwksSchema } } },
    503: {
      description: "signing.unavailable: GATEWAY_SIGNING_KEY (or GATEWAY_SIGNING_KEYS_RETIRED) is missing or malformed",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
  },
});

/** The JWKS route (no auth). */
export function jwksRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(jwksRoute, async (c) => {
    const keys = await gatewaySigningKeys(c.env);
    if (!keys.ok) throw new GatewayError("signing.unavailable", keys.problem, { headers: { "Cache-Control": "no-store" } });
    c.header("Cache-Control", `public, max-age=${JWKS_MAX_AGE_SECONDS}`);
    return c.json(keys.jwks, 200);
  });
  return app;
}
