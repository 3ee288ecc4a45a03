/**
 * Every route group is an `OpenAPIHono` made here, so that request
 * validation failures take the same path everywhere: `invalid.request`
 * naming the first offending field, through the app's error funnel.
 */
import { OpenAPIHono, z } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import type { ZodError } from "zod";
import { formatPath } from "../config/issues";
import { GatewayError } from "../errors";

export type AppEnv = { Bindings: Env };

/** The value at `path` inside `input`, or undefined when any step is missing. */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== "object" || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

/**
 * Turns a Zod failure on a request into `invalid.request` naming the first offending field.
 * With the `input` that failed, a missing field is "required" whatever its type (Zod reports a
 * missing enum as an invalid option, not as undefined).
 */
export function invalidRequestFromZod(error: ZodError, target: string, input?: unknown): GatewayError {
  const issue = error.issues[0];
  if (!issue) return new GatewayError("invalid.request", `invalid ${target}`);
  const field = issue.path.length > 0 ? formatPath(issue.path) : target;
  if (issue.code === "unrecognized_keys") {
    return new GatewayError("invalid.request", `unknown field ${formatPath([...issue.path, issue.keys[0] ?? ""])}`);
  }
  const missing =
    (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) ||
    (input !== undefined && issue.code !== "custom" && issue.path.length > 0 && valueAt(input, issue.path) === undefined);
  if (missing) {
    return new GatewayError("invalid.request", `${field} is required`);
  }
  return new GatewayError("invalid.request", `${field}: ${issue.message}`);
}

/** A route group whose validation failures become `invalid.request`. */
export function createRouter(): OpenAPIHono<AppEnv> {
  return new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      // The validator hands the hook the input that failed as `data` (absent from the hook's declared type).
      if (!result.success) throw invalidRequestFromZod(result.error, result.target, (result as { data?: unknown }).data);
    },
  });
}

/** The S3 error envelope, for route documentation. */
export const ErrorEnvelopeSchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) }).openapi("Error");

/**
 * Max nesting of free-form JSON a caller may send (a posted config, tool-callback args): deeper documents overflowed
 * the stack of what walks them (the config secrets guard, Durable Object RPC) and answered 500 (test/fuzz.test.ts).
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests arrays/objects at most `max` deep; iterative, since the input may be 10,000 levels deep. */
export function withinJsonDepth(value: unknown, max = MAX_JSON_DEPTH): boolean {
  const pending: [unknown, number][] = [[value, 0]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [v, depth] = next;
    if (v === null || typeof v !== "object") continue;
    if (depth >= max) return false;
    for (const child of Object.values(v)) pending.push([child, depth + 1]);
  }
  return true;
}

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
