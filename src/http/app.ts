/**
 * The Hono app: request id → config/logger → body limit → routes, with one
 * error funnel that turns every failure into the S3 envelope
 * `{"error":{"code","message"}}` (OpenAI's `{"error":{"message","type","code"}}`
 * on the OpenAI-compatible paths) — never a stack trace, never internal detail.
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { requestId } from "hono/request-id";
import { bundledConfig } from "../config/load";
import type { GatewayConfig } from "../config/schema";
import { bundledConfigSha256, type ConfigInForce, configInForce } from "../config/versions";
import { GatewayError } from "../errors";
import { createLogger, type Logger } from "../observability/logger";
import { gatewayLogSink, isolateLogSinks } from "../observability/r2-logs";
import { isOpenAiPath, openAiError } from "../openai/wire";
import { isolateStartupValidator, type StartupValidator } from "../providers/startup-validation";
import { redactText, secretValuesFromEnv } from "../security/redact";
import { envWithStoredSecrets } from "../security/stored-secrets";
import { adminApprovalRoutes } from "./admin/approvals";
import { adminAuditRoutes } from "./admin/audit";
import { adminConfigRoutes } from "./admin/config";
import { adminEnvRequestRoutes } from "./admin/env-requests";
import { adminJobRoutes } from "./admin/jobs";
import { adminSandboxBootstrapRoutes } from "./admin/sandbox-bootstrap";
import { adminSessionRoutes } from "./admin/sessions";
import { adminSetupRoutes } from "./admin/setup";
import { adminSnapshotRoutes } from "./admin/snapshots";
import { adminSystemPromptRoutes } from "./admin/system-prompt";
import { dashboardRoutes } from "./dashboard";
import { healthRoutes } from "./health";
import { registerOpenApi } from "./openapi";
import { type AppEnv, createRouter } from "./router";
import { chatRoutes } from "./v1/chat";
import { openAiRoutes } from "./v1/openai";
import { runRoutes } from "./v1/runs";
import { webhookRoutes } from "./webhooks/channels";
import { toolCallbackRoutes } from "./webhooks/tool-callbacks";
import "./context";

/** Max length of a caller-supplied X-Request-Id; longer or odd ones are replaced. */
const MAX_REQUEST_ID = 128;

/** Maps anything thrown to a GatewayError; unknown errors become a bare 500. */
export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof HTTPException) {
    switch (err.status) {
      case 400:
        return new GatewayError("invalid.request", err.message || "malformed request");
      case 401:
        return new GatewayError("auth.unauthorized", "unauthorized");
      case 413:
        return new GatewayError("payload.too_large", "request body too large");
      case 415: // a declared-optional JSON body sent as another media type (@hono/zod-openapi)
        return new GatewayError("invalid.request", "Content-Type must be application/json");
      default:
        break;
    }
  }
  return new GatewayError("internal.error", "internal error", { internal: err instanceof Error ? err.message : String(err) });
}

/** Logs the error (redacted) and answers with its envelope. */
function respondWithError(c: Context<AppEnv>, err: unknown): Response {
  const ge = toGatewayError(err);
  const logger = c.get("logger") ?? createLogger();
  const fields = { request_id: c.get("requestId") ?? "", code: ge.code, status: ge.status };
  if (ge.status >= 500) {
    const name = err instanceof Error ? err.name : typeof err;
    const message = ge.internal ?? ge.message;
    logger.log("error", "http.error", {
      ...fields,
      error_name: name,
      error_message: redactText(message, c.env ? secretValuesFromEnv(c.env) : []),
    });
  } else {
    logger.log("info", "http.error", fields);
  }
  for (const [name, value] of Object.entries(ge.headers)) c.header(name, value);
  if (ge.retryAfterSeconds !== undefined) c.header("Retry-After", String(ge.retryAfterSeconds));
  // The OpenAI-compatible routes answer in OpenAI's error shape (their clients read no other), with the same code.
  if (isOpenAiPath(c.req.path)) return c.json(openAiError(ge), ge.status);
  return c.json(ge.toEnvelope(), ge.status);
}

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
    logger.log("info", "http.request", {
      request_id: c.get("requestId"),
      method: c.req.method,
      route: c.req.routePath,
      status: c.res.status,
      latency_ms: Date.now() - started,
    });
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

  app.route("/", healthRoutes());
  app.route("/", chatRoutes());
  app.route("/", runRoutes());
  app.route("/", openAiRoutes());
  app.route("/", adminApprovalRoutes());
  app.route("/", adminAuditRoutes());
  app.route("/", adminConfigRoutes());
  app.route("/", adminJobRoutes());
  app.route("/", adminSessionRoutes());
  app.route("/", adminSandboxBootstrapRoutes());
  app.route("/", adminEnvRequestRoutes());
  app.route("/", adminSnapshotRoutes());
  app.route("/", adminSetupRoutes());
  app.route("/", adminSystemPromptRoutes());
  app.route("/", toolCallbackRoutes());
  app.route("/", webhookRoutes());
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
