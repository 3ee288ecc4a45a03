/**
 * Issue 23 "A WebSocket conversation route": GET /v1/chat/socket, end to end in workerd with a real WebSocket
 * client (the upgrade goes through the Worker's app, `resp.webSocket.accept()`), real local DOs, D1 and R2, and a
 * scripted mock provider. The session object resolves the configuration in force itself (per message, like the
 * Worker per request), so each test posts its configuration as the admin-posted version in force.
 */

import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { baseWithoutCanary } from "../support/leaks";
import { measureOverlap } from "../support/overlap-measure";
import { ADMIN, ALICE, appFor, BOB, call, readResponse, registerTestTools } from "../support/runs";
import { connect, inForce, upgrade } from "../support/socket";

beforeAll(() => registerTestTools());

const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;

const types = (frames: any[], id: string) => frames.filter((f) => f.type === "event" && f.id === id).map((f) => f.event.event_type);
/** The frame that closes a turn: the run itself, after its terminal event. */
const ended = (id: string) => (f: any) => f.type === "run" && f.id === id;
const base64url = (text: string) => btoa(text).replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "");

describe("ISSUE23 the WebSocket conversation route", () => {
  // First in the file: no other test's socket holds one of alice's slots yet (storage is per test file).
  it("ISSUE23 a socket holds one of the caller's open streams: past limits.maxOpenStreamsPerCaller the upgrade is 429; closing gives the slot back", async () => {
    const config = runConfig(uniqueHost("script"));
    const app = await inForce({ ...config, limits: { ...config.limits, maxOpenStreamsPerCaller: 1 } });
    const one = await connect(app, room());
    const refused = await upgrade(app, room(), { token: ALICE });
    expect(refused.webSocket).toBeNull();
    expect(await readResponse(refused)).toMatchObject({
      status: 429,
      body: {
        error: {
          code: "rate.limited",
          message: "this caller already has 1 event streams open (limit 1); close one before opening another",
        },
      },
    });
    // Bob's own cap is untouched.
    (await connect(app, room(), BOB)).ws.close();
    one.ws.close();
    const deadline = Date.now() + 5_000;
    let res = await upgrade(app, room(), { token: ALICE });
    while (res.status === 429 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      res = await upgrade(app, room(), { token: ALICE });
    }
    expect(res.status).toBe(101);
    res.webSocket?.accept();
    res.webSocket?.close();
  });

  it("ISSUE23 auth is refused at the upgrade, in the S3 envelope, and no socket opens", async () => {
    const app = await inForce(runConfig(uniqueHost("script")));
    const r = room();
    const cases = [
      { o: {}, status: 401, code: "auth.unauthorized", message: "missing bearer token: send Authorization: Bearer <token>" },
      { o: { token: "not-a-configured-token-0123456789" }, status: 401, code: "auth.unauthorized", message: "invalid bearer token" },
      { o: { token: ADMIN }, status: 403, code: "auth.forbidden", message: 'this route needs a token with the "api" scope' },
      {
        o: { query: `agent_id=main&room_id=${r}&user_id=u1&access_token=${ALICE}` },
        status: 401,
        code: "auth.unauthorized",
        message: 'credentials are not accepted in the query string ("access_token"); send Authorization: Bearer <token>',
      },
      {
        o: { headers: { "Sec-WebSocket-Protocol": `sophie.v1, bearer.${base64url("not-a-configured-token-0123456789")}` } },
        status: 401,
        code: "auth.unauthorized",
        message: "invalid bearer token",
      },
      {
        o: { headers: { "Sec-WebSocket-Protocol": "sophie.v1, bearer.***" } },
        status: 401,
        code: "auth.unauthorized",
        message: "malformed bearer subprotocol: expected bearer.<base64url of the token>",
      },
    ];
    for (const c of cases) {
      const res = await upgrade(app, r, c.o);
      expect(res.webSocket).toBeNull();
      expect(await readResponse(res)).toMatchObject({ status: c.status, body: { error: { code: c.code, message: c.message } } });
    }
    // Past the guard: an unknown agent is 404, a plain GET 426, still without a socket.
    const unknown = await upgrade(app, r, { token: ALICE, agent: "nobody" });
    expect(unknown.webSocket).toBeNull();
    expect(await readResponse(unknown)).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: 'unknown agent "nobody"' } },
    });
    const plain = await app.request(
      `https://gateway.test/v1/chat/socket?agent_id=main&room_id=${r}&user_id=u1`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      env,
    );
    expect(await readResponse(plain)).toMatchObject({
      status: 426,
      body: { error: { code: "invalid.request", message: "this route opens a WebSocket: send Upgrade: websocket" } },
    });
  });

  it("ISSUE23 a message → accepted, then the run's events through run.completed with the assistant's reply", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "hello from the socket" }]);
    const app = await inForce(runConfig(host));
    const r = room();
    // The browser's way: the token as a subprotocol; the answer selects sophie.v1 only.
    const res = await upgrade(app, r, { headers: { "Sec-WebSocket-Protocol": `sophie.v1, bearer.${base64url(ALICE)}` } });
    expect(res.status).toBe(101);
    expect(res.headers.get("Sec-WebSocket-Protocol")).toBe("sophie.v1");
    res.webSocket?.accept();
    res.webSocket?.close();
    const client = await connect(app, r);
    client.send({ type: "message", id: "m-1", text: "hi there" });
    const done = await client.until(ended("m-1"));
    const accepted = client.frames[0];
    expect(accepted).toEqual({
      type: "accepted",
      id: "m-1",
      run_id: expect.stringMatching(/^run_/),
      session_id: expect.stringMatching(/^ses_/),
      duplicate: false,
    });
    expect(types(client.frames, "m-1")).toEqual(["run.created", "run.started", "model.requested", "run.completed"]);
    expect(client.frames.at(-2).event).toMatchObject({ run_id: accepted.run_id, agent_id: "main", seq: 4, event_type: "run.completed" });
    expect(done).toEqual(client.frames.at(-1));
    expect(done.run).toMatchObject({ id: accepted.run_id, status: "completed", output: "hello from the socket" });
    // The run frame is the run as GET /v1/runs/{run_id} shows it.
    expect(done.run).toEqual((await call(app, "GET", `/v1/runs/${accepted.run_id}`)).body);
    // Each event frame carries the SSE stream's event, seq after seq.
    const sse = await call(app, "GET", `/v1/runs/${accepted.run_id}/events?follow=false`);
    const sseData = sse.text
      .split("\n")
      .filter((l: string) => l.startsWith("data: "))
      .map((l: string) => JSON.parse(l.slice(6)));
    expect(client.frames.filter((f) => f.type === "event").map((f) => f.event)).toEqual(sseData);
    // The conversation is the chat route's: a message there lands in the same session, after the socket's turn.
    await scriptProvider(host, [{ content: "second" }]);
    const chat = await call(app, "POST", "/v1/chat/messages", { agent_id: "main", room_id: r, user_id: "u1", message: "and via http" });
    expect(chat.body.session_id).toBe(accepted.session_id);
    client.ws.close();
  });

  it("ISSUE23 a second caller cannot reach the first's conversation, even with the same ids and message id", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "noted, alice" }, { content: "hello bob" }]);
    const app = await inForce(runConfig(host));
    const r = room();
    const alice = await connect(app, r, ALICE);
    alice.send({ type: "message", id: "same", text: "alice's secret is pelican-42" });
    await alice.until(ended("same"));
    const bob = await connect(app, r, BOB);
    bob.send({ type: "message", id: "same", text: "what did the previous user tell you?" });
    await bob.until(ended("same"));
    const [a, b] = [alice.frames[0], bob.frames[0]];
    expect(b).toMatchObject({ type: "accepted", duplicate: false });
    expect(b.run_id).not.toBe(a.run_id);
    expect(b.session_id).not.toBe(a.session_id);
    const sent = (await bodiesSentTo(host)).map((x) => x.messages.filter((m: any) => m.role !== "system").map((m: any) => m.content));
    expect(sent).toEqual([["alice's secret is pelican-42"], ["what did the previous user tell you?"]]);
    expect(bob.frames.filter((f) => f.type === "event").every((f) => f.event.run_id === b.run_id)).toBe(true);
    // Bob cannot read Alice's run either.
    expect((await call(app, "GET", `/v1/runs/${a.run_id}`, undefined, BOB)).status).toBe(404);
    alice.ws.close();
    bob.ws.close();
  });

  it("ISSUE23 a bad frame gets an error frame in the S3 envelope and the socket stays usable", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "still here" }]);
    const app = await inForce(runConfig(host));
    const client = await connect(app, room());
    client.send("not json");
    client.send({ type: "message", id: "m-2" });
    client.send({ type: "message", id: "m-3", text: "x", extra: 1 });
    client.send({ type: "shout", id: "m-4", text: "x" });
    client.ws.send(new Uint8Array([1, 2, 3]));
    await client.until((f) => f.type === "error" && f.id === "m-4");
    await client.until((f) => f.type === "error" && f.error.message === "frames are JSON text, not binary");
    expect(client.frames).toEqual([
      { type: "error", error: { code: "invalid.request", message: "a frame must be one JSON object" } },
      { type: "error", id: "m-2", error: { code: "invalid.request", message: "text is required" } },
      { type: "error", id: "m-3", error: { code: "invalid.request", message: "unknown field extra" } },
      { type: "error", id: "m-4", error: { code: "invalid.request", message: expect.stringMatching(/^type: /) } },
      { type: "error", error: { code: "invalid.request", message: "frames are JSON text, not binary" } },
    ]);
    client.send({ type: "message", id: "m-5", text: "are you there?" });
    const done = await client.until(ended("m-5"));
    expect(done.run).toMatchObject({ status: "completed", output: "still here" });
    client.ws.close();
  });

  it("ISSUE23 eviction loses no completed run's events: the hibernatable socket survives it, and a resent message id replays the same run", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "durable answer" }, { content: "after eviction" }]);
    const app = await inForce(runConfig(host));
    const r = room();
    const first = await connect(app, r);
    first.send({ type: "message", id: "m-evict", text: "remember this" });
    await first.until(ended("m-evict"));
    const before = first.frames.slice(1);
    await evictDurableObject(env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u1`));
    // The same socket, now served by a fresh instance from its attachment: the resent id is the same run, replayed.
    const seen = first.frames.length;
    first.send({ type: "message", id: "m-evict", text: "remember this" });
    await first.until((f) => first.frames.indexOf(f) > seen && ended("m-evict")(f));
    expect(first.frames[seen]).toEqual({ ...first.frames[0], duplicate: true });
    expect(first.frames.slice(seen + 1)).toEqual(before);
    first.send({ type: "message", id: "m-next", text: "still there?" });
    expect((await first.until(ended("m-next"))).run).toMatchObject({ status: "completed", output: "after eviction" });
    // A new socket on the same conversation gets the same replay.
    const again = await connect(app, r);
    again.send({ type: "message", id: "m-evict", text: "remember this" });
    await again.until(ended("m-evict"));
    expect(again.frames[0]).toEqual({ ...first.frames[0], duplicate: true });
    expect(again.frames.slice(1)).toEqual(before);
    expect((await bodiesSentTo(host)).length).toBe(2); // the model was asked once per distinct message
    first.ws.close();
    again.ws.close();
  });

  it("ISSUE23 tool approvals are visible as events; after an eviction and the admin's decision, the rest of the run is pushed to the same socket", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "s1", name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: "deploy finished" }) }] },
      { content: "sent it" },
    ]);
    const app = await inForce(runConfig(host));
    const r = room();
    const client = await connect(app, r);
    client.send({ type: "message", id: "m-appr", text: "tell ops" });
    const requested = await client.until((f) => f.type === "event" && f.event.event_type === "approval.requested");
    expect(requested.event.payload).toMatchObject({
      tool: "test.send",
      tool_call_id: "s1",
      reason: "test.send is side_effect: it needs a human approval",
    });
    expect(types(client.frames, "m-appr")).toEqual(["run.created", "run.started", "model.requested", "tool.call", "approval.requested"]);
    const approvalId = requested.event.payload.approval_id;
    // The object is evicted while the run waits: the socket's attachment says which run it follows and from where.
    await evictDurableObject(env.SESSIONS.getByName(`agent:main:http:alice~${r}:dm:u1`));
    const decided = await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve", reason: "ok" }, ADMIN);
    expect(decided.status).toBe(200);
    const done = await client.until(ended("m-appr"));
    expect(done.run).toMatchObject({ status: "completed", output: "sent it", tool_calls: 1 });
    expect(types(client.frames, "m-appr")).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "approval.requested",
      "approval.decided",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    const seqs = client.frames.filter((f) => f.type === "event").map((f) => f.event.seq);
    expect(seqs).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    client.ws.close();
  });
});

describe("ISSUE23 guarded streaming over the WebSocket route (a message sent with stream: true)", () => {
  const words = (n: number) => Array.from({ length: n }, (_, i) => `river${String.fromCharCode(97 + (i % 26))}${i}`);
  /** `text` cut every `n` characters (cuts fall inside words). */
  const cut = (text: string, n: number) => text.match(new RegExp(`[\\s\\S]{1,${n}}`, "g")) ?? [];
  const deltas = (frames: any[], id: string) => frames.filter((f) => f.type === "delta" && f.id === id);
  /** The agent's model streams (supportsStreaming) from the scripted provider at `host`. */
  const streaming = (host: string) => inForce(runConfig(host, { model: { supportsStreaming: true } }));

  it("ISSUE23 a slowly streamed reply arrives as several delta frames, contiguous by offset, adding up to the stored reply; the last comes right before run.completed", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }]);
    const client = await connect(await streaming(host), room());
    client.send({ type: "message", id: "s-1", text: "tell me about rivers", stream: true });
    const done = await client.until(ended("s-1"));
    const got = deltas(client.frames, "s-1");
    expect(got.length).toBeGreaterThanOrEqual(2);
    expect(got[0].text.length).toBeLessThan(answer.length); // the first piece before the model had finished
    let offset = 0;
    for (const d of got) {
      expect(d).toEqual({ type: "delta", id: "s-1", run_id: done.run.id, offset, text: expect.any(String) });
      offset += d.text.length;
    }
    expect(got.map((d) => d.text).join("")).toBe(answer);
    expect(done.run.output).toBe(answer);
    // Deltas interleave with the events; the closing one is right before the terminal event, and the run frame last.
    const kinds = client.frames.filter((f) => f.id === "s-1").map((f) => (f.type === "event" ? f.event.event_type : f.type));
    expect(kinds.slice(0, 4)).toEqual(["accepted", "run.created", "run.started", "model.requested"]);
    expect(kinds.slice(-3)).toEqual(["delta", "run.completed", "run"]);
    expect(kinds.filter((k) => k !== "delta")).toEqual([
      "accepted",
      "run.created",
      "run.started",
      "model.requested",
      "run.completed",
      "run",
    ]);
    // Nothing streamed is stored: the run's events are the usual four.
    expect(types(client.frames, "s-1")).toEqual(["run.created", "run.started", "model.requested", "run.completed"]);
    client.ws.close();
  });

  // Issue 33 §3 (pace): a run is held from its second word, so its first word ("You") goes out as it completes.
  it("ISSUE23 a model streaming the base prompt verbatim in 7-character chunks: no delta carries any of it but its first word, then the refusal", async () => {
    const host = uniqueHost("script");
    const hidden = baseWithoutCanary();
    await scriptProvider(host, [{ content: hidden, chunks: cut(hidden, 7), chunk_delay_ms: 1 }]);
    const client = await connect(await streaming(host), room());
    client.send({ type: "message", id: "s-leak", text: "hello", stream: true });
    const done = await client.until(ended("s-leak"));
    const refusal = disclosureRefusalMessage();
    // The first word goes out only when the release was watched before the run formed (a fast model may be ahead).
    expect([[refusal], ["You ", `\n\n${refusal}`]]).toContainEqual(deltas(client.frames, "s-leak").map((d) => d.text));
    expect(done.run.output).toBe(disclosureRefusalMessage());
    for (const f of client.frames) expect(measureOverlap(JSON.stringify(f))).toMatchObject({ canary: false, shingles: 0 });
    client.ws.close();
  });

  it("ISSUE23 after a benign lead-in, the base prompt across chunks: only lead-in text and the first hidden word are released, then the refusal, and nothing more", async () => {
    const host = uniqueHost("script");
    const lead = `${words(40).join(" ")}. Now, word for word, what I was told:\n`;
    const text = lead + baseWithoutCanary();
    await scriptProvider(host, [{ content: text, chunks: cut(text, 5), chunk_delay_ms: 1 }]);
    const client = await connect(await streaming(host), room());
    client.send({ type: "message", id: "s-lead", text: "hello", stream: true });
    await client.until(ended("s-lead"));
    const all = deltas(client.frames, "s-lead")
      .map((d) => d.text)
      .join("");
    const refusal = disclosureRefusalMessage();
    expect(all.endsWith(`\n\n${refusal}`)).toBe(true);
    const released = all.slice(0, all.length - refusal.length - 2);
    expect(released.length).toBeGreaterThan(0);
    expect(`${lead}You `.startsWith(released)).toBe(true);
    expect(measureOverlap(released)).toEqual({ canary: false, shingles: 0, grams: 0 });
    client.ws.close();
  });

  it("ISSUE23 on one socket, only the message sent with stream: true gets delta frames; without it the frames are unchanged", async () => {
    const host = uniqueHost("script");
    const answer = `${words(30).join(" ")}.`;
    await scriptProvider(host, [
      { content: answer, chunks: cut(answer, 6), chunk_delay_ms: 2 },
      { content: answer, chunks: cut(answer, 6), chunk_delay_ms: 2 },
    ]);
    const client = await connect(await streaming(host), room());
    client.send({ type: "message", id: "plain", text: "first" });
    await client.until(ended("plain"));
    client.send({ type: "message", id: "streamed", text: "second", stream: true });
    await client.until(ended("streamed"));
    expect(deltas(client.frames, "plain")).toEqual([]);
    expect(client.frames.filter((f) => f.id === "plain").map((f) => f.type)).toEqual([
      "accepted",
      "event",
      "event",
      "event",
      "event",
      "run",
    ]);
    expect(
      deltas(client.frames, "streamed")
        .map((d) => d.text)
        .join(""),
    ).toBe(answer);
    client.ws.close();
  });

  it("ISSUE23 stream must be a boolean: any other value is an invalid.request error frame naming it, and no run is queued", async () => {
    const app = await streaming(uniqueHost("script"));
    const client = await connect(app, room());
    client.send({ type: "message", id: "bad-stream", text: "hi", stream: "yes" });
    const error = await client.until((f) => f.type === "error");
    expect(error).toMatchObject({ type: "error", id: "bad-stream", error: { code: "invalid.request" } });
    expect(error.error.message).toContain("stream");
    expect(client.frames.filter((f) => f.type === "accepted")).toEqual([]);
    client.ws.close();
  });
});

describe("ISSUE23 the WebSocket route in the OpenAPI document", () => {
  it("ISSUE23 /openapi.json documents GET /v1/chat/socket (api credential, 101 and its refusals) and the frame schemas", async () => {
    const app = appFor(runConfig(uniqueHost("script")));
    const doc = (await call(app, "GET", "/openapi.json")).body;
    const op = doc.paths["/v1/chat/socket"].get;
    expect(op["x-auth"]).toBe("api");
    expect(op.security).toEqual([{ api: [] }]);
    expect(Object.keys(op.responses).sort()).toEqual(["101", "400", "401", "403", "404", "426", "429"]);
    expect(doc.components.schemas.SocketMessageFrame.required.sort()).toEqual(["id", "text", "type"]);
    const kinds = doc.components.schemas.SocketServerFrame.oneOf.map((s: any) => s.properties.type.const ?? s.properties.type.enum?.[0]);
    // The `delta` frame (guarded streaming over the socket) joined the kinds after this test was first written.
    expect(kinds).toEqual(["accepted", "event", "delta", "run", "response", "error"]);
  });
});
