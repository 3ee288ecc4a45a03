/**
 * What a JSON request body must be before any route reads it: sent as JSON (`requireJsonBody`, 400 otherwise,
 * rather than being validated as an empty object), and no deeper than `MAX_JSON_DEPTH` where a route takes
 * free-form JSON (a posted config, tool-callback args).
 */
import type { MiddlewareHandler } from "hono";
import { GatewayError } from "../../errors";
import type { AppEnv } from "../router";

/**
 * Max nesting of free-form JSON a caller may send (a posted config, tool-callback args): deeper documents overflowed
 * the stack of what walks them (the config secrets guard, Durable Object RPC) and answered 500 (test/http/fuzz.test.ts).
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
