/**
 * The OpenAPI 3.1 document (DESIGN §3; issue 11 item 2): generated from the routes' own Zod schemas, served at
 * /openapi.json, and complete — a route registered without documentation fails here.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../src/http/app";
import { scopeOfPath } from "../src/http/openapi";
import { createLogger } from "../src/observability/logger";

const app = createApp({ logger: createLogger("error") });

async function document(): Promise<any> {
  const res = await app.request("https://gateway.test/openapi.json", {}, env);
  expect(res.status).toBe(200);
  return res.json();
}

/** Hono's registered handlers (middleware excluded), as OpenAPI method + path. */
function registered(): string[] {
  const seen = new Set<string>();
  for (const r of app.routes) {
    if (r.method === "ALL") continue;
    seen.add(`${r.method.toLowerCase()} ${r.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`);
  }
  return [...seen].sort();
}

describe("OpenAPI 3.1 at /openapi.json", () => {
  it("every registered route is documented, and nothing undocumented is served", async () => {
    const doc = await document();
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`))
      .sort();
    expect(registered()).toEqual(documented);
    console.log(`openapi: ${documented.length} of ${registered().length} registered routes documented`);
    expect(documented.length).toBeGreaterThanOrEqual(30);
  });

  it("is OpenAPI 3.1 with an info block, bearer schemes and, on every operation, responses and the credential it needs", async () => {
    const doc = await document();
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info).toMatchObject({ title: "Sophie Gateway", version: "0.1.0" });
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["admin", "api", "sandbox"]);
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        expect(Object.keys(op.responses ?? {}).length, `${method} ${path}`).toBeGreaterThan(0);
        const scope = scopeOfPath(path.replace(/\{[^}]+\}/g, "x"));
        expect(op["x-auth"], `${method} ${path}`).toBe(scope);
        expect(op.security, `${method} ${path}`).toEqual(["admin", "api", "sandbox"].includes(scope) ? [{ [scope]: [] }] : []);
      }
    }
  });

  it("the scopes match what the routes enforce: an admin route refuses an api token, an api route the admin token", async () => {
    const doc = await document();
    expect(doc.paths["/api/admin/jobs"].get["x-auth"]).toBe("admin");
    expect(doc.paths["/v1/runs"].post["x-auth"]).toBe("api");
    expect(doc.paths["/proliferate/{session_id}/tools/{tool_name}"].post["x-auth"]).toBe("sandbox");
    expect(doc.paths["/webhooks/slack/{agent_id}"].post["x-auth"]).toBe("signature");
    expect(doc.paths["/healthz"].get.security).toEqual([]);
    // Request bodies come from the same Zod schemas the routes validate with.
    expect(doc.paths["/v1/runs"].post.requestBody.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/RunRequest" });
    expect(doc.components.schemas.RunRequest.required).toEqual(["agent_id", "message"]);
  });
});
