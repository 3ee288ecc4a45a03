/**
 * Gateway tool callbacks (S5 §Gateway Callback Contract, §6.2, §6.3; DESIGN "Auth", "Idempotency"):
 * sandbox tokens bound to one session, the auth matrix on both callback paths, durable `tool_call_id`
 * idempotency (concurrent duplicates, replay after eviction, retention, mismatch, interrupted calls),
 * setup-only gating on the callback path and in runs, and run tool calls kept in the same store.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mintSandboxToken } from "../../src/security/sandbox-token";
import type { SessionDO } from "../../src/sessions/SessionDO";
import { type ToolDefinition, tools } from "../../src/tools/registry";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, call, runDetail, until } from "../support/runs";

const S5 = ["verify", "save_snapshot", "automation.complete", "save_service_commands", "save_env_files", "request_env_variables"];
const config = runConfig("ok-callbacks.provider.test", { agent: { tools: { allow: [...S5, "test.slowcount"] } } });
const app = appFor(config);
const SECRET = env.SANDBOX_TOKEN_SECRET as string;

/** A test tool that counts its executions and takes a little time (so duplicates overlap it). */
const executions = new Map<string, number>();
const slowCount: ToolDefinition = {
  name: "test.slowcount",
  description: "Counts its calls per tool_call_id after a short wait.",
  parameters: { type: "object", properties: { n: { type: "integer" } }, additionalProperties: false },
  risk: "draft_only",
  handler: async (input, ctx) => {
    await new Promise((r) => setTimeout(r, 50));
    const count = (executions.get(ctx.toolCallId) ?? 0) + 1;
    executions.set(ctx.toolCallId, count);
    return { ok: true, output: { n: input.n ?? null, execution: count }, summary: `counted ${String(input.n ?? "")}` };
  },
};
beforeAll(() => {
  tools.register(slowCount);
});
afterAll(() => {
  tools.unregister("test.slowcount");
});

/** A new session (its first message stored, no run); `setup` makes it an S5 setup session. */
async function newSession(type: "setup" | "ordinary" = "ordinary"): Promise<{ sessionId: string; sessionKey: string }> {
  const sessionKey = `agent:main:http:cb-${crypto.randomUUID().slice(0, 8)}:dm:u1`;
  const stub = env.SESSIONS.getByName(sessionKey) as DurableObjectStub<SessionDO>;
  const r = await stub.enqueueMessage(
    { sessionKey, agentId: "main", sessionType: type },
    { message: "hello", source: "http", limits: { maxTurns: 500, maxBytes: 2_000_000 } },
  );
  return { sessionId: r.sessionId, sessionKey };
}

async function tokenFor(sessionId: string): Promise<string> {
  const res = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-token`, {}, ADMIN);
  if (res.status !== 201) throw new Error(`mint answered ${res.status}: ${res.text}`);
  return res.body.token as string;
}

const callback = (sessionId: string, tool: string, body: unknown, token: string | null, prefix = "/v1/sessions") =>
  app.request(
    `https://gateway.test${prefix}/${sessionId}/tools/${tool}`,
    {
      method: "POST",
      headers: { "Content-Type": "application/json", ...(token === null ? {} : { Authorization: `Bearer ${token}` }) },
      body: JSON.stringify(body),
    },
    env,
  );

async function answer(res: Response) {
  return { status: res.status, body: await res.json<any>(), replayed: res.headers.get("Idempotent-Replayed") };
}

describe("DESIGN Auth: sandbox tokens", () => {
  it("an admin mints a token bound to one session, with an expiry; it is audited without the token", async () => {
    const { sessionId, sessionKey } = await newSession();
    const before = Math.floor(Date.now() / 1000);
    const res = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-token`, { ttl_seconds: 600 }, ADMIN);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      token: expect.stringMatching(/^sbx1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/),
      token_id: expect.stringMatching(/^sbt_[0-9a-f]{24}$/),
      session_id: sessionId,
      expires_at: expect.any(String),
    });
    const expires = Date.parse(res.body.expires_at) / 1000;
    expect(expires - before).toBeGreaterThanOrEqual(600);
    expect(expires - before).toBeLessThanOrEqual(601);
    // The event waits in the object's audit outbox until its shipping window ends, then is in the day's audit log:
    // read both, until it is in one of them.
    const day = new Date().toISOString().slice(0, 10);
    let events: { event_type: string }[] = [];
    await until(async () => {
      const queued = await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
        state.storage.sql.exec("SELECT event FROM audit_outbox").toArray(),
      );
      const shipped = (await call(app, "GET", `/api/admin/audit?agent_id=main&date=${day}`, undefined, ADMIN)).text;
      events = [
        ...queued.map((r) => JSON.parse(r.event as string)),
        ...shipped
          .split("\n")
          .filter(Boolean)
          .map((l: string) => JSON.parse(l)),
      ];
      return events.some((e) => JSON.stringify(e).includes(res.body.token_id));
    });
    const minted = events.find(
      (e) => e.event_type === "sandbox_token.minted" && (e as { payload?: { token_id?: string } }).payload?.token_id === res.body.token_id,
    );
    expect(minted).toMatchObject({ actor: "admin", payload: { token_id: res.body.token_id, session_id: sessionId } });
    expect(JSON.stringify(events)).not.toContain(res.body.token);
  });

  it("minting: an unknown session is 404; an api token is 403; without SANDBOX_TOKEN_SECRET it is 503 sandbox.unavailable", async () => {
    const { sessionId } = await newSession();
    const unknown = await call(app, "POST", "/api/admin/sessions/ses_00000000000000000000000000000000/sandbox-token", {}, ADMIN);
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: "resource.not_found" } } });
    expect((await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-token`, {}, ALICE)).status).toBe(403);
    const res = await app.request(
      `https://gateway.test/api/admin/sessions/${sessionId}/sandbox-token`,
      { method: "POST", headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" }, body: "{}" },
      { ...env, SANDBOX_TOKEN_SECRET: undefined },
    );
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: {
        code: "sandbox.unavailable",
        message: "sandbox tokens need the SANDBOX_TOKEN_SECRET secret (at least 32 characters), which is not set",
      },
    });
  });

  for (const prefix of ["/v1/sessions", "/proliferate"]) {
    it(`S5 §6.3 on ${prefix}/…: only this session's valid sandbox token is accepted; every other caller is 403`, async () => {
      const { sessionId } = await newSession();
      const other = await newSession();
      const own = await tokenFor(sessionId);
      const otherToken = await tokenFor(other.sessionId);
      const expired = (await mintSandboxToken(SECRET, sessionId, Math.floor(Date.now() / 1000) - 7200, 3600)).token;
      const forged = (
        await mintSandboxToken("another-secret-that-is-long-enough-0123456789", sessionId, Math.floor(Date.now() / 1000), 3600)
      ).token;
      const body = { tool_call_id: `auth-${crypto.randomUUID()}`, args: { n: 1 } };
      const forbidden = { error: { code: "auth.forbidden", message: `this route accepts only the sandbox token of session ${sessionId}` } };
      for (const token of [null, ALICE, ADMIN, otherToken, expired, forged, `${own}x`, "sbx1.e30.AAAA"]) {
        const res = await callback(sessionId, "test.slowcount", body, token, prefix);
        expect({ token, status: res.status, body: await res.json() }).toEqual({ token, status: 403, body: forbidden });
      }
      const ok = await answer(await callback(sessionId, "test.slowcount", body, own, prefix));
      expect(ok).toEqual({ status: 200, body: { success: true, result: "counted 1", data: { n: 1, execution: 1 } }, replayed: null });
    });
  }

  it("a sandbox token opens nothing else: api and admin routes answer 401 to it", async () => {
    const { sessionId } = await newSession();
    const token = await tokenFor(sessionId);
    expect((await call(app, "POST", "/v1/runs", { agent_id: "main", message: "hi" }, token)).status).toBe(401);
    expect((await call(app, "GET", "/api/admin/runs", undefined, token)).status).toBe(401);
  });
});

describe("S5 §6.3 / DESIGN Idempotency: tool_call_id, durably, per session and tool", () => {
  it("50 concurrent duplicate callbacks → exactly one execution and 50 identical answers", async () => {
    const { sessionId } = await newSession();
    const token = await tokenFor(sessionId);
    const id = `dup-${crypto.randomUUID()}`;
    const responses = await Promise.all(
      Array.from({ length: 50 }, () => callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 7 } }, token)),
    );
    const bodies = await Promise.all(responses.map((r) => r.json()));
    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(executions.get(id)).toBe(1);
    expect(new Set(bodies.map((b) => JSON.stringify(b)))).toEqual(
      new Set([JSON.stringify({ success: true, result: "counted 7", data: { n: 7, execution: 1 } })]),
    );
    expect(responses.filter((r) => r.headers.get("Idempotent-Replayed") === "true")).toHaveLength(49);
  });

  it("a duplicate after evictDurableObject is replayed from storage, not executed again", async () => {
    const { sessionId, sessionKey } = await newSession();
    const token = await tokenFor(sessionId);
    const id = `evict-${crypto.randomUUID()}`;
    const first = await answer(await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 3 } }, token));
    await evictDurableObject(env.SESSIONS.getByName(sessionKey));
    const again = await answer(await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 3 } }, token));
    expect(again).toEqual({ ...first, replayed: "true" });
    expect(executions.get(id)).toBe(1);
  });

  it("after the retention a tool_call_id may run again (tools.callbacks.retentionSeconds)", async () => {
    const { sessionId, sessionKey } = await newSession();
    const token = await tokenFor(sessionId);
    const id = `ret-${crypto.randomUUID()}`;
    await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 1 } }, token);
    const stored = await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
      state.storage.sql.exec("SELECT scope, status, expires_at - completed_at AS retention FROM idempotency WHERE key = ?", id).one(),
    );
    expect(stored).toEqual({ scope: "tool:test.slowcount", status: "done", retention: 300_000 });
    await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) => {
      state.storage.sql.exec("UPDATE idempotency SET expires_at = ? WHERE key = ?", Date.now() - 1, id);
    });
    const again = await answer(await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 1 } }, token));
    expect(again).toEqual({ status: 200, body: { success: true, result: "counted 1", data: { n: 1, execution: 2 } }, replayed: null });
  });

  it("the same tool_call_id with different arguments → 422 idempotency.mismatch; the same id for another tool is its own key", async () => {
    const { sessionId } = await newSession();
    const token = await tokenFor(sessionId);
    const id = `mm-${crypto.randomUUID()}`;
    await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 1 } }, token);
    const res = await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 2 } }, token);
    expect(res.status).toBe(422);
    expect(await res.json()).toEqual({
      error: { code: "idempotency.mismatch", message: `tool_call_id ${id} was already used for test.slowcount with different arguments` },
    });
    // Key order does not make arguments different.
    const reordered = await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 1 } }, token);
    expect(reordered.status).toBe(200);
    const snapshot = await answer(await callback(sessionId, "save_snapshot", { tool_call_id: id, args: {} }, token));
    expect(snapshot.body.success).toBe(true);
  });

  it("keys are scoped by session: the same tool_call_id in two sessions runs in each", async () => {
    const a = await newSession();
    const b = await newSession();
    const id = `scope-${crypto.randomUUID()}`;
    await callback(a.sessionId, "test.slowcount", { tool_call_id: id, args: {} }, await tokenFor(a.sessionId));
    await callback(b.sessionId, "test.slowcount", { tool_call_id: id, args: {} }, await tokenFor(b.sessionId));
    expect(executions.get(id)).toBe(2);
  });

  it("a call left in flight by an interrupted instance is answered as interrupted, never run again", async () => {
    const { sessionId, sessionKey } = await newSession();
    const token = await tokenFor(sessionId);
    const id = `crash-${crypto.randomUUID()}`;
    const { requestHash, canonicalJson } = await import("../../src/idempotency/store");
    const hash = await requestHash(canonicalJson({ n: 5 }));
    await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) => {
      state.storage.sql.exec(
        "INSERT INTO idempotency (scope, key, request_sha256, status, created_at) VALUES ('tool:test.slowcount', ?, ?, 'in_flight', ?)",
        id,
        hash,
        Date.now() - 1000,
      );
    });
    await evictDurableObject(env.SESSIONS.getByName(sessionKey));
    const res = await answer(await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 5 } }, token));
    expect(res).toEqual({
      status: 200,
      body: {
        success: false,
        result: `internal.error: an earlier attempt of this call (tool_call_id ${id}) was interrupted before it finished, so its effect is unknown; check before retrying with a new tool_call_id`,
      },
      replayed: null,
    });
    expect(executions.get(id)).toBeUndefined();
    const again = await answer(await callback(sessionId, "test.slowcount", { tool_call_id: id, args: { n: 5 } }, token));
    expect(again).toEqual({ ...res, replayed: "true" });
  });
});

describe("S5 callback answers", () => {
  it("an unknown tool, a tool the agent does not allowlist, and bad arguments are success:false with an actionable result", async () => {
    const { sessionId } = await newSession();
    const token = await tokenFor(sessionId);
    expect(await answer(await callback(sessionId, "no.such_tool", { tool_call_id: "u1", args: {} }, token))).toEqual({
      status: 200,
      body: { success: false, result: 'tool.not_found: unknown tool "no.such_tool"' },
      replayed: null,
    });
    const denied = await answer(
      await callback(sessionId, "fs.write_text", { tool_call_id: "u2", args: { path: "a", content: "b" } }, token),
    );
    expect(denied.body).toEqual({ success: false, result: expect.stringMatching(/^policy\.denied: /) });
    const invalid = await answer(await callback(sessionId, "automation.complete", { tool_call_id: "u3", args: { run_id: "r" } }, token));
    expect(invalid.body).toEqual({ success: false, result: expect.stringMatching(/^tool\.input_invalid: /) });
  });

  it("a malformed body is 400; an unknown session 404; an archived generation 410", async () => {
    const { sessionId, sessionKey } = await newSession();
    const token = await tokenFor(sessionId);
    const bad = await callback(sessionId, "verify", { tool_call_id: "has space", args: {} }, token);
    expect(bad.status).toBe(400);
    const extra = await callback(sessionId, "verify", { tool_call_id: "x", args: {}, extra: 1 }, token);
    expect(await extra.json()).toEqual({ error: { code: "invalid.request", message: "unknown field extra" } });
    const ghost = "ses_11111111111111111111111111111111";
    const ghostToken = (await mintSandboxToken(SECRET, ghost, Math.floor(Date.now() / 1000), 600)).token;
    expect((await callback(ghost, "verify", { tool_call_id: "g", args: {} }, ghostToken)).status).toBe(404);
    await (env.SESSIONS.getByName(sessionKey) as DurableObjectStub<SessionDO>).newSession({ sessionKey, agentId: "main" });
    const gone = await callback(sessionId, "verify", { tool_call_id: "g2", args: {} }, token);
    expect(gone.status).toBe(410);
  });

  it("S5 automation.complete over the callback (and its alias) is idempotent by completion_id", async () => {
    const { sessionId, sessionKey } = await newSession();
    const token = await tokenFor(sessionId);
    const run = (await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
      state.storage.sql.exec("SELECT id FROM runs").one(),
    )) as { id: string };
    const args = { run_id: run.id, completion_id: "done-1", outcome: "succeeded", summary: "all good" };
    const first = await answer(await callback(sessionId, "automation.complete", { tool_call_id: "c1", args }, token));
    const second = await answer(await callback(sessionId, "automation_complete", { tool_call_id: "c2", args }, token));
    expect(first.body).toMatchObject({ success: true, data: { completion_id: "done-1", run_id: run.id, outcome: "succeeded" } });
    expect(second.body).toMatchObject({ success: true, data: { completion_id: "done-1", duplicate: true, tool_call_id: "c1" } });
    const rows = await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
      state.storage.sql.exec("SELECT completion_id, run_id, outcome, tool_call_id FROM automation_completions").toArray(),
    );
    expect(rows).toEqual([{ completion_id: "done-1", run_id: run.id, outcome: "succeeded", tool_call_id: "c1" }]);
  });
});

describe("S5 §6.2: setup-only tools, in both places", () => {
  const envFiles = { files: [{ path: ".env", format: "dotenv", mode: "secret", keys: [{ key: "DATABASE_URL" }] }] };

  it("callbacks: save_env_files is refused outside setup sessions and runs in one (S5 wire field `format` accepted)", async () => {
    const ordinary = await newSession();
    const refused = await answer(
      await callback(ordinary.sessionId, "save_env_files", { tool_call_id: "e1", args: envFiles }, await tokenFor(ordinary.sessionId)),
    );
    expect(refused.body).toEqual({ success: false, result: "policy.denied: save_env_files is available only in setup sessions" });
    const setup = await newSession("setup");
    const ok = await answer(
      await callback(setup.sessionId, "save_env_files", { tool_call_id: "e1", args: envFiles }, await tokenFor(setup.sessionId)),
    );
    expect(ok.body.success).toBe(true);
  });

  it("runs: setup-only tools are not offered outside setup sessions, and refused there if a model names them anyway", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "call_env", name: "save_env_files", arguments: JSON.stringify({ files: [] }) }] },
      { content: "ok" },
    ]);
    const cfg = runConfig(host, { agent: { tools: { allow: S5 } } });
    const runApp = appFor(cfg);
    const res = await call(runApp, "POST", "/v1/runs", { agent_id: "main", message: "configure the env" });
    await until(async () => ["completed", "failed"].includes((await runDetail(runApp, res.body.id)).run.status));
    const [body] = (await bodiesSentTo(host)) as { tools?: { function: { name: string } }[] }[];
    const offered = (body?.tools ?? []).map((t) => t.function.name).sort();
    expect(offered).not.toContain("save_env_files");
    expect(offered).not.toContain("save_service_commands");
    expect(offered).toContain("save_snapshot");
    const result = (await runDetail(runApp, res.body.id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload).toMatchObject({
      ok: false,
      error: { code: "policy.denied", message: "save_env_files is available only in setup sessions" },
    });
  });

  it("POST /v1/runs with session_type setup: the run is offered the setup-only tools and uses the L5 setup task", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "ready" }]);
    // Issue 20 §6: setup sessions are for callers listed in setup.allowedCallers.
    const runApp = appFor({ ...runConfig(host, { agent: { tools: { allow: S5 } } }), setup: { allowedCallers: ["alice"] } });
    const bad = await call(runApp, "POST", "/v1/runs", { agent_id: "main", message: "x", session_type: "admin" });
    expect(bad.status).toBe(400);
    const res = await call(runApp, "POST", "/v1/runs", { agent_id: "main", message: "set up", session_type: "setup" });
    expect(res.status).toBe(202);
    await until(async () => (await runDetail(runApp, res.body.id)).run.status === "completed");
    const [body] = (await bodiesSentTo(host)) as { tools?: { function: { name: string } }[] }[];
    expect((body?.tools ?? []).map((t) => t.function.name)).toEqual(expect.arrayContaining(["save_env_files", "save_service_commands"]));
    const stack = (await runDetail(runApp, res.body.id)).manifests[0].manifest.stack.map((e: any) => `${e.layer}:${e.id}`);
    expect(stack).toContain("L5:tasks/setup");
  });
});

describe("DESIGN Idempotency: run tool calls use the same store", () => {
  it("a run's tool call is recorded under tool:<name> with its run, round and tool_call_id", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "call_1", name: "request_env_variables", arguments: JSON.stringify({ keys: [{ key: "API_URL" }] }) }] },
      { content: "asked" },
    ]);
    const cfg = runConfig(host, { agent: { tools: { allow: S5 } } });
    const runApp = appFor(cfg);
    const res = await call(runApp, "POST", "/v1/runs", { agent_id: "main", message: "ask for the env" });
    await until(async () => (await runDetail(runApp, res.body.id)).run.status === "completed");
    const objectId = (res.body.id as string).slice(4, 68);
    const rows = await runInDurableObject(env.SESSIONS.get(env.SESSIONS.idFromString(objectId)), (_, state) =>
      state.storage.sql.exec("SELECT scope, key, status FROM idempotency").toArray(),
    );
    expect(rows).toEqual([{ scope: "tool:request_env_variables", key: `${res.body.id}:1:call_1`, status: "done" }]);
  });
});
