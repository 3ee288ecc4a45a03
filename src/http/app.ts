/**
 * The Hono app: request id → config/logger → body limit → the doors, one per kind of caller (src/http/callers.ts:
 * /v1 for API callers, /api/admin for the operator, webhooks and tool callbacks for platforms and sandboxes), with
 * one error funnel (src/http/middleware/errors.ts) that turns every failure into the S3 envelope
 * `{"error":{"code","message"}}` (OpenAI's shape on the OpenAI-compatible paths) — never a stack trace.
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import { bodyLimit } from "hono/body-limit";
import { requestId } from "hono/request-id";
import { bundledConfig } from "../config/load";
import type { GatewayConfig } from "../config/schema";
import { bundledConfigSha256, type ConfigInForce, configInForce } from "../config/versions";
import { GatewayError } from "../errors";
import { createLogger, type Logger } from "../observability/logger";
import { gatewayLogSink, isolateLogSinks } from "../observability/r2-logs";
import { logRequest } from "../observability/request-line";
import { isolateStartupValidator, type StartupValidator } from "../providers/startup-validation";
import { envWithStoredSecrets } from "../security/stored-secrets";
import { ADMIN_DOOR, adminRoutes } from "./admin";
import { mountDoor } from "./callers";
import { dashboardRoutes } from "./dashboard";
import { healthRoutes } from "./health";
import { jwksRoutes } from "./jwks";
import { respondWithError } from "./middleware/errors";
import { registerOpenApi } from "./openapi";
import { type AppEnv, createRouter } from "./router";
import { V1_DOOR, v1Routes } from "./v1";
import { CHANNEL_WEBHOOK_DOOR, channelWebhookRoutes, TOOL_CALLBACK_DOOR, toolCallbackRoutes } from "./webhooks";
import "./context";

/** Max length of a caller-supplied X-Request-Id; longer or odd ones are replaced. */
const MAX_REQUEST_ID = 128;

export interface AppOptions {
  /** Overrides the logger (tests capture lines). */
  logger?: Logger;
  /** Fixes the configuration in force (tests); otherwise it is the newest admin-posted version or the bundled file. */
  config?: GatewayConfig;
  /** Overrides the per-isolate startup validator (tests). */
  startupValidator?: StartupValidator;
}

let loggedConfigProblem: string | undefined;

/**
 * The configuration in force: the one the app was built with (tests), else the newest admin-posted version
 * or the bundled file. A D1 failure must not take the API down: the bundled file serves meanwhile.
 */
async function inForce(env: Env | undefined, fixed: GatewayConfig | undefined): Promise<ConfigInForce> {
  if (fixed) return { config: fixed, source: "bundled", version: 0, sha256: "" };
  if (!env?.DB) return { config: bundledConfig(), source: "bundled", version: 0, sha256: await bundledConfigSha256() };
  try {
    return await configInForce(env.DB);
  } catch (err) {
    return {
      config: bundledConfig(),
      source: "bundled",
      version: 0,
      sha256: await bundledConfigSha256(),
      problem: `config versions unreadable: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
}

/** Builds the gateway app with its middleware, error funnel and every implemented route. */
export function createApp(options: AppOptions = {}): OpenAPIHono<AppEnv> {
  const app = createRouter();
  const validator = options.startupValidator ?? isolateStartupValidator;

  app.use(requestId({ limitLength: MAX_REQUEST_ID, generator: () => `req_${crypto.randomUUID()}` }));
  app.use(async function gatewayContext(c, next) {
    const { config, ...configSource } = await inForce(c.env, options.config);
    const r2 = options.logger || !c.env?.AUDIT ? undefined : isolateLogSinks(c.env.AUDIT);
    const logger = options.logger ?? createLogger(config.logging.level, r2 ? gatewayLogSink(c.env.AUDIT) : undefined);
    if (configSource.problem && configSource.problem !== loggedConfigProblem) {
      loggedConfigProblem = configSource.problem; // once per isolate, not once per request
      logger.log("error", "config.version_unused", { version: configSource.version, reason: configSource.problem });
    }
    // Admin-stored secrets over the Worker's own (src/security/stored-secrets.ts); every handler sees the merged env.
    if (c.env?.DB) {
      try {
        c.env = await envWithStoredSecrets(c.env);
      } catch (err) {
        logger.log("error", "secrets.overlay_unavailable", { error_message: err instanceof Error ? err.message : String(err) });
      }
    }
    c.set("config", config);
    c.set("configSource", configSource);
    c.set("logger", logger);
    c.set("startupValidator", validator);
    const started = Date.now();
    await next();
    // D-068: a request that waited for its run carries the run's lines on the console (one event per request).
    logRequest(
      logger,
      {
        request_id: c.get("requestId"),
        method: c.req.method,
        route: c.req.routePath,
        status: c.res.status,
        latency_ms: Date.now() - started,
      },
      c.get("runLines"),
      options.logger ? undefined : r2?.sinks.sink,
    );
    // Only when a flush is due (at most every FLUSH_INTERVAL_MS): waitUntil itself costs isolate time per request.
    if (r2?.due()) {
      try {
        c.executionCtx.waitUntil(r2.flushIfDue());
      } catch {
        // No execution context (the app called directly, as in tests): the next request or the DO flushes.
      }
    }
  });
  app.use(async function limitBody(c, next) {
    const maxSize = c.get("config").http.maxBodyBytes;
    return bodyLimit({
      maxSize,
      onError: () => {
        throw new GatewayError("payload.too_large", `request body exceeds ${maxSize} bytes`);
      },
    })(c, next);
  });

  // One door per kind of caller (src/http/callers.ts); the pages last.
  mountDoor(app, { prefix: "/", credential: "none" }, healthRoutes());
  mountDoor(app, { prefix: "/", credential: "none" }, jwksRoutes());
  mountDoor(app, V1_DOOR, v1Routes());
  mountDoor(app, ADMIN_DOOR, adminRoutes());
  mountDoor(app, TOOL_CALLBACK_DOOR, toolCallbackRoutes());
  mountDoor(app, CHANNEL_WEBHOOK_DOOR, channelWebhookRoutes());
  app.route("/", dashboardRoutes());
  registerOpenApi(app);

  app.notFound((c) =>
    respondWithError(
      c,
      new GatewayError("resource.not_found", `no route for ${c.req.method} ${new URL(c.req.url).pathname.slice(0, 200)}`),
    ),
  );
  app.onError((err, c) => respondWithError(c, err));
  return app;
}
