/**
 * Every route group is an `OpenAPIHono` made here, so that request
 * validation failures take the same path everywhere: `invalid.request`
 * naming the first offending field, through the app's error funnel.
 */
import { OpenAPIHono, z } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import type { ZodError } from "zod";
import { formatPath } from "../config/issues";
import { GatewayError } from "./errors";

export type AppEnv = { Bindings: Env };

/** Turns a Zod failure on a request into `invalid.request` naming the first offending field. */
export function invalidRequestFromZod(error: ZodError, target: string): GatewayError {
  const issue = error.issues[0];
  if (!issue) return new GatewayError("invalid.request", `invalid ${target}`);
  const field = issue.path.length > 0 ? formatPath(issue.path) : target;
  if (issue.code === "unrecognized_keys") {
    return new GatewayError("invalid.request", `unknown field ${formatPath([...issue.path, issue.keys[0] ?? ""])}`);
  }
  if (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) {
    return new GatewayError("invalid.request", `${field} is required`);
  }
  return new GatewayError("invalid.request", `${field}: ${issue.message}`);
}

/** A route group whose validation failures become `invalid.request`. */
export function createRouter(): OpenAPIHono<AppEnv> {
  return new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) throw invalidRequestFromZod(result.error, result.target);
    },
  });
}

/** The S3 error envelope, for route documentation. */
export const ErrorEnvelopeSchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) }).openapi("Error");

/** JSON media types (`application/json`, `application/*+json`). */
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * Middleware for routes with a JSON body: anything else is 400 up front,
 * rather than being validated as an empty object.
 */
export const requireJsonBody: MiddlewareHandler<AppEnv> = async function requireJsonBody(c, next) {
  const mediaType = (c.req.header("Content-Type") ?? "").split(";")[0]?.trim() ?? "";
  if (!JSON_MEDIA_TYPE.test(mediaType)) throw new GatewayError("invalid.request", "Content-Type must be application/json");
  await next();
};
