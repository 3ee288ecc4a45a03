/**
 * The doors of the gateway, one per kind of caller (docs/api.md, docs/decisions.md D-048):
 *   /v1/…            API callers with an api token (src/http/v1/)
 *   /webhooks/…      chat platforms, verified by their signature (src/http/webhooks/channels.ts)
 *   tool callbacks   a session's sandbox with the token minted for it (src/http/webhooks/tool-callbacks.ts)
 *   /api/admin/…     the operator with the admin token (src/http/admin/)
 *   /healthz, /openapi.json   anyone
 *
 * Every group of routes is mounted through `mountDoor`, which takes one declaration: the prefix, the credential its
 * callers present and, where the whole prefix belongs to that one caller, the guard that checks it once for every
 * route under it (the admin API: one `requireScope("admin")`). The same declaration marks each operation of the
 * group in the OpenAPI document (`security` and `x-auth`, read by src/http/openapi.ts), so the document says what
 * is enforced, not what a path looks like. Like the OAuth provider facade of cloudflare/workers-oauth-provider
 * (`apiRoute` → `apiHandler` only with a valid token), the guard sits at the mount, so a route added under the
 * prefix cannot forget it. The guard runs only where a route answers: a path under the prefix that no route
 * serves stays the plain 404 it always was, whoever asks (`guardRoutedOnly`).
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import { matchedRoutes } from "hono/route";
import type { AuthEnv } from "./middleware/principal";
import { type AppEnv, createRouter } from "./router";

/** The credential an operation needs: a bearer token of a scope, a platform's signature, or nothing. */
export type Credential = "admin" | "api" | "sandbox" | "signature" | "none";

/** Where a group of routes is mounted, who calls it, and the guard that admits them (when the prefix is theirs alone). */
export interface Door {
  prefix: string;
  credential: Credential;
  /** Checked once, before every route under `prefix` (absent: each route checks its caller itself). */
  guard?: MiddlewareHandler<AppEnv> | MiddlewareHandler<{ Bindings: AuthEnv }>;
}

/** The OpenAPI `security` requirement of a credential: a bearer scheme of that name, or none. */
export function securityOf(credential: Credential): Record<string, string[]>[] {
  return credential === "admin" || credential === "api" || credential === "sandbox" ? [{ [credential]: [] }] : [];
}

/** Mounts `group` at `door.prefix` behind its guard, and marks each of its operations with the door's credential. */
export function mountDoor(app: OpenAPIHono<AppEnv>, door: Door, group: OpenAPIHono<AppEnv>): void {
  const mounted = createRouter();
  if (door.guard) mounted.use("*", guardRoutedOnly(door.guard as MiddlewareHandler<AppEnv>)); // registered first, so it runs before every route of the group
  mounted.route("/", group);
  for (const def of mounted.openAPIRegistry.definitions) {
    if (def.type !== "route") continue;
    Object.assign(def.route, { security: securityOf(door.credential), "x-auth": door.credential });
  }
  app.route(door.prefix, mounted);
}

/**
 * `guard`, applied only when a route (not just middleware) matched the request: otherwise the request goes on to
 * the app's 404, as it did when each route checked its own credential.
 */
function guardRoutedOnly(guard: MiddlewareHandler<AppEnv>): MiddlewareHandler<AppEnv> {
  return async function guardRoutedOnly(c, next) {
    if (!matchedRoutes(c).some((route) => route.method !== "ALL")) return next();
    return guard(c, next);
  };
}
