/**
 * Operator views and secrets (S3 §5 "Dashboard Admin APIs", DESIGN §3):
 *   GET    /api/admin/status              recent runs, the default model and its provider's readiness
 *   GET    /api/admin/config              the configuration in force, sensitive values blanked
 *   GET    /api/admin/secrets             stored secrets: names and timestamps only
 *   POST   /api/admin/secrets             one-way ingestion {name, value} → 201 (new) / 200 (replaced); the value is never echoed
 *   DELETE /api/admin/secrets/{name}      → 200 {deleted: name}
 * Secret values are AES-GCM encrypted before they reach D1 (src/security/secrets-store.ts); without a valid
 * SECRETS_ENCRYPTION_KEY the secrets routes answer 503 `secrets.unavailable` and store nothing.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { defaultModelRef, resolveConfiguredModelRef } from "../config/model-ref";
import { listRuns } from "../runs/index-d1";
import { detectSecretValue, isSecretFieldName } from "../security/secret-patterns";
import { deleteSecret, listSecrets, MAX_SECRET_VALUE_CHARS, putSecret, SECRET_NAME, secretsKey } from "../security/secrets-store";
import { requireScope } from "./auth";
import { GatewayError } from "./errors";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope, requireJsonBody } from "./router";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const unavailable = { description: "SECRETS_ENCRYPTION_KEY is not set", content: json(ErrorEnvelope) };
const SecretListing = z.object({ name: z.string(), created_at: z.string(), updated_at: z.string() }).openapi("SecretListing");

const statusRoute = createRoute({
  method: "get",
  path: "/api/admin/status",
  summary: "Recent runs and the default model's provider status",
  middleware: [requireScope("admin")] as const,
  responses: { 200: { description: "Status", content: json(z.record(z.string(), z.unknown())) }, 401: unauthorized },
});
const configRoute = createRoute({
  method: "get",
  path: "/api/admin/config",
  summary: "The configuration in force, with sensitive value fields blanked",
  middleware: [requireScope("admin")] as const,
  responses: { 200: { description: "Config", content: json(z.record(z.string(), z.unknown())) }, 401: unauthorized },
});
const listSecretsRoute = createRoute({
  method: "get",
  path: "/api/admin/secrets",
  summary: "Stored secrets: names and timestamps only",
  middleware: [requireScope("admin")] as const,
  responses: {
    200: { description: "Secrets", content: json(z.object({ secrets: z.array(SecretListing) })) },
    401: unauthorized,
    503: unavailable,
  },
});
const SecretWrite = z
  .strictObject({
    name: z.string().regex(SECRET_NAME, "upper-case letters, digits and _ (at most 128), starting with a letter"),
    value: z.string().min(1).max(MAX_SECRET_VALUE_CHARS),
  })
  .openapi("SecretWrite");
const putSecretRoute = createRoute({
  method: "post",
  path: "/api/admin/secrets",
  summary: "Store a secret (one-way: the value is never returned)",
  middleware: [requireScope("admin"), requireJsonBody] as const,
  request: { body: { required: true, content: json(SecretWrite) } },
  responses: {
    200: { description: "Replaced", content: json(SecretListing) },
    201: { description: "Stored", content: json(SecretListing) },
    400: { description: "Invalid", content: json(ErrorEnvelope) },
    401: unauthorized,
    503: unavailable,
  },
});
const deleteSecretRoute = createRoute({
  method: "delete",
  path: "/api/admin/secrets/{name}",
  summary: "Delete a stored secret",
  middleware: [requireScope("admin")] as const,
  request: { params: z.object({ name: z.string().regex(SECRET_NAME) }) },
  responses: {
    200: { description: "Deleted", content: json(z.object({ deleted: z.string() })) },
    401: unauthorized,
    404: { description: "No such secret", content: json(ErrorEnvelope) },
    503: unavailable,
  },
});

/** The config with every value whose field name or content looks like a credential blanked (defense in depth: config holds none). */
export function blankSensitive(value: unknown, key = ""): unknown {
  if (isSecretFieldName(key)) return "";
  if (typeof value === "string") return detectSecretValue(value) ? "" : value;
  if (Array.isArray(value)) return value.map((v) => blankSensitive(v));
  if (value !== null && typeof value === "object")
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, blankSensitive(v, k)]));
  return value;
}

async function keyOrRefuse(raw: string | undefined): Promise<CryptoKey> {
  const key = await secretsKey(raw);
  if (!key)
    throw new GatewayError("secrets.unavailable", "the secrets store needs SECRETS_ENCRYPTION_KEY (base64 of 32 bytes), which is not set");
  return key;
}

/** The routes. */
export function adminConfigRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(statusRoute, async (c) => {
    const config = c.get("config");
    const ref = defaultModelRef(config);
    const model = resolveConfiguredModelRef(config, ref);
    const validation = await c.get("startupValidator").check(c.env, config, c.get("logger"));
    const runs = await listRuns(c.env.DB, { limit: 20 });
    return c.json(
      {
        model: { ref: model.ref, provider: model.providerId, api_model_id: model.apiModelId, local: model.local },
        provider_status: {
          mode: validation.mode,
          status: validation.status,
          ...(validation.reason ? { reason: validation.reason } : {}),
          ...(validation.message ? { message: validation.message } : {}),
        },
        runs,
      },
      200,
    );
  });

  app.openapi(configRoute, (c) => c.json(blankSensitive(c.get("config")) as Record<string, unknown>, 200));

  app.openapi(listSecretsRoute, async (c) => {
    await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    return c.json({ secrets: await listSecrets(c.env.DB) }, 200);
  });

  app.openapi(putSecretRoute, async (c) => {
    const key = await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    const { name, value } = c.req.valid("json") as z.infer<typeof SecretWrite>;
    const { created, secret } = await putSecret(c.env.DB, key, name, value, new Date());
    c.get("logger").log("info", "admin.secret", { name, action: created ? "created" : "replaced" });
    return c.json(secret, created ? 201 : 200);
  });

  app.openapi(deleteSecretRoute, async (c) => {
    await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    const { name } = c.req.valid("param");
    if (!(await deleteSecret(c.env.DB, name))) throw new GatewayError("resource.not_found", `no secret ${name}`);
    c.get("logger").log("info", "admin.secret", { name, action: "deleted" });
    return c.json({ deleted: name }, 200);
  });

  return app;
}
