/**
 * HTTP skeleton (issue 2, DESIGN §2 "Auth", §3): request ids, healthz, the
 * bearer-auth matrix and the S3 error envelope for 400/401/403/404/413/500.
 *
 * The auth matrix and the 400/413/500 envelopes are exercised on probe routes
 * mounted on the real app with the real middleware: the DESIGN §3 routes that
 * use them arrive with later issues, and none is registered before it works.
 */

import { env } from "cloudflare:workers";
import { createRoute, z } from "@hono/zod-openapi";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { requireScope } from "../../src/http/middleware/auth";
import { requireJsonBody } from "../../src/http/middleware/json-body";
import worker from "../../src/index";
import { createLogger } from "../../src/observability/logger";

const ADMIN = "test-admin-token-0123456789abcdef";
const ALICE = "test-api-token-alice-0123456789";

/** The real app plus probe routes that need each scope, parse a JSON body, or throw. */
function probeApp(lines: string[] = []) {
  const app = createApp({ logger: createLogger("debug", (line) => lines.push(line)) });
  app.get("/probe/api", requireScope("api"), (c) => c.json({ principal: c.get("principal") }));
  app.get("/probe/admin", requireScope("admin"), (c) => c.json({ principal: c.get("principal") }));
  const probeJson = createRoute({
    method: "post",
    path: "/probe/json",
    middleware: [requireScope("api"), requireJsonBody] as const,
    request: {
      body: {
        required: true,
        content: { "application/json": { schema: z.strictObject({ agent_id: z.string().min(1), message: z.string() }) } },
      },
    },
    responses: { 200: { description: "accepted" } },
  });
  app.openapi(probeJson, (c) => c.json({ ok: true, agent_id: c.req.valid("json").agent_id }, 200));
  app.get("/probe/crash", () => {
    throw new Error(`database exploded at /srv/app/secret.ts:42 with key ${ADMIN}`);
  });
  return app;
}

function call(app: ReturnType<typeof probeApp>, path: string, init: RequestInit = {}, bindings: object = env) {
  return app.request(`https://gateway.test${path}`, init, bindings);
}

const bearer = (token: string) => ({ headers: { Authorization: `Bearer ${token}` } });

describe("GET /healthz", () => {
  it("S3 §5 healthz answers {ok:true} without auth", async () => {
    const res = await worker.fetch(new Request("https://gateway.test/healthz"), env, {} as ExecutionContext);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
  });
});

describe("request ids", () => {
  it("every response carries X-Request-Id, generated as req_<uuid>", async () => {
    const app = probeApp();
    for (const path of ["/healthz", "/nope", "/probe/api"]) {
      const res = await call(app, path);
      expect(res.headers.get("X-Request-Id")).toMatch(/^req_[0-9a-f-]{36}$/);
    }
  });

  it("a well-formed caller request id is echoed; an oversized or odd one is replaced", async () => {
    const app = probeApp();
    const echoed = await call(app, "/healthz", { headers: { "X-Request-Id": "trace-abc_123" } });
    expect(echoed.headers.get("X-Request-Id")).toBe("trace-abc_123");
    const long = await call(app, "/healthz", { headers: { "X-Request-Id": "a".repeat(129) } });
    expect(long.headers.get("X-Request-Id")).toMatch(/^req_/);
    const odd = await call(app, "/healthz", { headers: { "X-Request-Id": "<script>" } });
    expect(odd.headers.get("X-Request-Id")).toMatch(/^req_/);
  });
});

describe("auth matrix (bearer tokens, scopes api and admin)", () => {
  const app = probeApp();
  const cases: [string, string, RequestInit, number, string, string?][] = [
    ["no token", "/probe/api", {}, 401, "auth.unauthorized", "missing bearer token: send Authorization: Bearer <token>"],
    ["wrong token", "/probe/api", bearer("wrong-token-0123456789abcdef"), 401, "auth.unauthorized", "invalid bearer token"],
    [
      "basic scheme",
      "/probe/api",
      { headers: { Authorization: `Basic ${btoa(`alice:${ALICE}`)}` } },
      401,
      "auth.unauthorized",
      'malformed Authorization header: expected "Bearer <token>"',
    ],
    [
      "bearer without token",
      "/probe/api",
      { headers: { Authorization: "Bearer" } },
      401,
      "auth.unauthorized",
      'malformed Authorization header: expected "Bearer <token>"',
    ],
    [
      "two spaces",
      "/probe/api",
      { headers: { Authorization: `Bearer  ${ALICE}` } },
      401,
      "auth.unauthorized",
      'malformed Authorization header: expected "Bearer <token>"',
    ],
    [
      "token plus junk",
      "/probe/api",
      { headers: { Authorization: `Bearer ${ALICE} extra` } },
      401,
      "auth.unauthorized",
      'malformed Authorization header: expected "Bearer <token>"',
    ],
    [
      "callerId:token as the token",
      "/probe/api",
      bearer(`alice:${ALICE}`),
      401,
      "auth.unauthorized",
      'malformed Authorization header: expected "Bearer <token>"',
    ],
    [
      "token in query (access_token)",
      `/probe/api?access_token=${ALICE}`,
      {},
      401,
      "auth.unauthorized",
      'credentials are not accepted in the query string ("access_token"); send Authorization: Bearer <token>',
    ],
    [
      "token in query even with a valid header",
      `/probe/api?token=${ALICE}`,
      bearer(ALICE),
      401,
      "auth.unauthorized",
      'credentials are not accepted in the query string ("token"); send Authorization: Bearer <token>',
    ],
    [
      "api token on an admin route",
      "/probe/admin",
      bearer(ALICE),
      403,
      "auth.forbidden",
      'this route needs a token with the "admin" scope',
    ],
    ["admin token on an api route", "/probe/api", bearer(ADMIN), 403, "auth.forbidden", 'this route needs a token with the "api" scope'],
    ["a prefix of a valid token", "/probe/api", bearer(ALICE.slice(0, -1)), 401, "auth.unauthorized", "invalid bearer token"],
    [
      "a spoofed local origin does not help",
      "/probe/admin",
      { headers: { "X-Forwarded-For": "127.0.0.1", "CF-Connecting-IP": "127.0.0.1", Host: "localhost" } },
      401,
      "auth.unauthorized",
    ],
  ];
  for (const [name, path, init, status, code, message] of cases) {
    it(`${name} → ${status} ${code}`, async () => {
      const res = await call(app, path, init);
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe(code);
      if (message) expect(body.error.message).toBe(message);
      expect(Object.keys(body)).toEqual(["error"]);
      if (status === 401) expect(res.headers.get("WWW-Authenticate")).toMatch(/^Bearer realm="sophie-gateway"/);
    });
  }

  it("api tokens authenticate as their caller id", async () => {
    const res = await call(app, "/probe/api", bearer("test-api-token-bob-0123456789ab"));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ principal: { scope: "api", callerId: "bob" } });
  });

  it("the admin token authenticates with the admin scope", async () => {
    const res = await call(app, "/probe/admin", bearer(ADMIN));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ principal: { scope: "admin" } });
  });

  it("the scheme name is case-insensitive (RFC 7235)", async () => {
    const res = await call(app, "/probe/api", { headers: { Authorization: `bearer ${ALICE}` } });
    expect(res.status).toBe(200);
  });

  it("empty configured tokens let nobody in (fail-closed)", async () => {
    const bindings = { ...env, GATEWAY_ADMIN_TOKEN: "", GATEWAY_API_TOKENS: "" };
    expect((await call(app, "/probe/admin", bearer(ADMIN), bindings)).status).toBe(401);
    expect((await call(app, "/probe/api", bearer(ALICE), bindings)).status).toBe(401);
    const whitespace = { ...env, GATEWAY_ADMIN_TOKEN: "   ", GATEWAY_API_TOKENS: " , ," };
    expect((await call(app, "/probe/admin", bearer("   "), whitespace)).status).toBe(401);
  });

  it("unset tokens let nobody in (fail-closed)", async () => {
    const { GATEWAY_ADMIN_TOKEN: _a, GATEWAY_API_TOKENS: _b, ...rest } = env;
    expect((await call(app, "/probe/admin", bearer(ADMIN), rest)).status).toBe(401);
    expect((await call(app, "/probe/api", bearer(ALICE), rest)).status).toBe(401);
  });

  it("configured tokens shorter than 16 characters, or entries without a caller id, are refused and logged without their value", async () => {
    const lines: string[] = [];
    const logged = probeApp(lines);
    const bindings = {
      ...env,
      GATEWAY_ADMIN_TOKEN: "short-admin",
      GATEWAY_API_TOKENS: "carol:short-token,:no-caller-id-0123456789,dave:dave-token-0123456789abcd",
    };
    expect((await call(logged, "/probe/admin", bearer("short-admin"), bindings)).status).toBe(401);
    expect((await call(logged, "/probe/api", bearer("short-token"), bindings)).status).toBe(401);
    expect((await call(logged, "/probe/api", bearer("no-caller-id-0123456789"), bindings)).status).toBe(401);
    expect((await call(logged, "/probe/api", bearer("dave-token-0123456789abcd"), bindings)).status).toBe(200);
    const rejected = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "auth.config_rejected");
    expect(rejected.map((l) => [l.variable, l.problem])).toEqual([
      ["GATEWAY_ADMIN_TOKEN", "shorter than 16 characters; ignored"],
      ["GATEWAY_API_TOKENS", 'entry 1: token for "carol" shorter than 16 characters; ignored'],
      ["GATEWAY_API_TOKENS", "entry 2: expected callerId:token with callerId of letters, digits, _ . -; ignored"],
    ]);
    const all = lines.join("\n");
    expect(all).not.toContain("short-admin");
    expect(all).not.toContain("short-token");
    expect(all).not.toContain("no-caller-id-0123456789");
  });
});

describe("error envelopes (S3 {error:{code,message}})", () => {
  const app = probeApp();

  /** POSTs an 8 MiB body as 128 chunks of 64 KiB and reports how many chunks the gateway pulled. */
  async function postStream(headers: Record<string, string>) {
    let count = 0;
    const body = new ReadableStream({
      pull(controller) {
        count++;
        controller.enqueue(new Uint8Array(64 * 1024));
        if (count >= 128) controller.close();
      },
    });
    const init = { method: "POST", headers: { Authorization: `Bearer ${ALICE}`, ...headers }, body, duplex: "half" };
    const res = await call(app, "/probe/json", init as RequestInit);
    return { res, pulled: () => count };
  }

  it("unknown route → 404 resource.not_found", async () => {
    const res = await call(app, "/v1/nothing-here");
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: { code: "resource.not_found", message: "no route for GET /v1/nothing-here" } });
  });

  it("paths beside the registered pages and routes are 404, not catch-alls", async () => {
    for (const path of ["/admin/runs", "/docs/index.html", "/api/admin", "/api/admin/dashboard"]) {
      const res = await call(app, path, bearer(ADMIN));
      expect(res.status, path).toBe(404);
      expect(await res.json()).toEqual({ error: { code: "resource.not_found", message: `no route for GET ${path}` } });
    }
  });

  it("invalid JSON → 400 invalid.request", async () => {
    const res = await call(app, "/probe/json", {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
      body: '{"agent_id": ',
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("invalid.request");
    expect(body.error.message).toBe("Malformed JSON in request body");
  });

  it("a body that is not JSON → 400 invalid.request, not validated as {}", async () => {
    const res = await call(app, "/probe/json", {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "text/plain" },
      body: "agent_id=main",
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { code: "invalid.request", message: "Content-Type must be application/json" } });
  });

  it("schema failure → 400 invalid.request naming the field", async () => {
    const init = (body: unknown) => ({
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const missing = await call(app, "/probe/json", init({ message: "hi" }));
    expect(missing.status).toBe(400);
    expect(await missing.json()).toEqual({ error: { code: "invalid.request", message: "agent_id is required" } });
    const wrongType = await call(app, "/probe/json", init({ agent_id: 7, message: "hi" }));
    expect(await wrongType.json()).toEqual({
      error: { code: "invalid.request", message: "agent_id: Invalid input: expected string, received number" },
    });
    const unknown = await call(app, "/probe/json", init({ agent_id: "main", message: "hi", extra: 1 }));
    expect(await unknown.json()).toEqual({ error: { code: "invalid.request", message: "unknown field extra" } });
  });

  it("body over the configured limit (default 1 MiB) → 413 payload.too_large, decided from Content-Length before reading", async () => {
    // The stream would produce 8 MiB, but the Content-Length already says too much.
    const { res, pulled } = await postStream({ "Content-Length": String(8 * 1024 * 1024) });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: { code: "payload.too_large", message: "request body exceeds 1048576 bytes" } });
    expect(pulled()).toBeLessThanOrEqual(2);
  });

  it("chunked body over the limit → 413 after reading just past the limit, not the whole body", async () => {
    const { res, pulled } = await postStream({});
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: { code: "payload.too_large", message: "request body exceeds 1048576 bytes" } });
    // 1 MiB is 16 chunks of 64 KiB; the 17th crosses the limit. Never the 128 chunks of the whole body.
    expect(pulled()).toBeLessThan(24);
  });

  it("a body exactly at the limit is accepted", async () => {
    const text = JSON.stringify({ agent_id: "main", message: "" });
    const padded = `${text.slice(0, -2) + "x".repeat(1024 * 1024 - text.length)}"}`;
    expect(padded.length).toBe(1024 * 1024);
    const res = await call(app, "/probe/json", {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
      body: padded,
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, agent_id: "main" });
  });

  it("unexpected error → 500 internal.error with no stack or internal detail; the log line is redacted", async () => {
    const lines: string[] = [];
    const res = await call(probeApp(lines), "/probe/crash");
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ error: { code: "internal.error", message: "internal error" } });
    expect(text).not.toMatch(/exploded|secret\.ts|at \//);
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.event === "http.error");
    expect(logged).toMatchObject({ level: "error", code: "internal.error", status: 500, error_name: "Error" });
    expect(logged.error_message).toBe("database exploded at /srv/app/secret.ts:42 with key [REDACTED:secret]");
    expect(lines.join("\n")).not.toContain(ADMIN);
  });
});
