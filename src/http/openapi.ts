/**
 * The OpenAPI 3.1 document (DESIGN §3), generated from the same Zod schemas the routes validate with
 * (`@hono/zod-openapi`) and served at `GET /openapi.json`. Every operation says which credential it needs,
 * as the door it was mounted through declares it (src/http/callers.ts; the admin API's one `requireScope("admin")`
 * among them): `security` names the bearer scheme of its scope (`admin`, `api`, `sandbox`); webhooks authenticate
 * by their platform's signature (`x-auth: signature`); `/healthz`, `/.well-known/jwks.json` and this document need nothing.
 * `test/http/openapi.test.ts` fails when a registered API route is missing from the document (pages such as `/admin`
 * and `/docs` are not API operations and are left out), when the document does not validate against the official
 * OpenAPI 3.1 meta-schema (every Schema Object against JSON Schema 2020-12), and when an operation that takes input
 * does not document the S3 error envelope for at least one 4xx.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { type Credential, securityOf } from "./callers";
import type { AppEnv } from "./router";

/**
 * The credential a path needs by the URL convention the doors follow (src/http/callers.ts): test/http/openapi.test.ts
 * checks every operation's declared credential against it, so a route mounted through the wrong door shows.
 */
export function scopeOfPath(path: string): Credential {
  if (path === "/healthz" || path === "/openapi.json" || path === "/.well-known/jwks.json") return "none";
  if (path.startsWith("/webhooks/")) return "signature";
  if (path.startsWith("/api/admin/")) return "admin";
  if (path.startsWith("/proliferate/") || /^\/v1\/sessions\/[^/]+\/tools\//.test(path)) return "sandbox";
  return "api";
}

const docRoute = createRoute({
  method: "get",
  path: "/openapi.json",
  summary: "This OpenAPI 3.1 document",
  responses: { 200: { description: "The document", content: { "application/json": { schema: z.record(z.string(), z.unknown()) } } } },
});

type Operation = { security?: Record<string, string[]>[]; "x-auth"?: Credential };

/** The document for `app` (its routes as registered so far), with every operation's credential filled in. */
export function openApiDocument(app: OpenAPIHono<AppEnv>): Record<string, unknown> {
  const doc = app.getOpenAPI31Document({
    openapi: "3.1.0",
    info: {
      title: "Sophie Gateway",
      version: "0.1.0",
      description: 'A contract-first AI agent gateway on Cloudflare Workers. Errors are {"error":{"code","message"}} (S3).',
    },
  });
  doc.components = {
    ...doc.components,
    securitySchemes: {
      admin: { type: "http", scheme: "bearer", description: "GATEWAY_ADMIN_TOKEN" },
      api: { type: "http", scheme: "bearer", description: "a token of GATEWAY_API_TOKENS (callerId:token)" },
      sandbox: { type: "http", scheme: "bearer", description: "a sandbox token minted for that one session" },
    },
  };
  // Each operation carries the credential of the door it was mounted through; one mounted through none needs nothing.
  for (const item of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(item as Record<string, Operation>)) {
      const credential = op["x-auth"] ?? "none";
      op.security = securityOf(credential);
      op["x-auth"] = credential;
    }
  }
  return doc as unknown as Record<string, unknown>;
}

/** Serves the document; register it after every other route. */
export function registerOpenApi(app: OpenAPIHono<AppEnv>): void {
  let cached: Record<string, unknown> | undefined;
  app.openapi(docRoute, (c) => {
    cached ??= openApiDocument(app);
    return c.json(cached, 200);
  });
}
