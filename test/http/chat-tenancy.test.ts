/**
 * Issue 20 §1 "Callers never share a conversation": POST /v1/chat/messages keys its session by the API caller
 * too (agent:{agent}:http:{caller}~{room}:dm:{user}), so two callers who send the same agent, room and user ids
 * get two sessions, and /new and /resume reach only the caller's own generations. Sessions created under the
 * old room-only keys stay where they are, readable by admins (docs/decisions.md). End to end through HTTP, with
 * a scripted mock provider whose request bodies show what each model turn was given.
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, BOB, call, registerTestTools, waitForRun } from "../support/runs";

beforeAll(() => registerTestTools());

const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;

/** Sends one chat message as `token` in (agent main, `roomId`, user u1). */
function say(app: App, token: string, roomId: string, message: string) {
  return call(app, "POST", "/v1/chat/messages", { agent_id: "main", room_id: roomId, user_id: "u1", message }, token);
}

/** Sends a message and waits for its run to end; returns the 202 body. */
async function turn(app: App, token: string, roomId: string, message: string) {
  const res = await say(app, token, roomId, message);
  expect(res.status).toBe(202);
  await waitForRun(app, res.body.id, token);
  return res.body as { id: string; session_id: string };
}

/** Every message's content in each provider request (system layers left out). */
async function conversationsSent(host: string): Promise<string[][]> {
  return (await bodiesSentTo(host)).map((b) =>
    b.messages.filter((m: { role: string }) => m.role !== "system").map((m: { content: string }) => m.content),
  );
}

/** The contents of one session generation, as an admin reads them. */
async function adminMessages(app: App, sessionId: string): Promise<string[]> {
  const res = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/messages`, undefined, ADMIN);
  expect(res.status).toBe(200);
  return res.body.messages.map((m: { content: string }) => m.content);
}

describe("ISSUE20-§1 callers never share a conversation", () => {
  it("ISSUE20-§1 two callers with the same agent, room and user ids get two sessions, and neither's messages reach the other's provider request", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "noted, alice" }, { content: "hello bob" }, { content: "still here, alice" }]);
    const app = appFor(runConfig(host));
    const r = room();
    const a1 = await turn(app, ALICE, r, "alice's secret is pelican-42");
    const b1 = await turn(app, BOB, r, "what did the previous user tell you?");
    const a2 = await turn(app, ALICE, r, "and now?");
    expect(b1.session_id).not.toBe(a1.session_id);
    expect(a2.session_id).toBe(a1.session_id);
    expect(await conversationsSent(host)).toEqual([
      ["alice's secret is pelican-42"],
      ["what did the previous user tell you?"],
      ["alice's secret is pelican-42", "noted, alice", "and now?"],
    ]);
    const sessions = await call(app, "GET", `/api/admin/chat/sessions?room_id=${r}`, undefined, ADMIN);
    expect(sessions.body.sessions.map((s: { session_key: string; room_id: string }) => [s.session_key, s.room_id]).sort()).toEqual([
      [`agent:main:http:alice~${r}:dm:u1`, r],
      [`agent:main:http:bob~${r}:dm:u1`, r],
    ]);
    // A room id cannot name another caller's key: `~` is not allowed in one.
    expect(await say(app, BOB, `alice~${r}`, "hi")).toMatchObject({
      status: 400,
      body: { error: { code: "invalid.request", message: "room_id: 1-128 characters of letters, digits and + . _ @ = -" } },
    });
  });

  it("ISSUE20-§1 one caller's /new leaves the other caller's session untouched", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "a1" }, { content: "b1" }, { content: "a2" }]);
    const app = appFor(runConfig(host));
    const r = room();
    const a1 = await turn(app, ALICE, r, "alice one");
    const b1 = await turn(app, BOB, r, "bob one");
    const fresh = await say(app, BOB, r, "/new");
    expect(fresh.status).toBe(200);
    expect(fresh.body.session_id).not.toBe(b1.session_id);
    const a2 = await turn(app, ALICE, r, "alice two");
    expect(a2.session_id).toBe(a1.session_id);
    expect(await adminMessages(app, a1.session_id)).toEqual(["alice one", "a1", "alice two", "a2"]);
    expect((await conversationsSent(host))[2]).toEqual(["alice one", "a1", "alice two"]);
  });

  it("ISSUE20-§1 /resume of another caller's session_id (current or archived) is refused with 404 and changes nothing", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "a1" }, { content: "b1" }]);
    const app = appFor(runConfig(host));
    const r = room();
    const a1 = await turn(app, ALICE, r, "alice one");
    const b1 = await turn(app, BOB, r, "bob one");
    const bobNew = await say(app, BOB, r, "/new"); // b1's generation is archived in bob's conversation now
    for (const target of [b1.session_id, bobNew.body.session_id]) {
      const res = await say(app, ALICE, r, `/resume ${target}`);
      expect(res).toMatchObject({
        status: 404,
        body: { error: { code: "resource.not_found", message: `no session ${target} in this conversation` } },
      });
    }
    // Bob's own /resume still works, and alice's conversation is as it was.
    expect((await say(app, BOB, r, `/resume ${b1.session_id}`)).body).toEqual({
      response: `Resumed session ${b1.session_id}.`,
      session_id: b1.session_id,
    });
    expect(await adminMessages(app, b1.session_id)).toEqual(["bob one", "b1"]);
    expect(await adminMessages(app, a1.session_id)).toEqual(["alice one", "a1"]);
  });

  it("ISSUE20-§1 a session under the old room-only key is reached by no caller, and admins still list and read it", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "fresh start" }]);
    const app = appFor(runConfig(host));
    const r = room();
    // What the gateway stored before this change: agent:main:http:{room}:dm:{user}, written by some caller.
    const legacyKey = `agent:main:http:${r}:dm:u1`;
    const legacy = await env.SESSIONS.getByName(legacyKey).enqueueMessage(
      { sessionKey: legacyKey, agentId: "main" },
      { message: "legacy history: the vault code is 7311", source: "http", limits: { maxTurns: 100, maxBytes: 1_000_000 } },
    );
    const a1 = await turn(app, ALICE, r, "hi");
    expect(a1.session_id).not.toBe(legacy.sessionId);
    expect(await conversationsSent(host)).toEqual([["hi"]]);
    expect((await say(app, ALICE, r, `/resume ${legacy.sessionId}`)).status).toBe(404);
    // Nothing is lost: the admin list shows both under the room filter, and the legacy transcript reads whole.
    const listed = await call(app, "GET", `/api/admin/chat/sessions?room_id=${r}&channel=http`, undefined, ADMIN);
    expect(listed.body.sessions.map((s: { session_key: string; session_id: string }) => [s.session_key, s.session_id]).sort()).toEqual(
      [
        [`agent:main:http:${r}:dm:u1`, legacy.sessionId],
        [`agent:main:http:alice~${r}:dm:u1`, a1.session_id],
      ].sort(),
    );
    expect(await adminMessages(app, legacy.sessionId)).toEqual(["legacy history: the vault code is 7311"]);
    const transcript = await app.request(
      `https://gateway.test/api/admin/chat/sessions/${legacy.sessionId}/transcript`,
      { headers: { Authorization: `Bearer ${ADMIN}` } },
      env,
    );
    expect(transcript.status).toBe(200);
    expect(JSON.parse((await transcript.text()).trim()).content).toBe("legacy history: the vault code is 7311");
  });
});
