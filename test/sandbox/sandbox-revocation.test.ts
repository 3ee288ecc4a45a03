/**
 * Issue 20 §5 "Sandbox tokens cannot be revoked one by one": each minted token has a `token_id` (returned at
 * mint, recorded in D1), an admin revokes it with `POST /api/admin/sandbox-tokens/{token_id}/revoke`, and every
 * tool callback checks it — no per-isolate cache, so the revocation holds from the very next callback.
 */
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionDO } from "../../src/sessions/SessionDO";
import { type ToolDefinition, tools } from "../../src/tools/registry";
import { runConfig } from "../support/config";
import { ADMIN, ALICE, appFor, call, until } from "../support/runs";

const app = appFor(runConfig("ok-revocation.provider.test", { agent: { tools: { allow: ["test.revocable"] } } }));

const revocable: ToolDefinition = {
  name: "test.revocable",
  description: "Answers ok.",
  parameters: { type: "object", properties: {}, additionalProperties: false },
  risk: "read_only",
  handler: async () => ({ ok: true, output: { ok: true }, summary: "ok" }),
};
beforeAll(() => {
  tools.register(revocable);
});
afterAll(() => {
  tools.unregister("test.revocable");
});

async function newSession(): Promise<{ sessionId: string; sessionKey: string }> {
  const sessionKey = `agent:main:http:rv-${crypto.randomUUID().slice(0, 8)}:dm:u1`;
  const stub = env.SESSIONS.getByName(sessionKey) as DurableObjectStub<SessionDO>;
  const r = await stub.enqueueMessage(
    { sessionKey, agentId: "main" },
    { message: "hello", source: "http", limits: { maxTurns: 500, maxBytes: 2_000_000 } },
  );
  return { sessionId: r.sessionId, sessionKey };
}

async function mint(sessionId: string): Promise<{ token: string; token_id: string; expires_at: string }> {
  const res = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-token`, {}, ADMIN);
  if (res.status !== 201) throw new Error(`mint answered ${res.status}: ${res.text}`);
  return res.body;
}

async function callback(sessionId: string, token: string): Promise<{ status: number; body: unknown }> {
  const res = await app.request(
    `https://gateway.test/v1/sessions/${sessionId}/tools/test.revocable`,
    {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
      body: JSON.stringify({ tool_call_id: `rv-${crypto.randomUUID()}`, args: {} }),
    },
    env,
  );
  return { status: res.status, body: await res.json() };
}

describe("ISSUE20-§5.4 sandbox tokens are revoked one by one", () => {
  it("ISSUE20-§5.4 a revoked token is 403 on the very next callback; a sibling token of the same session still works", async () => {
    const { sessionId } = await newSession();
    const a = await mint(sessionId);
    const b = await mint(sessionId);
    expect((await callback(sessionId, a.token)).status).toBe(200);

    const revoked = await call(app, "POST", `/api/admin/sandbox-tokens/${a.token_id}/revoke`, undefined, ADMIN);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toEqual({ token_id: a.token_id, session_id: sessionId, expires_at: a.expires_at, revoked_at: expect.any(String) });

    expect(await callback(sessionId, a.token)).toEqual({
      status: 403,
      body: { error: { code: "auth.forbidden", message: `sandbox token ${a.token_id} was revoked` } },
    });
    expect(await callback(sessionId, b.token)).toEqual({ status: 200, body: { success: true, result: "ok", data: { ok: true } } });

    // Revoking again keeps the first time; the revocation is audited once in the session's stream, without the token.
    const again = await call(app, "POST", `/api/admin/sandbox-tokens/${a.token_id}/revoke`, undefined, ADMIN);
    expect(again.body).toEqual(revoked.body);
    const audit = async () => {
      const day = new Date().toISOString().slice(0, 10);
      const res = await call(app, "GET", `/api/admin/audit?agent_id=main&date=${day}`, undefined, ADMIN);
      return res.status === 200 ? res.text : "";
    };
    const revocations = (text: string) =>
      text
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l))
        .filter((e) => e.event_type === "sandbox_token.revoked" && e.payload.token_id === a.token_id);
    await until(async () => revocations(await audit()).length > 0, 15_000);
    const text = await audit();
    expect(revocations(text).map((e) => [e.actor, e.payload])).toEqual([
      ["admin", { token_id: a.token_id, session_id: sessionId, revoked_at: revoked.body.revoked_at }],
    ]);
    expect(text).not.toContain(a.token);
  });

  it("ISSUE20-§5.4 an unknown token_id is 404, a malformed one 400, and only the admin may revoke", async () => {
    const unknown = `sbt_${"0".repeat(24)}`;
    expect(await call(app, "POST", `/api/admin/sandbox-tokens/${unknown}/revoke`, undefined, ADMIN)).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no sandbox token ${unknown}` } },
    });
    expect((await call(app, "POST", "/api/admin/sandbox-tokens/not-a-token/revoke", undefined, ADMIN)).status).toBe(400);
    const { sessionId } = await newSession();
    const a = await mint(sessionId);
    expect((await call(app, "POST", `/api/admin/sandbox-tokens/${a.token_id}/revoke`, undefined, ALICE)).status).toBe(403);
    expect((await callback(sessionId, a.token)).status).toBe(200);
  });

  it("ISSUE20-§5.4 revocation needs no cache flush: a revocation written by another isolate (straight to D1) holds at once", async () => {
    const { sessionId } = await newSession();
    const a = await mint(sessionId);
    expect((await callback(sessionId, a.token)).status).toBe(200);
    await env.DB.prepare("UPDATE sandbox_tokens SET revoked_at = ?2 WHERE token_id = ?1").bind(a.token_id, new Date().toISOString()).run();
    expect((await callback(sessionId, a.token)).status).toBe(403);
  });
});
