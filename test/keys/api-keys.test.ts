/**
 * Issue 25 §1 "API keys as records" (D-077), end to end through the HTTP surface with real D1 and SessionDOs, the
 * model provider mocked at the network: the admin routes (exact bodies), the key shown once and stored as a salted
 * hash only, `sgw_` keys on /v1 and the OpenAI routes (agents, 403, /v1/models), GATEWAY_API_TOKENS unchanged, a
 * rotated, revoked or expired key refused within the propagation bound (a cached isolate included), forged keys, the
 * per-key request rate under 50 concurrent requests, and the per-key token budget under concurrent sessions.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import type { GatewayConfig } from "../../src/config/schema";
import { forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { mintSecret, secretMatches } from "../../src/keys/format";
import { KEY_PROPAGATION_MS } from "../../src/keys/lookup";
import { revokeKey, rotateKey } from "../../src/keys/store";
import { keyTokensUsed, reserveCallerTokens } from "../../src/runs/token-budget";
import { ADMIN_REFRESH_MS, forgetAdminGenerations } from "../../src/storage/admin-generation";
import { bodiesSentTo, mockProvider, requestsTo, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, readResponse, waitForRun } from "../support/runs";

const KEY = /^sgw_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const label = () => crypto.randomUUID().slice(0, 8);
const MISSING_RUN = `run_${"0".repeat(80)}`;

/** Two agents, `alpha` and `beta`, on the mock provider at `host`; an alias `fast` → beta. */
function twoAgents(host = "ok.provider.test", agent: Record<string, unknown> = {}): GatewayConfig {
  const parsed = parseGatewayConfig({
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: mockProvider(host, {
          models: { "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: false } },
        }) as never,
      },
    },
    agents: { alpha: agent as never, beta: {} },
    openai: { aliases: { fast: "beta" } },
  });
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return parsed.value;
}

async function createKey(app: App, body: Record<string, unknown>) {
  const res = await call(app, "POST", "/api/admin/keys", { caller_id: "carol", label: `k-${label()}`, agents: "all", ...body }, ADMIN);
  if (res.status !== 201) throw new Error(`POST /api/admin/keys answered ${res.status}: ${res.text}`);
  return res.body as { key: string; key_id: string; [k: string]: unknown };
}

const keyRow = (keyId: string) => env.DB.prepare("SELECT * FROM api_keys WHERE key_id = ?1").bind(keyId).first<Record<string, unknown>>();

const auditOfGateway = async (app: App, keyId: string) => {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=gateway&date=${new Date().toISOString().slice(0, 10)}`, undefined, ADMIN);
  if (res.status !== 200) return { events: [] as any[], text: "" };
  const events = res.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => String(e.event_type).startsWith("api_key.") && e.payload.key_id === keyId);
  return { events, text: res.text };
};

const UNAUTHORIZED = { error: { code: "auth.unauthorized", message: "invalid bearer token" } };

afterEach(() => {
  vi.useRealTimers();
});

describe("ISSUE25-1 admin routes: create, list, rotate, revoke", () => {
  it("ISSUE25-1 POST /api/admin/keys → 201 with the key shown once; D1 holds only a salted hash; audited without the key", async () => {
    const app = appFor(twoAgents());
    const res = await call(
      app,
      "POST",
      "/api/admin/keys",
      { caller_id: "carol", label: "ci bot", agents: ["alpha"], limits: { requestsPerMinute: 30, tokensPerDay: 50_000 } },
      ADMIN,
    );
    expect(res.status).toBe(201);
    const key = res.body.key as string;
    const [, keyId, secret] = KEY.exec(key) ?? [];
    expect(res.body).toEqual({
      key_id: keyId,
      key,
      caller_id: "carol",
      label: "ci bot",
      agents: ["alpha"],
      prefix: `sgw_${keyId}_${secret?.slice(0, 4)}`,
      created_at: expect.stringMatching(ISO),
      rotated_at: null,
      last_used_at: null,
      expires_at: null,
      revoked_at: null,
      limits: { requestsPerMinute: 30, tokensPerDay: 50_000 },
    });
    // Stored: a salted SHA-256 of the secret, never the secret or the key.
    const row = (await keyRow(keyId as string)) as { salt: string; secret_hash: string };
    expect(JSON.stringify(row)).not.toContain(secret);
    expect(JSON.stringify(row)).not.toContain(key);
    expect(row.salt).toMatch(/^[0-9a-f]{32}$/);
    expect(row.secret_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(await secretMatches({ salt: row.salt, secretHash: row.secret_hash }, secret as string)).toBe(true);
    for (const table of ["api_keys", "api_key_requests", "api_key_token_usage", "admin_generation"]) {
      const all = await env.DB.prepare(`SELECT * FROM ${table}`).all();
      expect(JSON.stringify(all.results)).not.toContain(secret as string);
    }
    // Shown once: the list never carries it (nor a hash or salt).
    const list = await call(app, "GET", "/api/admin/keys?limit=200", undefined, ADMIN);
    expect(list.status).toBe(200);
    expect(list.text).not.toContain(secret);
    expect(list.text).not.toContain(row.secret_hash);
    expect(list.text).not.toContain(row.salt);
    const listed = list.body.keys.find((k: any) => k.key_id === keyId);
    const { key: _shown, ...withoutKey } = res.body;
    expect(listed).toEqual(withoutKey);
    // The key works: it is carol on the agents it lists.
    const run = await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "hi" }, key);
    expect(run.status).toBe(202);
    // Audited, without the key or its secret.
    await until(async () => (await auditOfGateway(app, keyId as string)).events.length === 1, 15_000);
    const { events, text } = await auditOfGateway(app, keyId as string);
    expect(events[0]).toMatchObject({
      event_type: "api_key.created",
      actor: "admin",
      agent_id: "gateway",
      payload: {
        key_id: keyId,
        caller_id: "carol",
        label: "ci bot",
        agents: ["alpha"],
        expires_at: null,
        limits: { requestsPerMinute: 30, tokensPerDay: 50_000 },
      },
    });
    expect(text).not.toContain(secret);
  }, 30_000);

  it("ISSUE25-1 validation: unknown agent, expiry not in the future, unknown fields → 400 naming it; nothing stored", async () => {
    const app = appFor(twoAgents());
    const before = (await env.DB.prepare("SELECT COUNT(*) AS n FROM api_keys").first<{ n: number }>())?.n;
    const post = (body: unknown) => call(app, "POST", "/api/admin/keys", body, ADMIN);
    const base = { caller_id: "carol", label: "x", agents: ["alpha"] };
    expect(await post({ ...base, agents: ["alpha", "nope"] })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: 'agents[1]: unknown agent "nope"' } },
    });
    expect(await post({ ...base, expires_at: "2020-01-01T00:00:00Z" })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "expires_at: must be in the future" } },
    });
    expect((await post({ ...base, expires_at: "tomorrow" })).body.error.message).toMatch(/^expires_at: /);
    expect(await post({ ...base, scopes: ["all"] })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "unknown field scopes" } },
    });
    expect(await post({ ...base, limits: { requestsPerHour: 5 } })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "unknown field limits.requestsPerHour" } },
    });
    expect(await post({ ...base, limits: { requestsPerMinute: 0 } })).toMatchObject({ status: 400 });
    expect(await post({ label: "x", agents: "all" })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "caller_id is required" } },
    });
    expect(await post({ ...base, caller_id: "api:carol" })).toMatchObject({ status: 400 });
    expect(await post({ ...base, agents: [] })).toMatchObject({ status: 400 });
    expect((await env.DB.prepare("SELECT COUNT(*) AS n FROM api_keys").first<{ n: number }>())?.n).toBe(before);
    // Only the admin token: an API token (env or key) is 403, none is 401.
    expect((await call(app, "POST", "/api/admin/keys", base, ALICE)).status).toBe(403);
    expect((await call(app, "GET", "/api/admin/keys", undefined, ALICE)).status).toBe(403);
  });

  it("ISSUE25-1 GET /api/admin/keys pages newest first like every list (limit, cursor → next_cursor)", async () => {
    const app = appFor(twoAgents());
    const made: { key_id: string }[] = [];
    for (let i = 0; i < 3; i++) {
      made.push(await createKey(app, { label: `page-${i}` }));
      await new Promise((r) => setTimeout(r, 5)); // distinct created_at
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: any = await call(app, "GET", `/api/admin/keys?limit=2${cursor ? `&cursor=${cursor}` : ""}`, undefined, ADMIN);
      expect(res.status).toBe(200);
      expect(res.body.keys.length).toBeLessThanOrEqual(2);
      for (const k of res.body.keys) expect(k).not.toHaveProperty("key");
      seen.push(...res.body.keys.map((k: any) => k.key_id));
      cursor = res.body.next_cursor;
      pages++;
    } while (cursor !== null && pages < 100);
    const mine = seen.filter((id) => made.some((m) => m.key_id === id));
    expect(mine).toEqual(made.map((m) => m.key_id).reverse());
    expect(new Set(seen).size).toBe(seen.length);
    expect(await call(app, "GET", "/api/admin/keys?cursor=bogus", undefined, ADMIN)).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "cursor is not valid for this list" } },
    });
  });

  it("ISSUE25-1 rotate → a new key shown once; the old one is 401 at once (no overlap); revoke → 401; both audited", async () => {
    const app = appFor(twoAgents());
    const created = await createKey(app, { agents: ["alpha"] });
    expect((await call(app, "GET", "/v1/models", undefined, created.key)).status).toBe(200);
    const rotated = await call(app, "POST", `/api/admin/keys/${created.key_id}/rotate`, undefined, ADMIN);
    expect(rotated.status).toBe(200);
    const [, id, secret] = KEY.exec(rotated.body.key) ?? [];
    expect(id).toBe(created.key_id);
    expect(rotated.body).toEqual({
      ...created,
      key: rotated.body.key,
      prefix: `sgw_${id}_${secret?.slice(0, 4)}`,
      rotated_at: expect.stringMatching(ISO),
      last_used_at: expect.anything(),
    });
    expect(rotated.body.key).not.toBe(created.key);
    expect(await call(app, "GET", "/v1/models", undefined, created.key)).toMatchObject({ status: 401 });
    expect((await call(app, "GET", "/v1/models", undefined, rotated.body.key)).status).toBe(200);

    const revoked = await call(app, "DELETE", `/api/admin/keys/${created.key_id}`, undefined, ADMIN);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ key_id: created.key_id, revoked_at: expect.stringMatching(ISO) });
    expect(revoked.body).not.toHaveProperty("key");
    expect(await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, rotated.body.key)).toMatchObject({
      status: 401,
      body: UNAUTHORIZED,
    });
    // Revoking again keeps the first time; a revoked key cannot be rotated back to life.
    const again = await call(app, "DELETE", `/api/admin/keys/${created.key_id}`, undefined, ADMIN);
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at);
    expect(await call(app, "POST", `/api/admin/keys/${created.key_id}/rotate`, undefined, ADMIN)).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no live key ${created.key_id} (unknown or revoked)` } },
    });
    expect(await call(app, "DELETE", "/api/admin/keys/0000000000000000", undefined, ADMIN)).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: "no key 0000000000000000" } },
    });
    expect((await call(app, "DELETE", "/api/admin/keys/not-a-key", undefined, ADMIN)).status).toBe(400);
    // Audited: created, rotated, revoked once — never the key.
    await until(async () => (await auditOfGateway(app, created.key_id)).events.length === 3, 15_000);
    const { events, text } = await auditOfGateway(app, created.key_id);
    expect(events.map((e) => e.event_type)).toEqual(["api_key.created", "api_key.rotated", "api_key.revoked"]);
    expect(text).not.toContain(created.key);
    expect(text).not.toContain(rotated.body.key);
    expect(text).not.toContain(secret);
  }, 30_000);
});

describe("ISSUE25-1 PATCH /api/admin/keys/{key_id}", () => {
  it("ISSUE25-1 changes label, agents, expiry and limits at once on this isolate; never the caller or the secret; audited", async () => {
    const app = appFor(twoAgents());
    const created = await createKey(app, { agents: ["alpha"], limits: { requestsPerMinute: 5 } });
    const patch = (body: unknown, id = created.key_id) => call(app, "PATCH", `/api/admin/keys/${id}`, body, ADMIN);
    const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
    const res = await patch({ label: "renamed", agents: ["beta"], expires_at: expiresAt, limits: { tokensPerDay: 9_000 } });
    expect(res.status).toBe(200);
    const { key: _key, ...before } = created;
    expect(res.body).toEqual({
      ...before,
      label: "renamed",
      agents: ["beta"],
      expires_at: expiresAt,
      limits: { tokensPerDay: 9_000 },
      last_used_at: null,
    });
    // In force at once: alpha is now forbidden, beta allowed; the same key (no new secret).
    expect((await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, created.key)).status).toBe(403);
    expect((await call(app, "GET", "/v1/models", undefined, created.key)).body.data.map((m: any) => m.id)).toEqual(["agent:beta", "fast"]);
    expect((await patch({ expires_at: null, limits: {} })).body).toMatchObject({ expires_at: null, limits: {} });
    expect((await patch({ agents: "all" })).body.agents).toBe("all");
    // Refusals name the field; nothing changes.
    expect(await patch({})).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "nothing to change: send label, agents, expires_at or limits" } },
    });
    expect(await patch({ caller_id: "mallory" })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "unknown field caller_id" } },
    });
    expect(await patch({ agents: ["ghost"] })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: 'agents[0]: unknown agent "ghost"' } },
    });
    expect(await patch({ expires_at: "2001-01-01T00:00:00Z" })).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "expires_at: must be in the future" } },
    });
    expect(await patch({ label: "x" }, "0000000000000000")).toMatchObject({ status: 404 });
    await call(app, "DELETE", `/api/admin/keys/${created.key_id}`, undefined, ADMIN);
    expect(await patch({ label: "back" })).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no live key ${created.key_id} (unknown or revoked)` } },
    });
    await until(async () => (await auditOfGateway(app, created.key_id)).events.length === 5, 15_000);
    const { events, text } = await auditOfGateway(app, created.key_id);
    expect(events.map((e) => e.event_type)).toEqual([
      "api_key.created",
      "api_key.updated",
      "api_key.updated",
      "api_key.updated",
      "api_key.revoked",
    ]);
    expect(text).not.toContain(created.key);
  }, 30_000);
});

describe("ISSUE25-1 sgw_ keys on /v1 and the OpenAI routes", () => {
  it("ISSUE25-1 a key used for an agent it may not use → 403 (S3 envelope on /v1, OpenAI's shape on the OpenAI routes)", async () => {
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, { agents: ["alpha"] });
    const forbidden = { error: { code: "auth.forbidden", message: `key ${key_id} may not use agent "beta"` } };
    expect(await call(app, "POST", "/v1/runs", { agent_id: "beta", message: "x" }, key)).toMatchObject({ status: 403, body: forbidden });
    expect(await call(app, "POST", "/v1/chat/messages", { agent_id: "beta", room_id: "r", user_id: "u", message: "x" }, key)).toMatchObject(
      { status: 403, body: forbidden },
    );
    const openai = { error: { message: `key ${key_id} may not use agent "beta"`, type: "permission_error", code: "auth.forbidden" } };
    for (const model of ["agent:beta", "fast"]) {
      const res = await call(app, "POST", "/v1/chat/completions", { model, messages: [{ role: "user", content: "x" }] }, key);
      expect(res).toMatchObject({ status: 403 });
      expect(res.body).toEqual(openai);
    }
    const socket = await app.request(
      "https://gateway.test/v1/chat/socket?agent_id=beta&room_id=r&user_id=u",
      { headers: { Authorization: `Bearer ${key}`, Upgrade: "websocket" } },
      env,
    );
    expect(socket.status).toBe(403);
    expect(await socket.json()).toEqual(forbidden);
    // Nothing was queued for beta.
    const runs = await env.DB.prepare("SELECT COUNT(*) AS n FROM runs WHERE agent_id = 'beta' AND caller_id = 'carol'").first<{
      n: number;
    }>();
    expect(runs?.n ?? 0).toBe(0);
  });

  it("ISSUE25-1 GET /v1/models lists only the key's agents (and their aliases); GATEWAY_API_TOKENS callers see every agent", async () => {
    const app = appFor(twoAgents());
    const ids = async (token: string) => (await call(app, "GET", "/v1/models", undefined, token)).body.data.map((m: any) => m.id);
    expect(await ids((await createKey(app, { agents: ["alpha"] })).key)).toEqual(["agent:alpha"]);
    expect(await ids((await createKey(app, { agents: ["beta"] })).key)).toEqual(["agent:beta", "fast"]);
    expect(await ids((await createKey(app, { agents: "all" })).key)).toEqual(["agent:alpha", "agent:beta", "fast"]);
    expect(await ids(ALICE)).toEqual(["agent:alpha", "agent:beta", "fast"]);
  });

  it("ISSUE25-1 a key acts as its caller: api:<caller_id> owns its runs; GATEWAY_API_TOKENS keep working with every agent", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "from carol" }, { content: "from alice" }]);
    const app = appFor(twoAgents(host));
    const { key } = await createKey(app, { caller_id: "carol", agents: ["alpha"] });
    const id = (await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "hi" }, key)).body.id;
    expect(await waitForRun(app, id, key)).toMatchObject({ status: "completed", output: "from carol" });
    // Another caller (alice's env token) cannot read carol's run; alice's own token works on beta as before.
    expect((await call(app, "GET", `/v1/runs/${id}`, undefined, ALICE)).status).toBe(404);
    const mine = (await call(app, "POST", "/v1/runs", { agent_id: "beta", message: "hi" }, ALICE)).body.id;
    expect(await waitForRun(app, mine, ALICE)).toMatchObject({ status: "completed", output: "from alice" });
    const row = await env.DB.prepare("SELECT caller_id FROM runs WHERE run_id = ?1").bind(id).first<{ caller_id: string }>();
    expect(row?.caller_id).toBe("carol");
  }, 30_000);

  it("ISSUE25-1 two keys of one caller: a key restricted to alpha does not read, follow or cancel the caller's runs on beta (404, as another caller's)", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "on beta" }]);
    const app = appFor(twoAgents(host));
    const caller = `dana-${label()}`;
    const onAlpha = (await createKey(app, { caller_id: caller, agents: ["alpha"] })).key;
    const onBeta = (await createKey(app, { caller_id: caller, agents: ["beta"] })).key;
    const id = (await call(app, "POST", "/v1/runs", { agent_id: "beta", message: "hi" }, onBeta)).body.id;
    expect(await waitForRun(app, id, onBeta)).toMatchObject({ status: "completed", output: "on beta" });
    const notFound = { error: { code: "resource.not_found", message: `no run ${id}` } };
    const read = await call(app, "GET", `/v1/runs/${id}`, undefined, onAlpha);
    expect({ status: read.status, body: read.body }).toEqual({ status: 404, body: notFound });
    const events = await call(app, "GET", `/v1/runs/${id}/events`, undefined, onAlpha);
    expect({ status: events.status, body: events.body }).toEqual({ status: 404, body: notFound });
    const cancel = await call(app, "POST", `/v1/runs/${id}/cancel`, undefined, onAlpha);
    expect({ status: cancel.status, body: cancel.body }).toEqual({ status: 404, body: notFound });
    // The key that may use beta still reads it.
    expect((await call(app, "GET", `/v1/runs/${id}`, undefined, onBeta)).status).toBe(200);
  }, 30_000);

  it("ISSUE25-1 a forged sgw_ key and a wrong secret with a right key id → the same 401 (hashed either way)", async () => {
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, {});
    const wrongSecret = `sgw_${key_id}_${"A".repeat(43)}`;
    const forged = `sgw_${"f".repeat(16)}_${key.slice(-43)}`;
    for (const token of [wrongSecret, forged, `${key}x`, key.replace("sgw_", "sgx_")]) {
      const res = await call(app, "GET", "/v1/models", undefined, token);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: { message: "invalid bearer token", type: "authentication_error", code: "auth.unauthorized" } });
      expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="sophie-gateway", error="invalid_token"');
      const run = await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, token);
      expect(run).toMatchObject({ status: 401, body: UNAUTHORIZED });
    }
    // The comparison path: a missing record is compared against a dummy hash and is never a match.
    const { stored } = await mintSecret(key_id);
    expect(await secretMatches(null, key.slice(-43))).toBe(false);
    expect(await secretMatches(stored, key.slice(-43))).toBe(false);
    // The real key still works after the attempts.
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200);
  });
});

describe("ISSUE25-1 D1 unreachable", () => {
  it("ISSUE25-1 a key that cannot be checked is not accepted: 503, never a 500; env tokens still work", async () => {
    const app = appFor(twoAgents());
    const { key } = await createKey(app, {});
    forgetAdminGenerations();
    const down = {
      ...env,
      DB: {
        prepare: () => {
          throw new Error("D1_ERROR: network connection lost");
        },
      },
    };
    const res = await readResponse(
      await app.request("https://gateway.test/v1/models", { headers: { Authorization: `Bearer ${key}` } }, down),
    );
    expect(res.status).toBe(503);
    expect(res.body).toEqual({
      error: { message: "API keys cannot be checked right now; retry shortly", type: "server_error", code: "internal.error" },
    });
    expect(res.text).not.toContain("D1_ERROR");
    const alice = await app.request("https://gateway.test/v1/models", { headers: { Authorization: `Bearer ${ALICE}` } }, down);
    expect(alice.status).toBe(200);
    forgetAdminGenerations();
  });
});

describe("ISSUE25-1 revocation, rotation and expiry reach every isolate within the bound", () => {
  it(`ISSUE25-1 revoked on another isolate: a cached isolate keeps the key at most ${ADMIN_REFRESH_MS} ms, then 401`, async () => {
    expect(KEY_PROPAGATION_MS).toBe(5_000);
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, {});
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    forgetAdminGenerations();
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200); // this isolate caches the key
    // Another isolate revokes it: D1 changes, this isolate's copy does not.
    await revokeKey(env.DB, key_id, new Date());
    vi.setSystemTime(t0 + KEY_PROPAGATION_MS - 1_000);
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200); // served from the cache
    vi.setSystemTime(t0 + KEY_PROPAGATION_MS);
    expect(await call(app, "GET", "/v1/models", undefined, key)).toMatchObject({ status: 401 });
    expect(await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, key)).toMatchObject({
      status: 401,
      body: UNAUTHORIZED,
    });
  });

  it("ISSUE25-1 rotated on another isolate: the old secret is 401 within the bound; the new one works at once", async () => {
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, {});
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    forgetAdminGenerations();
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200);
    const fresh = await mintSecret(key_id);
    await rotateKey(env.DB, key_id, fresh.stored, new Date());
    // The new key is not what this isolate cached: it is asked of D1 at once.
    expect((await call(app, "GET", "/v1/models", undefined, fresh.key)).status).toBe(200);
    vi.setSystemTime(t0 + KEY_PROPAGATION_MS);
    expect(await call(app, "GET", "/v1/models", undefined, key)).toMatchObject({ status: 401 });
    expect((await call(app, "GET", "/v1/models", undefined, fresh.key)).status).toBe(200);
  });

  it("ISSUE25-1 an expired key is 401 from its expiry on (checked on every use, cached or not)", async () => {
    const app = appFor(twoAgents());
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const expiresAt = new Date(t0 + 60_000).toISOString();
    const { key } = await createKey(app, { expires_at: expiresAt });
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200);
    vi.setSystemTime(t0 + 59_999);
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200);
    vi.setSystemTime(t0 + 60_000);
    expect(await call(app, "GET", "/v1/models", undefined, key)).toMatchObject({ status: 401 });
    expect(await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, key)).toMatchObject({
      status: 401,
      body: UNAUTHORIZED,
    });
  });

  it("ISSUE25-1 last_used_at is stamped after the response, at most once a minute per key", async () => {
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, {});
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const request = async () => {
      const ctx = createExecutionContext();
      const res = await app.request("https://gateway.test/v1/models", { headers: { Authorization: `Bearer ${key}` } }, env, ctx);
      await waitOnExecutionContext(ctx);
      return res.status;
    };
    expect(await request()).toBe(200);
    const first = (await keyRow(key_id))?.last_used_at;
    expect(first).toBe(new Date(t0).toISOString());
    vi.setSystemTime(t0 + 30_000);
    expect(await request()).toBe(200);
    expect((await keyRow(key_id))?.last_used_at).toBe(first);
    vi.setSystemTime(t0 + 61_000);
    expect(await request()).toBe(200);
    expect((await keyRow(key_id))?.last_used_at).toBe(new Date(t0 + 61_000).toISOString());
  });
});

describe("ISSUE25-1 per-key limits", () => {
  it("ISSUE25-1 requestsPerMinute 20 under 50 concurrent requests: exactly 20 admitted, 30 → 429 with Retry-After", async () => {
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, { limits: { requestsPerMinute: 20 } });
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Math.floor(Date.now() / 60_000) * 60_000 + 15_000); // 15 s into a minute: 45 s left
    const results = await Promise.all(
      Array.from({ length: 50 }, async () =>
        readResponse(
          await app.request(`https://gateway.test/v1/runs/${MISSING_RUN}`, { headers: { Authorization: `Bearer ${key}` } }, env),
        ),
      ),
    );
    const admitted = results.filter((r) => r.status !== 429);
    const refused = results.filter((r) => r.status === 429);
    expect(admitted).toHaveLength(20);
    expect(refused).toHaveLength(30);
    for (const r of admitted) expect(r.status).toBe(404); // admitted: the route ran (no such run)
    for (const r of refused) {
      expect(r.headers.get("Retry-After")).toBe("45");
      expect(r.body).toEqual({
        error: {
          code: "rate.limited",
          message: `key ${key_id} is limited to 20 requests per minute; retry in 45 s`,
          retry_after_seconds: 45,
        },
      });
    }
    // OpenAI's shape on the OpenAI routes; the next minute admits again.
    const openai = await call(app, "GET", "/v1/models", undefined, key);
    expect(openai.status).toBe(429);
    expect(openai.body).toEqual({
      error: {
        message: `key ${key_id} is limited to 20 requests per minute; retry in 45 s`,
        type: "rate_limit_error",
        code: "rate.limited",
      },
    });
    vi.setSystemTime(Date.now() + 60_000);
    expect((await call(app, "GET", "/v1/models", undefined, key)).status).toBe(200);
    // Another key of the same caller has its own count; env tokens have none.
    expect((await call(app, "GET", "/v1/models", undefined, (await createKey(app, { limits: { requestsPerMinute: 1 } })).key)).status).toBe(
      200,
    );
    expect((await call(app, "GET", "/v1/models", undefined, ALICE)).status).toBe(200);
  }, 30_000);

  it("ISSUE25-1 the Rate Limiting binding runs locally and is the ceiling before the exact count", async () => {
    expect(typeof env.API_KEY_RATE_LIMITER?.limit).toBe("function");
    expect(await env.API_KEY_RATE_LIMITER.limit({ key: `probe-${label()}` })).toEqual({ success: true });
    const app = appFor(twoAgents());
    const { key, key_id } = await createKey(app, {});
    const saturated = { ...env, API_KEY_RATE_LIMITER: { limit: async () => ({ success: false }) } };
    const res = await readResponse(
      await app.request(`https://gateway.test/v1/runs/${MISSING_RUN}`, { headers: { Authorization: `Bearer ${key}` } }, saturated),
    );
    expect(res.status).toBe(429);
    expect(res.body.error).toMatchObject({
      code: "rate.limited",
      message: expect.stringMatching(new RegExp(`^key ${key_id} is over the gateway's request ceiling; retry in \\d+ s$`)),
    });
    expect(Number(res.headers.get("Retry-After"))).toBeGreaterThan(0);
    // GATEWAY_API_TOKENS callers are not key records: the binding does not apply to them.
    const alice = await app.request(
      `https://gateway.test/v1/runs/${MISSING_RUN}`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      saturated,
    );
    expect(alice.status).toBe(404);
  });

  it("ISSUE25-1 40 concurrent reservations of one key's tokens from two agents and two callers: exactly 10 of 1000 fit in 10000", async () => {
    const keyId = `k${label()}`;
    const now = new Date();
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        reserveCallerTokens(env.DB, {
          agentId: i % 2 ? "alpha" : "beta",
          caller: i % 4 < 2 ? "api:carol" : "api:dave",
          tokens: 1_000,
          agentLimit: null,
          callerLimit: null,
          now,
          key: { keyId, tokensPerDay: 10_000 },
        }),
      ),
    );
    expect(results.filter((r) => r.ok)).toHaveLength(10);
    expect(results.filter((r) => !r.ok).every((r) => !r.ok && r.scope === "key" && r.limit === 10_000)).toBe(true);
    expect(await keyTokensUsed(env.DB, keyId, now.toISOString().slice(0, 10))).toBe(10_000);
  });

  it("ISSUE25-1 tokensPerDay under 6 concurrent sessions: the key's budget is never overspent; then 429 with Retry-After", async () => {
    const apps = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const host = uniqueHost("script");
        // Each run that gets through spends 6000; each reserves its worst case (~5.5k) first: two fit in 12000.
        await scriptProvider(host, [{ content: "ok", usage: { prompt_tokens: 5000, completion_tokens: 1000, total_tokens: 6000 } }]);
        return { host, app: appFor(twoAgents(host)) };
      }),
    );
    const first = apps[0]?.app as App;
    const { key, key_id } = await createKey(first, { agents: ["alpha", "beta"], limits: { tokensPerDay: 12_000 } });
    // Six sessions, two agents, started together.
    const ids = await Promise.all(
      apps.map(async (a, i) => (await call(a.app, "POST", "/v1/runs", { agent_id: i % 2 ? "beta" : "alpha", message: "go" }, key)).body.id),
    );
    const runs = await Promise.all(ids.map((id, i) => waitForRun(apps[i]?.app as App, id, key)));
    expect(runs.filter((r) => r.status === "completed")).toHaveLength(2);
    const day = new Date().toISOString().slice(0, 10);
    for (const r of runs.filter((x) => x.status === "failed"))
      expect(r.output).toMatch(
        new RegExp(`^key ${key_id} has used \\d+ of its 12000 tokens for ${day} \\(UTC\\); this call needs up to \\d+$`),
      );
    expect((await Promise.all(apps.map((a) => requestsTo(a.host)))).flat()).toHaveLength(2);
    const used = await env.DB.prepare("SELECT tokens FROM api_key_token_usage WHERE key_id = ?1 AND day = ?2")
      .bind(key_id, day)
      .first<{ tokens: number }>();
    expect(used?.tokens).toBe(12_000);
    // Spent: the next turn is refused before anything is queued, with Retry-After (to UTC midnight).
    const refused = await call(first, "POST", "/v1/runs", { agent_id: "alpha", message: "again" }, key);
    expect(refused.status).toBe(429);
    const retry = Number(refused.headers.get("Retry-After"));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(86_400);
    expect(refused.body).toEqual({
      error: {
        code: "over_budget",
        message: `key ${key_id} has used 12000 of its 12000 tokens for ${day} (UTC)`,
        retry_after_seconds: retry,
      },
    });
    const completion = await call(
      first,
      "POST",
      "/v1/chat/completions",
      { model: "agent:alpha", messages: [{ role: "user", content: "x" }] },
      key,
    );
    expect(completion.status).toBe(429);
    expect(completion.headers.get("Retry-After")).toMatch(/^\d+$/);
    expect(completion.body).toEqual({
      error: {
        message: `key ${key_id} has used 12000 of its 12000 tokens for ${day} (UTC)`,
        type: "insufficient_quota",
        code: "over_budget",
      },
    });
    // Another key of the same caller, and the env token callers, are not held by this key's budget.
    const other = await createKey(first, { agents: ["alpha"] });
    expect((await call(first, "POST", "/v1/runs", { agent_id: "alpha", message: "x" }, other.key)).status).toBe(202);
  }, 40_000);
});

describe("ISSUE25-1 a key's WebSocket and its secret in messages", () => {
  it("ISSUE25-1 an open WebSocket of a revoked key takes no further turn (401 error frame); its turns spent the key's budget", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first answer", usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 } }]);
    const config = twoAgents(host);
    const posted = await postConfigVersion(env.DB, config, { actor: "test", now: new Date() });
    if (!posted.ok) throw new Error("config not posted");
    forgetAdminGenerations();
    forgetConfigInForce();
    const app = appFor(config);
    const { key, key_id } = await createKey(app, { agents: ["alpha"], limits: { tokensPerDay: 100_000 } });
    const res = await app.request(
      `https://gateway.test/v1/chat/socket?agent_id=alpha&room_id=r-${label()}&user_id=u1`,
      { headers: { Authorization: `Bearer ${key}`, Upgrade: "websocket" } },
      env,
    );
    expect(res.status).toBe(101);
    const ws = res.webSocket as WebSocket;
    ws.accept();
    const frames: any[] = [];
    ws.addEventListener("message", (e) => frames.push(JSON.parse(e.data as string)));
    ws.send(JSON.stringify({ type: "message", id: "m-1", text: "hello" }));
    await until(async () => frames.some((f) => f.type === "run" && f.id === "m-1"));
    const day = new Date().toISOString().slice(0, 10);
    const used = await env.DB.prepare("SELECT tokens FROM api_key_token_usage WHERE key_id = ?1 AND day = ?2")
      .bind(key_id, day)
      .first<{ tokens: number }>();
    expect(used?.tokens).toBe(120);
    expect((await call(app, "DELETE", `/api/admin/keys/${key_id}`, undefined, ADMIN)).status).toBe(200);
    ws.send(JSON.stringify({ type: "message", id: "m-2", text: "again" }));
    await until(async () => frames.some((f) => f.id === "m-2"));
    expect(frames.filter((f) => f.id === "m-2")).toEqual([
      {
        type: "error",
        id: "m-2",
        error: { code: "auth.unauthorized", message: "the API key this socket was opened with was revoked, rotated or has expired" },
      },
    ]);
    expect(await requestsTo(host)).toHaveLength(1);
    ws.close();
  }, 30_000);

  it("ISSUE25-1 an open WebSocket whose key no longer lists its agent (PATCH) takes no further turn (403 error frame)", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first answer" }]);
    const config = twoAgents(host);
    const posted = await postConfigVersion(env.DB, config, { actor: "test", now: new Date() });
    if (!posted.ok) throw new Error("config not posted");
    forgetAdminGenerations();
    forgetConfigInForce();
    const app = appFor(config);
    const { key, key_id } = await createKey(app, { agents: ["alpha", "beta"] });
    const res = await app.request(
      `https://gateway.test/v1/chat/socket?agent_id=alpha&room_id=r-${label()}&user_id=u1`,
      { headers: { Authorization: `Bearer ${key}`, Upgrade: "websocket" } },
      env,
    );
    expect(res.status).toBe(101);
    const ws = res.webSocket as WebSocket;
    ws.accept();
    const frames: any[] = [];
    ws.addEventListener("message", (e) => frames.push(JSON.parse(e.data as string)));
    ws.send(JSON.stringify({ type: "message", id: "m-1", text: "hello" }));
    await until(async () => frames.some((f) => f.type === "run" && f.id === "m-1"));
    expect((await call(app, "PATCH", `/api/admin/keys/${key_id}`, { agents: ["beta"] }, ADMIN)).status).toBe(200);
    ws.send(JSON.stringify({ type: "message", id: "m-2", text: "again" }));
    await until(async () => frames.some((f) => f.id === "m-2"));
    expect(frames.filter((f) => f.id === "m-2")).toEqual([
      { type: "error", id: "m-2", error: { code: "auth.forbidden", message: `key ${key_id} may not use agent "alpha"` } },
    ]);
    expect(await requestsTo(host)).toHaveLength(1);
    ws.close();
  }, 30_000);

  it("ISSUE25-1 a key pasted into a message is redacted before it is stored or sent to the model", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "noted" }]);
    const app = appFor(twoAgents(host));
    const { key } = await createKey(app, {});
    const id = (await call(app, "POST", "/v1/runs", { agent_id: "alpha", message: `my key is ${key} ok` }, key)).body.id;
    expect(await waitForRun(app, id, key)).toMatchObject({ status: "completed" });
    const sent = JSON.stringify(await bodiesSentTo(host));
    expect(sent).not.toContain(key);
    expect(sent).toContain("my key is [REDACTED:sophie_gateway_key] ok");
  }, 30_000);
});

async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}
