/**
 * The error funnel: whatever a route or middleware throws becomes the S3 envelope `{"error":{"code","message"}}`
 * (OpenAI's `{"error":{"message","type","code"}}` on the OpenAI-compatible paths) with its status and headers,
 * logged (redacted) — never a stack trace, never internal detail. The app's `onError` and `notFound` end here.
 */
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { GatewayError } from "../../errors";
import { createLogger } from "../../observability/logger";
import { isOpenAiPath, openAiError } from "../../openai/wire";
import { redactText, secretValuesFromEnv } from "../../security/redact";
import type { AppEnv } from "../router";

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
export function respondWithError(c: Context<AppEnv>, err: unknown): Response {
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
