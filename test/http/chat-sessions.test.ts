/**
 * Sessions over HTTP (S3 §5, S1 §5, DESIGN "Sessions vs. session_id"):
 * POST /v1/chat/messages, /new and /resume, archives in R2, maxTurns,
 * eviction, redaction on the write path, and the admin session views.
 */
import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { runQueueEntry } from "../../src/sessions/session-runs-store";
import { exportJsonl, parseJsonl } from "../../src/sessions/transcript";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { appFor, waitForRun } from "../support/runs";
import { inSession } from "../support/session";

const ALICE = "test-api-token-alice-0123456789";
const ADMIN = "test-admin-token-0123456789abcdef";
/**
 * The app with agent main's session limits overridden. These tests are about what the session stores,
 * so the model's window is too small for any prompt: every run queued here fails over_budget before
 * any network call and adds nothing to the transcript (runs themselves are tested in runs.test.ts).
 */
function limitedApp(session: { maxTurns?: number; maxBytes?: number } = {}) {
  const parsed = parseGatewayConfig({
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: {
          baseUrl: "https://api.moonshot.cn/v1",
          models: { "kimi-k1-128k": { contextWindow: 1100, maxOutputTokens: 1000, supportsTools: true, supportsStreaming: true } },
        },
      },
    },
    agents: { main: { session } },
  });
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return createApp({ config: parsed.value, logger: createLogger("error") });
}

const app = limitedApp();

async function send(body: Record<string, unknown>, token = ALICE, via = app) {
  const res = await via.request(
    "https://gateway.test/v1/chat/messages",
    { method: "POST", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify(body) },
    env,
  );
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function admin(path: string) {
  const res = await app.request(`https://gateway.test${path}`, { headers: { Authorization: `Bearer ${ADMIN}` } }, env);
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;

describe("POST /v1/chat/messages (S3 §5)", () => {
  it("US-CHAT-001 answers 202 {id, status:'queued', session_id} and queues a run in agent:{agent_id}:http:{caller}~{room_id}:dm:{user_id}", async () => {
    const r = room();
    const res = await send({ user_id: "123456", room_id: r, agent_id: "main", message: "Summarize today updates" });
    expect(res.status).toBe(202);
    expect(Object.keys(res.body)).toEqual(["id", "status", "session_id"]);
    expect(res.body.id).toMatch(/^run_[0-9a-f]{80}$/);
    expect(res.body.status).toBe("queued");
    expect(res.body.session_id).toMatch(/^ses_[0-9a-f]{32}$/);
    const stub = env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:123456`);
    expect(await inSession(stub, (cx) => runQueueEntry(cx.sql, res.body.id))).toMatchObject({
      id: res.body.id,
      session_id: res.body.session_id,
      source: "http",
      agent_id: "main",
    });
    const messages = await stub.messages(res.body.session_id);
    expect(messages?.map((m) => [m.role, m.content, m.run_id])).toEqual([["user", "Summarize today updates", res.body.id]]);
  });

  it("the same user and room keep one session; another room gets another", async () => {
    const r = room();
    const a = await send({ user_id: "u1", room_id: r, agent_id: "main", message: "one" });
    const b = await send({ user_id: "u1", room_id: r, agent_id: "main", message: "two" });
    const c = await send({ user_id: "u1", room_id: room(), agent_id: "main", message: "three" });
    expect(b.body.session_id).toBe(a.body.session_id);
    expect(c.body.session_id).not.toBe(a.body.session_id);
  });

  const invalid: [string, Record<string, unknown>, number, string][] = [
    ["agent_id missing", { user_id: "u", room_id: "r", message: "hi" }, 400, "agent_id is required"],
    ["message missing", { user_id: "u", room_id: "r", agent_id: "main" }, 400, "message is required"],
    [
      "empty message",
      { user_id: "u", room_id: "r", agent_id: "main", message: "" },
      400,
      "message: Too small: expected string to have >=1 characters",
    ],
    [
      "room id with ':'",
      { user_id: "u", room_id: "a:b", agent_id: "main", message: "hi" },
      400,
      "room_id: 1-128 characters of letters, digits and + . _ @ = -",
    ],
    ["unknown field", { user_id: "u", room_id: "r", agent_id: "main", message: "hi", admin: true }, 400, "unknown field admin"],
    ["unknown agent", { user_id: "u", room_id: "r", agent_id: "ghost", message: "hi" }, 404, 'unknown agent "ghost"'],
  ];
  for (const [name, body, status, message] of invalid) {
    it(`${name} → ${status}`, async () => {
      const res = await send(body);
      expect(res).toEqual({ status, body: { error: { code: status === 404 ? "resource.not_found" : "invalid.request", message } } });
    });
  }

  it("needs the api scope: no token → 401, the admin token → 403", async () => {
    const body = { user_id: "u", room_id: room(), agent_id: "main", message: "hi" };
    const none = await app.request(
      "https://gateway.test/v1/chat/messages",
      { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) },
      env,
    );
    expect(none.status).toBe(401);
    expect((await send(body, ADMIN)).status).toBe(403);
  });
});

describe("/new and /resume (session generations)", () => {
  it("/new answers 200 at once, archives the transcript to R2 at the DESIGN path, and starts a new session_id", async () => {
    const r = room();
    const first = await send({ user_id: "u2", room_id: r, agent_id: "main", message: "before new" });
    const fresh = await send({ user_id: "u2", room_id: r, agent_id: "main", message: "/new" });
    expect(fresh.status).toBe(200);
    expect(fresh.body.session_id).not.toBe(first.body.session_id);
    expect(fresh.body.response).toBe(
      `Started a new session. The previous one (${first.body.session_id}) is archived; /resume ${first.body.session_id} brings it back.`,
    );
    const key = `agents/main/sessions/agent:main:http:alice~${r}:dm:u2/${first.body.session_id}.jsonl`;
    const archived = await env.AUDIT.get(key);
    expect(archived).not.toBeNull();
    const rows = parseJsonl(await (archived as R2ObjectBody).text());
    expect(rows.map((m) => m.content)).toEqual(["before new"]);
    const after = await send({ user_id: "u2", room_id: r, agent_id: "main", message: "after new" });
    expect(after.body.session_id).toBe(fresh.body.session_id);
  });

  it("/resume <session_id> brings an archived session back, with its messages", async () => {
    const r = room();
    const first = await send({ user_id: "u3", room_id: r, agent_id: "main", message: "first generation" });
    await send({ user_id: "u3", room_id: r, agent_id: "main", message: "/new" });
    await send({ user_id: "u3", room_id: r, agent_id: "main", message: "second generation" });
    const resumed = await send({ user_id: "u3", room_id: r, agent_id: "main", message: `/resume ${first.body.session_id}` });
    expect(resumed).toEqual({
      status: 200,
      body: { response: `Resumed session ${first.body.session_id}.`, session_id: first.body.session_id },
    });
    const next = await send({ user_id: "u3", room_id: r, agent_id: "main", message: "back again" });
    expect(next.body.session_id).toBe(first.body.session_id);
    const msgs = await admin(`/api/admin/chat/sessions/${first.body.session_id}/messages`);
    expect(msgs.body.messages.map((m: { content: string }) => m.content)).toEqual(["first generation", "back again"]);
  });

  it("/resume refuses a session of another conversation (another key) with 404", async () => {
    const mine = await send({ user_id: "u4", room_id: room(), agent_id: "main", message: "mine" });
    const r = room();
    await send({ user_id: "u5", room_id: r, agent_id: "main", message: "theirs" });
    const res = await send({ user_id: "u5", room_id: r, agent_id: "main", message: `/resume ${mine.body.session_id}` });
    expect(res).toEqual({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no session ${mine.body.session_id} in this conversation` } },
    });
  });

  it("/resume without a well-formed id → 400 with usage", async () => {
    const res = await send({ user_id: "u6", room_id: room(), agent_id: "main", message: "/resume nonsense" });
    expect(res).toEqual({ status: 400, body: { error: { code: "invalid.request", message: "usage: /resume <session_id>" } } });
  });

  it("when the archive cannot be written, /new changes nothing (503) and loses nothing", async () => {
    const r = room();
    const first = await send({ user_id: "u7", room_id: r, agent_id: "main", message: "keep me" });
    // Occupy the archive key: the create-only write cannot succeed.
    await env.AUDIT.put(`agents/main/sessions/agent:main:http:alice~${r}:dm:u7/${first.body.session_id}.jsonl`, "someone else's bytes");
    const res = await send({ user_id: "u7", room_id: r, agent_id: "main", message: "/new" });
    expect(res).toEqual({
      status: 503,
      body: { error: { code: "internal.error", message: "could not archive the current session, so nothing was changed; try again" } },
    });
    const again = await send({ user_id: "u7", room_id: r, agent_id: "main", message: "still here" });
    expect(again.body.session_id).toBe(first.body.session_id);
    const stub = env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u7`);
    expect((await stub.messages(first.body.session_id))?.map((m) => m.content)).toEqual(["keep me", "still here"]);
  });
});

describe("transcript storage", () => {
  it("JSONL export is byte-stable and round-trips", async () => {
    const r = room();
    const a = await send({ user_id: "u8", room_id: r, agent_id: "main", message: "línea uno ✓ 中文" });
    await send({ user_id: "u8", room_id: r, agent_id: "main", message: 'quotes " and \\ backslashes\nnewline' });
    const stub = env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u8`);
    const jsonl = (await stub.exportTranscript(a.body.session_id)) as string;
    expect(jsonl.split("\n")).toHaveLength(3);
    expect(jsonl.endsWith("\n")).toBe(true);
    expect(exportJsonl(parseJsonl(jsonl))).toBe(jsonl);
    expect(await stub.exportTranscript(a.body.session_id)).toBe(jsonl);
    expect(Object.keys(JSON.parse(jsonl.split("\n")[0] as string))).toEqual([
      "seq",
      "session_id",
      "role",
      "content",
      "ts",
      "run_id",
      "tool_name",
      "tool_call_id",
      "redactions",
    ]);
  });

  it("eviction loses nothing", async () => {
    const r = room();
    const a = await send({ user_id: "u9", room_id: r, agent_id: "main", message: "one" });
    const stub = env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u9`);
    await evictDurableObject(stub);
    await send({ user_id: "u9", room_id: r, agent_id: "main", message: "two" });
    await evictDurableObject(stub);
    expect((await stub.messages(a.body.session_id))?.map((m) => m.content)).toEqual(["one", "two"]);
    expect(await inSession(stub, (cx) => runQueueEntry(cx.sql, a.body.id))).toMatchObject({ id: a.body.id, message_seq: 1 });
  });

  it("maxTurns is enforced by archiving the oldest turns to R2, never by losing them", async () => {
    const limited = limitedApp({ maxTurns: 3 });
    const r = room();
    let sessionId = "";
    for (let i = 1; i <= 5; i++)
      sessionId = (await send({ user_id: "u10", room_id: r, agent_id: "main", message: `turn ${i}` }, ALICE, limited)).body.session_id;
    const listed = await env.AUDIT.list({ prefix: `agents/main/sessions/agent:main:http:alice~${r}:dm:u10/` });
    expect(listed.objects.length).toBeGreaterThanOrEqual(1);
    const archivedContents: string[] = [];
    for (const o of listed.objects)
      archivedContents.push(...parseJsonl(await ((await env.AUDIT.get(o.key)) as R2ObjectBody).text()).map((m) => m.content));
    expect(archivedContents).toEqual(["turn 1", "turn 2"]);
    // All five are still readable, in order; only three are live in the object.
    const msgs = await admin(`/api/admin/chat/sessions/${sessionId}/messages`);
    expect(msgs.body.messages.map((m: { content: string }) => m.content)).toEqual(["turn 1", "turn 2", "turn 3", "turn 4", "turn 5"]);
  });

  it("secrets are redacted before they are stored (S1 §5.4): credential patterns and configured secret values", async () => {
    const r = room();
    const a = await send({
      user_id: "u11",
      room_id: r,
      agent_id: "main",
      message: `my key is sk-abcdefghijklmnopqrstuvwxyz012345 and the admin token ${ADMIN}`,
    });
    const stub = env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u11`);
    const [row] = (await stub.messages(a.body.session_id)) ?? [];
    expect(row?.content).toBe("my key is [REDACTED:openai_style_key] and the admin token [REDACTED:secret]");
    expect(row?.redactions).toEqual(["content"]);
  });
});

describe("admin session views", () => {
  it("GET /api/admin/chat/sessions filters by agent, user, room and channel", async () => {
    const r = room();
    const a = await send({ user_id: "filter-user", room_id: r, agent_id: "main", message: "hello" });
    const res = await admin(`/api/admin/chat/sessions?user_id=filter-user&room_id=${r}&channel=http&agent_id=main`);
    expect(res.status).toBe(200);
    expect(res.body.sessions).toEqual([
      {
        session_key: `agent:main:http:alice~${r}:dm:filter-user`,
        agent_id: "main",
        channel: "http",
        room_id: r,
        user_id: "filter-user",
        scope: "dm",
        session_id: a.body.session_id,
        created_at: expect.any(String),
        updated_at: expect.any(String),
      },
    ]);
    expect((await admin(`/api/admin/chat/sessions?room_id=${r}&channel=telegram`)).body.sessions).toEqual([]);
  });

  it("GET /api/admin/chat/sessions/{session_id}/messages returns ordered messages with tool metadata fields", async () => {
    const r = room();
    const a = await send({ user_id: "u12", room_id: r, agent_id: "main", message: "first" });
    await send({ user_id: "u12", room_id: r, agent_id: "main", message: "second" });
    const res = await admin(`/api/admin/chat/sessions/${a.body.session_id}/messages`);
    expect(res.status).toBe(200);
    expect(res.body.session_key).toBe(`agent:main:http:alice~${r}:dm:u12`);
    expect(res.body.messages.map((m: Record<string, unknown>) => Object.keys(m))).toEqual([
      ["seq", "role", "content", "ts", "run_id", "tool_name", "tool_call_id"],
      ["seq", "role", "content", "ts", "run_id", "tool_name", "tool_call_id"],
    ]);
    const seqs = res.body.messages.map((m: { seq: number }) => m.seq);
    expect(seqs[1]).toBeGreaterThan(seqs[0]);
    expect((await admin("/api/admin/chat/sessions/ses_00000000000000000000000000000000/messages")).status).toBe(404);
  });

  it("GET /api/admin/chat/sessions/{session_id}/transcript exports the whole generation as S1 §5.2 JSONL, archived turns included", async () => {
    const limited = limitedApp({ maxTurns: 2 });
    const r = room();
    let sessionId = "";
    for (const text of ["one", "two", "three sk-abcdefghijklmnopqrstuvwxyz012345"])
      sessionId = (await send({ user_id: "u13", room_id: r, agent_id: "main", message: text }, ALICE, limited)).body.session_id;
    const res = await app.request(
      `https://gateway.test/api/admin/chat/sessions/${sessionId}/transcript`,
      { headers: { Authorization: `Bearer ${ADMIN}` } },
      env,
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    expect(res.headers.get("content-disposition")).toBe(`attachment; filename="${sessionId}.jsonl"`);
    const lines = (await res.text())
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => Object.keys(l))).toEqual(
      Array(3).fill(["seq", "session_id", "role", "content", "ts", "run_id", "tool_name", "tool_call_id", "redactions"]),
    );
    expect(lines.map((l) => [l.session_id, l.role, l.content, l.redactions])).toEqual([
      [sessionId, "user", "one", []],
      [sessionId, "user", "two", []],
      [sessionId, "user", "three [REDACTED:openai_style_key]", ["content"]],
    ]);
    const missing = await admin("/api/admin/chat/sessions/ses_00000000000000000000000000000000/transcript");
    expect(missing).toEqual({
      status: 404,
      body: { error: { code: "resource.not_found", message: "no session ses_00000000000000000000000000000000" } },
    });
  });

  it("the admin routes need the admin scope", async () => {
    const res = await app.request("https://gateway.test/api/admin/chat/sessions", { headers: { Authorization: `Bearer ${ALICE}` } }, env);
    expect(res.status).toBe(403);
  });
});

describe("assistant replies (S1 §5.5 streaming rule)", () => {
  // Through the runtime path (a run answering a chat message): the engine stores the final reply only.
  async function reply(content: string) {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content }]);
    const via = appFor(runConfig(host));
    const r = room();
    const sent = await send({ user_id: "u", room_id: r, agent_id: "main", message: "hi" }, ALICE, via);
    expect((await waitForRun(via, sent.body.id)).status).toBe("completed");
    const id = { sessionKey: `agent:main:http:alice~${r}:dm:u`, agentId: "main" };
    const stub = env.SESSIONS.getByName(id.sessionKey);
    return { stub, id, rows: (await stub.messages(sent.body.session_id)) ?? [] };
  }

  it("external sessions store final assistant messages only, NOTES applied and stripped", async () => {
    const { stub, id, rows } = await reply('Hello! <<<NOTES_JSON>>>{"add_decisions":["greet"]}<<<END_NOTES_JSON>>>');
    expect(rows.map((r) => [r.role, r.content])).toEqual([
      ["user", "hi"],
      ["assistant", "Hello!"],
    ]);
    expect((await stub.checkpoint(id)).state.decisions).toEqual(["greet"]);
  });

  it("assistant replies are redacted before they are stored", async () => {
    const { rows } = await reply("here: AKIAIOSFODNN7EXAMPLE");
    expect(rows.at(-1)).toMatchObject({ role: "assistant", content: "here: [REDACTED:aws_access_key_id]" });
  });
});

describe("maxBytes", () => {
  it("the oldest turns over maxBytes are archived to R2 before they leave the object", async () => {
    const limited = limitedApp({ maxBytes: 4096 });
    const r = room();
    let sessionId = "";
    for (let i = 1; i <= 6; i++)
      sessionId = (await send({ user_id: "ub", room_id: r, agent_id: "main", message: `${i} ${"x".repeat(1000)}` }, ALICE, limited)).body
        .session_id;
    // Every message is still readable, in order.
    expect(
      (await admin(`/api/admin/chat/sessions/${sessionId}/messages`)).body.messages.map((m: { content: string }) => m.content[0]),
    ).toEqual(["1", "2", "3", "4", "5", "6"]);
    // Six messages of 1002 bytes against maxBytes 4096: the two oldest went to R2, four (4008 bytes) stay live.
    const listed = await env.AUDIT.list({ prefix: `agents/main/sessions/agent:main:http:alice~${r}:dm:ub/` });
    const archived: string[] = [];
    for (const o of listed.objects.filter((x) => x.key.includes(".part-"))) {
      archived.push(...parseJsonl(await ((await env.AUDIT.get(o.key)) as R2ObjectBody).text()).map((m) => m.content[0] as string));
    }
    expect(archived).toEqual(["1", "2"]);
  });
});
