/**
 * Liveness and readiness: `GET /healthz` → `{"ok":true}` (S3 §5);
 * `GET /healthz?deep=1` also runs the default model's startup validation
 * (S1 §1.6) and reports it — 503 when it fails in `strict` mode.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../errors";
import { deploymentConfig, secretOrigins } from "../security/secret-origins";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "./router";

const HealthQuery = z.object({
  deep: z.enum(["0", "1", "true", "false"]).optional().openapi({ description: "1 or true: also validate the default model's provider" }),
});

const StartupValidationReport = z.object({
  mode: z.enum(["strict", "warn", "off"]),
  status: z.enum(["ok", "failed", "skipped"]),
  provider: z.string(),
  model: z.string(),
  reason: z.string().optional(),
  message: z.string().optional(),
});

const HealthResponse = z.object({
  ok: z.literal(true),
  startup_validation: StartupValidationReport.optional(),
});

const healthz = createRoute({
  method: "get",
  path: "/healthz",
  summary: "Liveness, and with deep=1 provider readiness",
  request: { query: HealthQuery },
  responses: {
    200: { description: "The gateway is up", content: { "application/json": { schema: HealthResponse } } },
    400: { description: "Invalid query (deep must be 0, 1, true or false)", content: { "application/json": { schema: ErrorEnvelope } } },
    503: { description: "Strict startup validation failed", content: { "application/json": { schema: ErrorEnvelope } } },
  },
});

/** The health routes (no auth). */
export function healthRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(healthz, async (c) => {
    const { deep } = c.req.valid("query");
    if (deep !== "1" && deep !== "true") return c.json({ ok: true as const }, 200);
    const config = c.get("config");
    const deployment = secretOrigins(deploymentConfig(config, c.get("configSource").source));
    const outcome = await c.get("startupValidator").check(c.env, config, c.get("logger"), deployment);
    if (outcome.status === "failed" && outcome.mode === "strict") {
      throw new GatewayError("provider.unavailable", outcome.message ?? "startup validation failed", { status: 503 });
    }
    const { checkedAt: _checkedAt, ...report } = outcome;
    return c.json({ ok: true as const, startup_validation: report }, 200);
  });
  return app;
}
