/**
 * Issue 33 (D-087): an `Idempotency-Key` replay never answers a request its sender may not make. Stored answers
 * are scoped to the API key record that made them (not only to its caller), and the route's own auth refusals —
 * an agent the key may not use, a setup session for a caller `setup.allowedCallers` does not list — come before
 * any stored answer, in-flight 409 or mismatch 422.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import type { GatewayConfig } from "../../src/config/schema";
import { IDEMPOTENT_REPLAYED_HEADER } from "../../src/http/middleware/idempotency-key";
import { mockProvider, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, readResponse } from "../support/runs";

const label = () => crypto.randomUUID().slice(0, 8);
const newKey = () => `key-${crypto.randomUUID()}`;

/** Agents `alpha` and `beta` on a scripted provider of their own, with `setup` as given. */
async function twoAgents(replies: number, setup: string[] = []): Promise<GatewayConfig> {
  const host = uniqueHost("script");
  await scriptProvider(
    host,
    Array.from({ length: replies }, (_, i) => ({ content: `answer ${i + 1}` })),
  );
  const parsed = parseGatewayConfig({
    models: { default: "moonshot:kimi-k1-128k", providers: { moonshot: mockProvider(host) as never } },
    agents: { alpha: {}, beta: {} },
    setup: { allowedCallers: setup },
  });
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return parsed.value;
}

async function createKey(app: App, body: Record<string, unknown>): Promise<{ key: string; key_id: string }> {
  const res = await call(app, "POST", "/api/admin/keys", { label: `k-${label()}`, agents: "all", ...body }, ADMIN);
  if (res.status !== 201) throw new Error(`POST /api/admin/keys answered ${res.status}: ${res.text}`);
  return res.body;
}

/** A POST with an Idempotency-Key. */
async function post(app: App, path: string, body: unknown, token: string, key: string) {
  const headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "Idempotency-Key": key };
  const res = await app.request(`https://gateway.test${path}`, { method: "POST", headers, body: JSON.stringify(body) }, env);
  return readResponse(res);
}

const forbidden = (keyId: string, agent: string) => ({
  error: { code: "auth.forbidden", message: `key ${keyId} may not use agent "${agent}"` },
});

describe("ISSUE33 idempotency: replays are the key's own, after its auth checks", () => {
  it("ISSUE33 idempotency: key A (agents [alpha]) repeating key B's Idempotency-Key and body for beta gets 403, never B's stored 202", async () => {
    const app = appFor(await twoAgents(2));
    const caller = `carol-${label()}`;
    const b = await createKey(app, { caller_id: caller });
    const a = await createKey(app, { caller_id: caller, agents: ["alpha"] });
    const idem = newKey();
    const forBeta = { agent_id: "beta", message: "for beta" };

    const stored = await post(app, "/v1/runs", forBeta, b.key, idem);
    expect(stored.status).toBe(202);

    const refused = await post(app, "/v1/runs", forBeta, a.key, idem);
    expect({ status: refused.status, body: refused.body, replayed: refused.headers.get(IDEMPOTENT_REPLAYED_HEADER) }).toEqual({
      status: 403,
      body: forbidden(a.key_id, "beta"),
      replayed: null,
    });
    // The same Idempotency-Key is A's own: a request for alpha under it is new (not B's 422 mismatch, not a replay).
    const own = await post(app, "/v1/runs", { agent_id: "alpha", message: "for alpha" }, a.key, idem);
    expect({ status: own.status, replayed: own.headers.get(IDEMPOTENT_REPLAYED_HEADER) }).toEqual({ status: 202, replayed: null });
    expect(own.body.id).not.toBe(stored.body.id);
    // B still gets its own answer back.
    const again = await post(app, "/v1/runs", forBeta, b.key, idem);
    expect({ status: again.status, text: again.text, replayed: again.headers.get(IDEMPOTENT_REPLAYED_HEADER) }).toEqual({
      status: 202,
      text: stored.text,
      replayed: "true",
    });
  });

  it("ISSUE33 idempotency: a key whose agents were narrowed after its answer was stored gets 403 on every route, not the replay", async () => {
    const app = appFor(await twoAgents(3));
    const { key, key_id } = await createKey(app, { caller_id: `carol-${label()}` });
    const requests: [string, unknown][] = [
      ["/v1/runs", { agent_id: "beta", message: "runs" }],
      ["/v1/chat/messages", { agent_id: "beta", room_id: "r", user_id: "u", message: "chat" }],
      ["/v1/chat/completions", { model: "agent:beta", messages: [{ role: "user", content: "openai" }] }],
    ];
    const idem = newKey();
    for (const [path, body] of requests) expect((await post(app, path, body, key, idem)).status, path).toBeLessThan(300);

    const narrowed = await call(app, "PATCH", `/api/admin/keys/${key_id}`, { agents: ["alpha"] }, ADMIN);
    expect(narrowed.status).toBe(200);

    const s3 = forbidden(key_id, "beta");
    const openai = { error: { message: s3.error.message, type: "permission_error", code: "auth.forbidden" } };
    const expected = [s3, s3, openai];
    for (const [i, [path, body]] of requests.entries()) {
      const res = await post(app, path, body, key, idem);
      expect({ path, status: res.status, body: res.body, replayed: res.headers.get(IDEMPOTENT_REPLAYED_HEADER) }).toEqual({
        path,
        status: 403,
        body: expected[i],
        replayed: null,
      });
    }
  });

  it("ISSUE33 idempotency: a setup run repeated after setup.allowedCallers dropped its caller gets 403, not the replay", async () => {
    const allowed = await twoAgents(1, ["alice"]);
    const idem = newKey();
    const body = { agent_id: "alpha", message: "set up", session_type: "setup" };
    expect((await post(appFor(allowed), "/v1/runs", body, ALICE, idem)).status).toBe(202);

    const dropped = appFor({ ...allowed, setup: { allowedCallers: [] } });
    const res = await post(dropped, "/v1/runs", body, ALICE, idem);
    expect({ status: res.status, body: res.body, replayed: res.headers.get(IDEMPOTENT_REPLAYED_HEADER) }).toEqual({
      status: 403,
      body: {
        error: {
          code: "auth.forbidden",
          message: 'caller "alice" may not start a setup session: only callers listed in the config\'s setup.allowedCallers may',
        },
      },
      replayed: null,
    });
  });
});
