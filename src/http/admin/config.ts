/**
 * Operator views and secrets (S3 §5 "Dashboard Admin APIs", DESIGN §3):
 *   GET    /api/admin/status              recent runs, the default model and its provider's readiness, the signing key's state
 *   GET    /api/admin/config              the configuration in force, sensitive values blanked (ETag: "<version>")
 *   POST   /api/admin/config              a whole new config, validated like the bundled file → 201 {version, sha256, created_at}
 *   GET    /api/admin/config/versions     the version in force and the posted versions, newest first
 *   GET    /api/admin/config/versions/{version}  one posted version as posted (to compare or to post again)
 *   GET    /api/admin/secrets             stored secrets: names and timestamps only
 *   POST   /api/admin/secrets             one-way ingestion {name, value} → 201 (new) / 200 (replaced); the value is never echoed
 *   DELETE /api/admin/secrets/{name}      → 200 {deleted: name}
 * Secret values are AES-GCM encrypted before they reach D1 (src/security/secrets-store.ts); without a valid
 * SECRETS_ENCRYPTION_KEY the secrets routes answer 503 `secrets.unavailable` and store nothing. Only the
 * secrets the gateway reads can be stored, and they are in use on every isolate within seconds
 * (src/security/stored-secrets.ts). Config versions: src/config/versions.ts.
 * Every config and secret change is an audit event in the gateway's own stream (agent id `gateway`):
 * `config.updated` {version, sha256, previous}, `secret.stored` / `secret.deleted` {name} — never a value.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { defaultModelRef, resolveConfiguredModelRef } from "../../config/model-ref";
import { GATEWAY_AUDIT_AGENT } from "../../config/schema";
import {
  type ConfigVersionRecord,
  configInForce,
  configVersionBody,
  forgetConfigInForce,
  listConfigVersions,
  postConfigVersion,
} from "../../config/versions";
import { GatewayError } from "../../errors";
import { listRuns } from "../../runs/index-d1";
import { deploymentConfig, secretDestinations, secretOrigins, unboundDestinations, urlOrigin } from "../../security/secret-origins";
import { detectSecretValue, isSecretFieldName } from "../../security/secret-patterns";
import { deleteSecret, listSecrets, MAX_SECRET_VALUE_CHARS, putSecret, SECRET_NAME, secretsKey } from "../../security/secrets-store";
import { gatewaySigningKeys } from "../../security/signing-key";
import { isOriginBoundSecret, ROTATION_OVERLAP_SECRETS, storableSecretName } from "../../security/stored-secrets";
import { forgetAdminGenerations } from "../../storage/admin-generation";
import { MAX_JSON_DEPTH, requireJsonBody, withinJsonDepth } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { keyset, NextCursor, pageQuery } from "./paging";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const unavailable = { description: "SECRETS_ENCRYPTION_KEY is not set", content: json(ErrorEnvelope) };
const SecretListing = z
  .object({
    name: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    origin: z.string().optional().openapi({
      description:
        "Provider keys and bot tokens: the origin the value may be sent to. Absent: the origin the deployed config/gateway.json5 names for it.",
    }),
    rotated_at: z.string().optional().openapi({
      description:
        "Inbound webhook secrets: when the previous value was replaced; it stays accepted for channels.secretRotationOverlapSeconds after this.",
    }),
  })
  .openapi("SecretListing");

const statusRoute = createRoute({
  method: "get",
  path: "/status",
  summary: "Recent runs and the default model's provider status",
  responses: { 200: { description: "Status", content: json(z.record(z.string(), z.unknown())) }, 401: unauthorized },
});
const configRoute = createRoute({
  method: "get",
  path: "/config",
  summary: "The configuration in force, with sensitive value fields blanked",
  responses: { 200: { description: "Config", content: json(z.record(z.string(), z.unknown())) }, 401: unauthorized },
});
const ConfigIssue = z.object({ path: z.string(), message: z.string() });
const ConfigInvalid = z
  .object({ error: z.object({ code: z.string(), message: z.string(), issues: z.array(ConfigIssue) }) })
  .openapi("ConfigInvalid");
const ConfigVersion = z
  .object({ version: z.number().int(), sha256: z.string(), created_at: z.string(), actor: z.string() })
  .openapi("ConfigVersion");
const ConfigDocument = z
  .record(z.string(), z.unknown())
  .refine((doc) => withinJsonDepth(doc), `nested deeper than ${MAX_JSON_DEPTH} levels`)
  .openapi("GatewayConfigDocument", {
    description:
      "The whole gateway configuration (the JSON form of config/gateway.json5; docs/configuration.md). It replaces the configuration in force — no merge — after the same validation as the bundled file: strict keys, no credential-shaped values, model references that resolve.",
  });
const postConfigRoute = createRoute({
  method: "post",
  path: "/config",
  summary: "Store a new configuration version; in force on every isolate within seconds",
  description:
    'Optional `If-Match: "<version>"` (the ETag of `GET /api/admin/config`): the post is refused with 409 if another version was posted since. Every accepted post is audited as `config.updated` in the `gateway` audit stream.',
  middleware: [requireJsonBody] as const,
  request: { body: { required: true, content: json(ConfigDocument) } },
  responses: {
    201: { description: "Stored and in force", content: json(ConfigVersion) },
    400: { description: "Invalid: every issue, with its path", content: json(ConfigInvalid) },
    401: unauthorized,
    409: { description: "If-Match names a version that is no longer the newest", content: json(ErrorEnvelope) },
  },
});
/** Config versions page newest first, keyed by version number (docs/api.md "Lists"). */
const versionPages = keyset<ConfigVersionRecord, [number]>("config_versions", ["number"], (v) => [v.version]);

const listVersionsRoute = createRoute({
  method: "get",
  path: "/config/versions",
  summary: "The configuration in force and the posted versions, newest first",
  request: {
    query: z.object(pageQuery()),
  },
  responses: {
    200: {
      description: "Versions",
      content: json(
        z.object({
          in_force: z.object({
            source: z.enum(["bundled", "admin"]),
            version: z.number().int(),
            sha256: z.string(),
            problem: z.string().optional(),
          }),
          versions: z.array(ConfigVersion),
          next_cursor: NextCursor,
        }),
      ),
    },
    400: { description: "Invalid query", content: json(ErrorEnvelope) },
    401: unauthorized,
  },
});
const getVersionRoute = createRoute({
  method: "get",
  path: "/config/versions/{version}",
  summary: "One posted configuration version, as posted",
  request: { params: z.object({ version: z.coerce.number().int().min(1) }) },
  responses: {
    200: { description: "The posted config", content: json(ConfigDocument) },
    401: unauthorized,
    404: { description: "No such version", content: json(ErrorEnvelope) },
  },
});
const listSecretsRoute = createRoute({
  method: "get",
  path: "/secrets",
  summary: "Stored secrets: names and timestamps only",
  responses: {
    200: { description: "Secrets", content: json(z.object({ secrets: z.array(SecretListing) })) },
    401: unauthorized,
    503: unavailable,
  },
});
const SecretWrite = z
  .strictObject({
    name: z.string().regex(SECRET_NAME, "upper-case letters, digits and _ (at most 128), starting with a letter").openapi({
      description:
        "A secret the gateway reads: `<PROVIDER>_API_KEY`, a channel secret, … (GATEWAY_ADMIN_TOKEN and SECRETS_ENCRYPTION_KEY cannot be stored)",
    }),
    value: z.string().min(1).max(MAX_SECRET_VALUE_CHARS),
    origin: z.string().max(512).optional().openapi({
      description:
        "Provider keys and bot tokens only: the origin (or any URL on it) the value may be sent to, e.g. https://api.moonshot.cn. Default: the origin the configuration in force sends it to. The value is never sent anywhere else; moving a provider or channel to another origin needs the secret stored again for that origin.",
    }),
  })
  .openapi("SecretWrite");
const putSecretRoute = createRoute({
  method: "post",
  path: "/secrets",
  summary: "Store a secret (one-way: the value is never returned)",
  middleware: [requireJsonBody] as const,
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
  path: "/secrets/{name}",
  summary: "Delete a stored secret",
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

/**
 * The origin a secret being stored is bound to: the one given, else where the configuration in force sends it;
 * null for secrets never sent anywhere (and for a key of a provider not configured yet, given no origin: then it
 * is bound like a Worker secret, to the deployed config's origin).
 */
function bindingFor(c: Context<AppEnv>, name: string, origin: string | undefined): string | null {
  if (!isOriginBoundSecret(name)) {
    if (origin !== undefined)
      throw new GatewayError(
        "invalid.request",
        `origin applies only to provider keys and bot tokens; ${name} is never sent to another server`,
      );
    return null;
  }
  if (origin === undefined) return secretDestinations(c.get("config")).find((d) => d.name === name)?.origin ?? null;
  const bound = urlOrigin(origin);
  if (!bound) throw new GatewayError("invalid.request", "origin must be an http or https URL, such as https://api.moonshot.cn");
  return bound;
}

async function keyOrRefuse(raw: string | undefined): Promise<CryptoKey> {
  const key = await secretsKey(raw);
  if (!key)
    throw new GatewayError("secrets.unavailable", "the secrets store needs SECRETS_ENCRYPTION_KEY (base64 of 32 bytes), which is not set");
  return key;
}

/** An admin change in the gateway's own audit stream (agent `gateway`, its main session): names and hashes only. */
async function auditGateway(c: Context<AppEnv>, eventType: string, payload: Record<string, unknown>): Promise<void> {
  const sessionKey = `agent:${GATEWAY_AUDIT_AGENT}:main`;
  await c.env.SESSIONS.getByName(sessionKey).recordAuditEvent({ sessionKey, agentId: GATEWAY_AUDIT_AGENT }, eventType, "admin", payload);
}

/** The routes. */
export function adminConfigRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(statusRoute, async (c) => {
    const config = c.get("config");
    const ref = defaultModelRef(config);
    const model = resolveConfiguredModelRef(config, ref);
    const deployment = secretOrigins(deploymentConfig(config, c.get("configSource").source));
    const validation = await c.get("startupValidator").check(c.env, config, c.get("logger"), deployment);
    const runs = await listRuns(c.env.DB, { limit: 20 });
    const signing = await gatewaySigningKeys(c.env);
    return c.json(
      {
        model: { ref: model.ref, provider: model.providerId, api_model_id: model.apiModelId, local: model.local },
        config: c.get("configSource"),
        provider_status: {
          mode: validation.mode,
          status: validation.status,
          ...(validation.reason ? { reason: validation.reason } : {}),
          ...(validation.message ? { message: validation.message } : {}),
        },
        // D-089: what signs webhooks; a key that cannot sign is named here before a webhook is refused for it.
        signing_key: signing.ok ? { status: "ok", kid: signing.signer.kid } : { status: "unusable", message: signing.problem },
        runs,
      },
      200,
    );
  });

  app.openapi(configRoute, (c) => {
    c.header("ETag", `"${c.get("configSource").version}"`);
    return c.json(blankSensitive(c.get("config")) as Record<string, unknown>, 200);
  });

  app.openapi(postConfigRoute, async (c) => {
    const raw = c.req.valid("json");
    const ifMatch = c.req.header("If-Match");
    let expectedNewest: number | undefined;
    if (ifMatch !== undefined) {
      const m = /^"(0|[1-9][0-9]{0,15})"$/.exec(ifMatch.trim());
      if (!m) throw new GatewayError("invalid.request", 'If-Match must be a config version ETag such as "3"');
      expectedNewest = Number(m[1]);
    }
    const previous = c.get("configSource");
    // A version that would send a stored key or token to another origin than it is bound to is refused (issue 20 §5).
    const deployment = secretOrigins(deploymentConfig(c.get("config"), previous.source));
    const refuse = (config: Parameters<typeof unboundDestinations>[0]) => unboundDestinations(config, c.env, deployment);
    const result = await postConfigVersion(c.env.DB, raw, { actor: "admin", now: new Date(), expectedNewest, refuse });
    if (!result.ok && result.reason === "invalid") {
      const [first] = result.issues;
      const more = result.issues.length > 1 ? ` (and ${result.issues.length - 1} more)` : "";
      throw new GatewayError("invalid.request", `config is invalid: ${first?.path}: ${first?.message}${more}`, { issues: result.issues });
    }
    if (!result.ok)
      throw new GatewayError(
        "conflict",
        `config version ${result.newest} was posted since version ${expectedNewest}; read the config again and retry`,
      );
    // In force here at once; other isolates within ADMIN_REFRESH_MS.
    forgetAdminGenerations();
    forgetConfigInForce();
    const { version, sha256, created_at, actor } = result.record;
    c.get("logger").log("info", "admin.config", { version, sha256 });
    await auditGateway(c, "config.updated", { version, sha256, previous: { source: previous.source, version: previous.version } });
    return c.json({ version, sha256, created_at, actor }, 201);
  });

  app.openapi(listVersionsRoute, async (c) => {
    const q = c.req.valid("query");
    const inForce = await configInForce(c.env.DB);
    const { items, next_cursor } = await versionPages.serve(q, (after, limit) =>
      listConfigVersions(c.env.DB, { limit, before: after?.[0] }),
    );
    return c.json(
      {
        in_force: {
          source: inForce.source,
          version: inForce.version,
          sha256: inForce.sha256,
          ...(inForce.problem ? { problem: inForce.problem } : {}),
        },
        versions: items.map(({ version, sha256, created_at, actor }) => ({ version, sha256, created_at, actor })),
        next_cursor,
      },
      200,
    );
  });

  app.openapi(getVersionRoute, async (c) => {
    const { version } = c.req.valid("param");
    const body = await configVersionBody(c.env.DB, version);
    if (body === null) throw new GatewayError("resource.not_found", `no config version ${version}`);
    return c.json(body as Record<string, unknown>, 200);
  });

  app.openapi(listSecretsRoute, async (c) => {
    await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    return c.json({ secrets: await listSecrets(c.env.DB) }, 200);
  });

  app.openapi(putSecretRoute, async (c) => {
    const key = await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    const { name, value, origin } = c.req.valid("json") as z.infer<typeof SecretWrite>;
    const refused = storableSecretName(name);
    if (refused) throw new GatewayError("invalid.request", refused);
    const bound = bindingFor(c, name, origin);
    const keepPrevious = (ROTATION_OVERLAP_SECRETS as readonly string[]).includes(name);
    const deployedValue = keepPrevious ? (c.env as unknown as Record<string, unknown>)[name] : undefined;
    const { created, secret } = await putSecret(c.env.DB, key, name, value, new Date(), {
      origin: bound,
      keepPrevious,
      deployedValue: typeof deployedValue === "string" ? deployedValue : undefined,
    });
    forgetAdminGenerations();
    c.get("logger").log("info", "admin.secret", { name, action: created ? "created" : "replaced" });
    await auditGateway(c, "secret.stored", { name, replaced: !created, ...(bound ? { origin: bound } : {}) });
    return c.json(secret, created ? 201 : 200);
  });

  app.openapi(deleteSecretRoute, async (c) => {
    await keyOrRefuse(c.env.SECRETS_ENCRYPTION_KEY);
    const { name } = c.req.valid("param");
    if (!(await deleteSecret(c.env.DB, name))) throw new GatewayError("resource.not_found", `no secret ${name}`);
    forgetAdminGenerations();
    c.get("logger").log("info", "admin.secret", { name, action: "deleted" });
    await auditGateway(c, "secret.deleted", { name });
    return c.json({ deleted: name }, 200);
  });

  return app;
}
