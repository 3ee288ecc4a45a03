/**
 * Startup validation (S1 §1.6, DESIGN §2): strict | warn | off, run once per
 * isolate before the first request that needs the provider and on
 * `GET /healthz?deep=1`; one actionable line; never a secret.
 * The provider is mocked at the network boundary (test/support/outbound.ts).
 */
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { StartupValidator, VALIDATION_RETRY_AFTER_MS, type ValidationOptions } from "../../src/providers/startup-validation";
import { requestsTo, testConfig, uniqueHost } from "../support/config";

const KEY = "mk-test-secret-key-0123456789abcdefXYZ";
/** The test env without any provider key (a developer's .dev.vars must not leak one in). */
const { MOONSHOT_API_KEY: _ignored, ...noKey } = env;

/** Everything the console printed during a test. */
let printed: string[] = [];
beforeEach(() => {
  printed = [];
  for (const method of ["log", "info", "warn", "error", "debug"] as const) {
    vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      printed.push(args.map(String).join(" "));
    });
  }
});
afterEach(() => {
  vi.restoreAllMocks();
  // S1 §1.3/§1.6: the key never appears in anything the gateway printed.
  expect(printed.join("\n")).not.toContain(KEY);
  expect(printed.join("\n")).not.toContain(KEY.slice(8, 24));
});

function gateway(scenario: string, mode: "strict" | "warn" | "off", options: ValidationOptions = {}) {
  const host = uniqueHost(scenario);
  const app = createApp({ config: testConfig(host, { startupValidation: mode }), startupValidator: new StartupValidator(options) });
  return { host, app };
}

async function deep(app: ReturnType<typeof createApp>, bindings: object = { ...env, MOONSHOT_API_KEY: KEY }) {
  const res = await app.request("https://gateway.test/healthz?deep=1", {}, bindings);
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const validationLines = () => printed.filter((l) => l.includes('"event":"startup.validation"')).map((l) => JSON.parse(l));

describe("GET /healthz?deep=1", () => {
  it("US-STARTUP-001 a reachable provider that lists the model validates (one GET /models, with the key)", async () => {
    const { host, app } = gateway("ok", "strict");
    expect(await deep(app)).toEqual({
      status: 200,
      body: { ok: true, startup_validation: { mode: "strict", status: "ok", provider: "moonshot", model: "kimi-k1-128k" } },
    });
    expect(await requestsTo(host)).toEqual([{ method: "GET", host, path: "/v1/models", authorized: true }]);
  });

  it("plain /healthz never calls the provider", async () => {
    const { host, app } = gateway("ok", "strict");
    const res = await app.request("https://gateway.test/healthz", {}, { ...env, MOONSHOT_API_KEY: KEY });
    expect(await res.json()).toEqual({ ok: true });
    expect(await requestsTo(host)).toEqual([]);
  });

  it("a bad deep value is a 400 naming the field", async () => {
    const { app } = gateway("ok", "strict");
    const res = await app.request("https://gateway.test/healthz?deep=yes", {}, env);
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.code).toBe("invalid.request");
  });
});

describe("strict: 503 with one actionable line until the default model validates", () => {
  const cases: [string, string, object, string, string][] = [
    [
      "missing key",
      "ok",
      { ...noKey },
      "missing_key",
      'startup validation (strict) failed for moonshot:kimi-k1-128k: Missing MOONSHOT_API_KEY — set it with "wrangler secret put MOONSHOT_API_KEY" (or in .dev.vars locally)',
    ],
    [
      "key rejected",
      "unauthorized",
      { ...env, MOONSHOT_API_KEY: KEY },
      "auth_rejected",
      "startup validation (strict) failed for moonshot:kimi-k1-128k: the provider rejected the API key (HTTP 401) — check MOONSHOT_API_KEY",
    ],
    [
      "model not offered",
      "nomodel",
      { ...env, MOONSHOT_API_KEY: KEY },
      "model_not_offered",
      'startup validation (strict) failed for moonshot:kimi-k1-128k: the provider does not list model "kimi-k1-128k" — check the model id in config',
    ],
    [
      "provider 500",
      "error500",
      { ...env, MOONSHOT_API_KEY: KEY },
      "provider_error",
      "startup validation (strict) failed for moonshot:kimi-k1-128k: GET /models answered HTTP 500",
    ],
  ];
  for (const [name, scenario, bindings, reason, message] of cases) {
    it(`${name} → 503 provider.unavailable, reason ${reason}, exactly one error log line`, async () => {
      const { host, app } = gateway(scenario, "strict");
      const expected = message.replaceAll("HOST", host);
      expect(await deep(app, bindings)).toEqual({ status: 503, body: { error: { code: "provider.unavailable", message: expected } } });
      expect(expected).not.toContain("\n");
      // ISSUE20-§5: /healthz?deep=1 needs no token, and strict mode shows this line to every caller.
      expect(expected).not.toContain(host);
      const lines = validationLines();
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({
        level: "error",
        provider: "moonshot",
        model: "kimi-k1-128k",
        mode: "strict",
        status: "failed",
        reason,
        message: expected,
      });
    });
  }

  it("a missing key fails before any request reaches the provider", async () => {
    const { host, app } = gateway("ok", "strict");
    await deep(app, { ...noKey });
    expect(await requestsTo(host)).toEqual([]);
  });

  it("ISSUE20-§5 no validation failure names the provider's host: /healthz?deep=1 is public", async () => {
    const refused: typeof fetch = async () => {
      throw new TypeError("Network connection lost.");
    };
    for (const [scenario, options] of [
      ["nomodel", {}],
      ["error500", {}],
      ["ok", { fetch: refused }],
      ["slow", { timeoutMs: 200 }],
    ] as const) {
      const { host, app } = gateway(scenario, "strict", options);
      const res = await deep(app);
      expect(res.status).toBe(503);
      expect(JSON.stringify(res.body)).not.toContain(host);
      expect(res.body.error.message).toContain("moonshot");
    }
  });

  it("a connection failure → reason unreachable", async () => {
    // Miniflare's outbound mock cannot drop a connection, so the network failure is injected at fetch itself.
    const refused: typeof fetch = async () => {
      throw new TypeError("Network connection lost.");
    };
    const { app } = gateway("ok", "strict", { fetch: refused });
    expect(await deep(app)).toEqual({
      status: 503,
      body: {
        error: {
          code: "provider.unavailable",
          message: `startup validation (strict) failed for moonshot:kimi-k1-128k: cannot reach the provider — check models.providers.moonshot.baseUrl and the network`,
        },
      },
    });
  });

  it("a provider slower than the timeout → reason timeout", async () => {
    const { app } = gateway("slow", "strict", { timeoutMs: 200 });
    expect(await deep(app)).toEqual({
      status: 503,
      body: {
        error: {
          code: "provider.unavailable",
          message: `startup validation (strict) failed for moonshot:kimi-k1-128k: no answer from the provider within 200 ms — check models.providers.moonshot.baseUrl`,
        },
      },
    });
  });

  it("require() refuses routes that need the provider while strict validation fails, and lets them through once it passes", async () => {
    let now = 1_000_000;
    const validator = new StartupValidator({ now: () => now });
    const logger = createLogger("info");
    const failing = testConfig(uniqueHost("ok"), { startupValidation: "strict" });
    await expect(validator.require({}, failing, logger)).rejects.toMatchObject({ code: "provider.unavailable", status: 503 });
    now += VALIDATION_RETRY_AFTER_MS;
    await expect(validator.require({ MOONSHOT_API_KEY: KEY }, failing, logger)).resolves.toMatchObject({ status: "ok" });
  });
});

describe("warn: the gateway carries on with one warning line", () => {
  it("missing key → 200 with status failed and a single warn line", async () => {
    const { app } = gateway("ok", "warn");
    const { status, body } = await deep(app, { ...noKey });
    expect(status).toBe(200);
    expect(body).toEqual({
      ok: true,
      startup_validation: {
        mode: "warn",
        status: "failed",
        provider: "moonshot",
        model: "kimi-k1-128k",
        reason: "missing_key",
        message:
          'startup validation (warn) failed for moonshot:kimi-k1-128k: Missing MOONSHOT_API_KEY — set it with "wrangler secret put MOONSHOT_API_KEY" (or in .dev.vars locally)',
      },
    });
    const lines = validationLines();
    expect(lines).toHaveLength(1);
    expect(lines[0]?.level).toBe("warn");
  });

  it("require() lets requests through in warn mode even when validation fails", async () => {
    const validator = new StartupValidator();
    const config = testConfig(uniqueHost("unauthorized"), { startupValidation: "warn" });
    await expect(validator.require({ MOONSHOT_API_KEY: KEY }, config, createLogger())).resolves.toMatchObject({
      status: "failed",
      reason: "auth_rejected",
    });
  });
});

describe("off: validation skipped", () => {
  it("off → skipped, no request, no key needed", async () => {
    const { host, app } = gateway("ok", "off");
    expect(await deep(app, { ...noKey })).toEqual({
      status: 200,
      body: { ok: true, startup_validation: { mode: "off", status: "skipped", provider: "moonshot", model: "kimi-k1-128k" } },
    });
    expect(await requestsTo(host)).toEqual([]);
  });
});

describe("once per isolate", () => {
  it("a success is remembered: later checks make no request", async () => {
    const { host, app } = gateway("ok", "strict");
    await deep(app);
    await deep(app);
    await deep(app);
    expect(await requestsTo(host)).toHaveLength(1);
    expect(validationLines()).toHaveLength(1);
  });

  it("concurrent first checks share one provider request", async () => {
    const { host, app } = gateway("ok", "strict");
    const results = await Promise.all(Array.from({ length: 10 }, () => deep(app)));
    expect(new Set(results.map((r) => r.status))).toEqual(new Set([200]));
    expect(await requestsTo(host)).toHaveLength(1);
  });

  it("a failure is re-checked only after the retry interval", async () => {
    let now = 5_000_000;
    const { host, app } = gateway("error500", "strict", { now: () => now });
    await deep(app);
    await deep(app);
    expect(await requestsTo(host)).toHaveLength(1);
    now += VALIDATION_RETRY_AFTER_MS - 1;
    await deep(app);
    expect(await requestsTo(host)).toHaveLength(1);
    now += 1;
    await deep(app);
    expect(await requestsTo(host)).toHaveLength(2);
  });
});

describe("S1 §1.6 strict: a turn waits for the default model to validate", () => {
  const ALICE = "test-api-token-alice-0123456789";
  async function chat(app: ReturnType<typeof createApp>, bindings: object, room: string) {
    const res = await app.request(
      "https://gateway.test/v1/chat/messages",
      {
        method: "POST",
        headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
        body: JSON.stringify({ user_id: "u1", room_id: room, agent_id: "main", message: "hello" }),
      },
      bindings,
    );
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  }
  const withKey = { ...env, MOONSHOT_API_KEY: KEY };
  const sessionsOf = async (room: string) =>
    (await env.DB.prepare("SELECT COUNT(*) AS n FROM sessions WHERE session_key LIKE ?1").bind(`%~${room}:%`).first<{ n: number }>())?.n;

  it("S1 §1.6 strict and the model not offered → POST /v1/chat/messages 503 provider.unavailable with the actionable line; nothing stored, no model call", async () => {
    const { host, app } = gateway("nomodel", "strict");
    const room = `strict-${crypto.randomUUID().slice(0, 8)}`;
    expect(await chat(app, withKey, room)).toEqual({
      status: 503,
      body: {
        error: {
          code: "provider.unavailable",
          message:
            'startup validation (strict) failed for moonshot:kimi-k1-128k: the provider does not list model "kimi-k1-128k" — check the model id in config',
        },
      },
    });
    expect(await requestsTo(host)).toEqual([{ method: "GET", host, path: "/v1/models", authorized: true }]);
    expect(await sessionsOf(room)).toBe(0);
    // Within the retry interval a second turn is refused from the remembered outcome, without asking the provider again.
    expect((await chat(app, withKey, room)).status).toBe(503);
    expect(await requestsTo(host)).toHaveLength(1);
  });

  it("S1 §1.6 strict and a provider that validates → the turn is queued; the isolate checks once, not per turn", async () => {
    const { host, app } = gateway("ok", "strict");
    const room = `strict-ok-${crypto.randomUUID().slice(0, 8)}`;
    const first = await chat(app, withKey, room);
    expect(first.status).toBe(202);
    expect(first.body.status).toBe("queued");
    expect((await chat(app, withKey, room)).status).toBe(202);
    const models = (await requestsTo(host)).filter((r) => r.path === "/v1/models");
    expect(models).toEqual([{ method: "GET", host, path: "/v1/models", authorized: true }]);
  });

  it("S1 §1.6 warn never holds a turn: the model not offered → 202, and no validation request on the turn's path", async () => {
    const { host, app } = gateway("nomodel", "warn");
    const room = `warn-${crypto.randomUUID().slice(0, 8)}`;
    expect((await chat(app, withKey, room)).status).toBe(202);
    expect((await requestsTo(host)).filter((r) => r.path === "/v1/models")).toEqual([]);
  });
});
