/**
 * The `Idempotency-Key` header on POST /v1/runs and POST /v1/chat/messages
 * (draft-ietf-httpapi-idempotency-key-header; DESIGN "Idempotency"): replay,
 * 409 in flight, 422 on a different body, per-caller scope, key syntax,
 * retention and expiry, what is not stored, and re-attempts after a crash
 * landing on the run the first attempt queued.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../src/config/schema";
import {
  IDEMPOTENT_REPLAYED_HEADER,
  idempotencyDispatchKey,
  idempotencyFingerprint,
  idempotencyKey,
  idempotencyScope,
} from "../../src/http/middleware/idempotency-key";
import type { AppEnv } from "../../src/http/router";
import { STALE_IN_FLIGHT_MS } from "../../src/idempotency/IdempotencyDO";
import { createLogger } from "../../src/observability/logger";
import { buildRunSpec } from "../../src/runs/spec";
import { formatSessionKey, httpChatSessionKey, parseSessionKey, sessionObjectName } from "../../src/sessions/keys";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, BOB, call, readResponse, registerTestTools, until, waitForRun } from "../support/runs";

registerTestTools();

const RUNS = "/v1/runs";
const CHAT = "/v1/chat/messages";

const newKey = () => `key-${crypto.randomUUID()}`;
const uniqueAgent = () => `idem-${crypto.randomUUID().slice(0, 8)}`;

/** A POST with an optional Idempotency-Key (and Prefer); `body` is sent as JSON text exactly as given when a string. */
async function post(app: App, path: string, body: unknown, o: { key?: string; token?: string; prefer?: string } = {}) {
  const headers: Record<string, string> = { Authorization: `Bearer ${o.token ?? ALICE}`, "Content-Type": "application/json" };
  if (o.key !== undefined) headers["Idempotency-Key"] = o.key;
  if (o.prefer !== undefined) headers.Prefer = o.prefer;
  const res = await app.request(
    `https://gateway.test${path}`,
    { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) },
    env,
  );
  return readResponse(res);
}

/** A scripted provider and an app whose only agent has a name of its own (so the D1 run index counts this test's runs). */
async function setup(replies: { content: string; delay_ms?: number }[] = [{ content: "Done." }], retentionSeconds?: number) {
  const host = uniqueHost("script");
  await scriptProvider(host, replies);
  const agent = uniqueAgent();
  let config = runConfig(host, { agentId: agent });
  if (retentionSeconds !== undefined) config = { ...config, http: { ...config.http, idempotency: { retentionSeconds } } };
  return { host, agent, config, app: appFor(config) };
}

/** The runs of `agent` in the D1 run index. */
async function indexedRuns(app: App, agent: string): Promise<any[]> {
  const res = await call(app, "GET", `/api/admin/runs?agent_id=${agent}`, undefined, ADMIN);
  expect(res.status).toBe(200);
  return res.body.runs;
}

/** Waits for the run to finish and to be indexed, then returns every indexed run of the agent. */
async function settledRuns(app: App, agent: string, runId: string, token = ALICE): Promise<any[]> {
  await waitForRun(app, runId, token);
  await until(async () => (await indexedRuns(app, agent)).some((r) => r.run_id === runId && r.status === "completed"));
  return indexedRuns(app, agent);
}

const idempotencyStub = (callerId: string) => env.IDEMPOTENCY.getByName(`api:${callerId}`);

/** The caller's stored rows for `key`. */
async function storedRows(callerId: string, key: string) {
  return runInDurableObject(idempotencyStub(callerId), (_i, state: DurableObjectState) =>
    state.storage.sql
      .exec<{ scope: string; status: string; created_at: number; completed_at: number | null; expires_at: number | null }>(
        "SELECT scope, status, created_at, completed_at, expires_at FROM idempotency WHERE key = ?",
        key,
      )
      .toArray(),
  );
}

/** Makes the caller's stored answers for `key` look expired. */
async function expire(callerId: string, key: string): Promise<void> {
  await runInDurableObject(idempotencyStub(callerId), (_i, state: DurableObjectState) => {
    state.storage.sql.exec("UPDATE idempotency SET expires_at = ? WHERE key = ? AND status = 'done'", Date.now() - 1, key);
  });
}

describe("Idempotency-Key on POST /v1/runs", () => {
  it("Idempotency-Key: a repeat with the same key and body replays the stored response (same status and body, Idempotent-Replayed: true, one run)", async () => {
    const { app, agent, host } = await setup();
    const key = newKey();
    const body = { agent_id: agent, message: "Summarize repository status" };
    const first = await post(app, RUNS, body, { key });
    expect(first.status).toBe(202);
    expect(first.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    const again = await post(app, RUNS, body, { key });
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(again.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    expect(again.headers.get("Content-Type")).toBe(first.headers.get("Content-Type"));
    expect(again.headers.get("X-Request-Id")).toMatch(/^req_/);
    const runs = await settledRuns(app, agent, first.body.id);
    expect(runs.map((r) => r.run_id)).toEqual([first.body.id]);
    expect(await bodiesSentTo(host)).toHaveLength(1);
    // Still replayed once the run has finished: the stored answer, not the run's state now.
    const later = await post(app, RUNS, body, { key });
    expect(later.text).toBe(first.text);
    expect(later.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
  });

  it("Idempotency-Key: a repeat while the first request is still in flight is 409 conflict; once done it replays", async () => {
    const { app, agent } = await setup([{ content: "Slow answer.", delay_ms: 1500 }]);
    const key = newKey();
    const body = { agent_id: agent, message: "take your time" };
    const firstP = post(app, RUNS, body, { key, prefer: "wait=10" });
    await until(async () => (await storedRows("alice", key)).some((r) => r.status === "in_flight"));
    const duplicate = await post(app, RUNS, body, { key, prefer: "wait=10" });
    expect(duplicate.status).toBe(409);
    expect(duplicate.body.error.code).toBe("conflict");
    expect(duplicate.body.error.message).toMatch(/Idempotency-Key/);
    const first = await firstP;
    expect(first.status).toBe(200);
    expect(first.body.output).toBe("Slow answer.");
    expect(first.headers.get("Preference-Applied")).toBe("wait=10");
    const replayed = await post(app, RUNS, body, { key });
    expect(replayed.status).toBe(200);
    expect(replayed.text).toBe(first.text);
    expect(replayed.headers.get("Preference-Applied")).toBe("wait=10");
    expect(replayed.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    expect((await settledRuns(app, agent, first.body.id)).map((r) => r.run_id)).toEqual([first.body.id]);
  });

  it("Idempotency-Key: the same key with a different body is 422 idempotency.mismatch", async () => {
    const { app, agent } = await setup();
    const key = newKey();
    const first = await post(app, RUNS, { agent_id: agent, message: "one" }, { key });
    expect(first.status).toBe(202);
    const other = await post(app, RUNS, { agent_id: agent, message: "two" }, { key });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe("idempotency.mismatch");
    // The same JSON written differently is a different body: the request is identified by its raw text.
    const spaced = await post(app, RUNS, `{"agent_id": "${agent}", "message": "one"}`, { key });
    expect(spaced.status).toBe(422);
    expect((await settledRuns(app, agent, first.body.id)).map((r) => r.run_id)).toEqual([first.body.id]);
  });

  it("Idempotency-Key: keys are scoped per caller (alice and bob may use the same key independently)", async () => {
    const { app, agent } = await setup([{ content: "for alice" }, { content: "for bob" }]);
    const key = newKey();
    const body = { agent_id: agent, message: "same words" };
    const alice = await post(app, RUNS, body, { key, token: ALICE });
    const bob = await post(app, RUNS, body, { key, token: BOB });
    expect(alice.status).toBe(202);
    expect(bob.status).toBe(202);
    expect(bob.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    expect(bob.body.id).not.toBe(alice.body.id);
    // Each caller's repeat replays their own answer; a different body under bob's key is bob's mismatch only.
    expect((await post(app, RUNS, body, { key, token: ALICE })).body.id).toBe(alice.body.id);
    expect((await post(app, RUNS, body, { key, token: BOB })).body.id).toBe(bob.body.id);
    expect((await post(app, RUNS, { ...body, message: "other" }, { key, token: BOB })).status).toBe(422);
    await waitForRun(app, alice.body.id, ALICE);
    const runs = await settledRuns(app, agent, bob.body.id, BOB);
    expect(runs.map((r) => r.caller_id).sort()).toEqual(["alice", "bob"]);
  });

  it("Idempotency-Key: a key that is not 1-255 visible ASCII characters is 400 invalid.request naming the header", async () => {
    const { app, agent } = await setup([{ content: "1" }, { content: "2" }, { content: "3" }]);
    const body = { agent_id: agent, message: "hello" };
    for (const bad of ["", "a".repeat(256), "has space", "tab\there", "del\x7f", '"unterminated', '""', '"has space"']) {
      const res = await post(app, RUNS, body, { key: bad });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error.code).toBe("invalid.request");
      expect(res.body.error.message).toMatch(/^Idempotency-Key /);
    }
    expect(await indexedRuns(app, agent)).toEqual([]);
    // The longest key, and the draft's quoted form (a structured-field string) naming the same key as the bare form.
    const longest = newKey().padEnd(255, "k");
    expect((await post(app, RUNS, body, { key: longest })).status).toBe(202);
    const bare = newKey();
    const first = await post(app, RUNS, body, { key: `"${bare}"` });
    expect(first.status).toBe(202);
    const again = await post(app, RUNS, body, { key: bare });
    expect(again.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    expect(again.body.id).toBe(first.body.id);
    const withQuote = `a"b-${crypto.randomUUID()}`;
    const escaped = await post(app, RUNS, body, { key: `"${withQuote.replace('"', '\\"')}"` });
    expect(escaped.status).toBe(202);
    expect((await post(app, RUNS, body, { key: withQuote })).body.id).toBe(escaped.body.id);
  });

  it("Idempotency-Key: without the header nothing changes (each request queues its own run)", async () => {
    const { app, agent } = await setup([{ content: "a" }, { content: "b" }]);
    const body = { agent_id: agent, message: "no key" };
    const one = await post(app, RUNS, body);
    const two = await post(app, RUNS, body);
    expect(one.status).toBe(202);
    expect(two.status).toBe(202);
    expect(two.body.id).not.toBe(one.body.id);
    expect(two.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    await waitForRun(app, one.body.id);
    expect(await settledRuns(app, agent, two.body.id)).toHaveLength(2);
  });

  it("Idempotency-Key: answers are kept http.idempotency.retentionSeconds; an expired key may be reused (new run, any body)", async () => {
    const { app, agent } = await setup([{ content: "1" }, { content: "2" }, { content: "3" }], 60);
    const key = newKey();
    const body = { agent_id: agent, message: "retention" };
    const first = await post(app, RUNS, body, { key });
    expect(first.status).toBe(202);
    const [row] = await storedRows("alice", key);
    expect(row?.status).toBe("done");
    expect((row?.expires_at ?? 0) - (row?.completed_at ?? 0)).toBe(60_000);
    expect(row?.scope).toBe("http:POST /v1/runs");

    await expire("alice", key);
    const reused = await post(app, RUNS, body, { key });
    expect(reused.status).toBe(202);
    expect(reused.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    expect(reused.body.id).not.toBe(first.body.id);

    await expire("alice", key);
    const otherBody = await post(app, RUNS, { ...body, message: "something else" }, { key });
    expect(otherBody.status).toBe(202);
    expect(otherBody.body.id).not.toBe(reused.body.id);

    await waitForRun(app, first.body.id);
    await waitForRun(app, reused.body.id);
    expect(await settledRuns(app, agent, otherBody.body.id)).toHaveLength(3);
  });

  it("Idempotency-Key: the IdempotencyDO's alarm removes expired answers and is set to the next expiry", async () => {
    const { app, agent } = await setup([{ content: "1" }, { content: "2" }], 60);
    const expiring = newKey();
    const kept = newKey();
    const before = Date.now();
    await post(app, RUNS, { agent_id: agent, message: "expiring" }, { key: expiring });
    await post(app, RUNS, { agent_id: agent, message: "kept" }, { key: kept });
    const alarm = await runInDurableObject(idempotencyStub("alice"), (_i, state: DurableObjectState) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(before + 60_000 + 5_000);
    await expire("alice", expiring);
    expect(await runDurableObjectAlarm(idempotencyStub("alice"))).toBe(true);
    expect(await storedRows("alice", expiring)).toEqual([]);
    expect(await storedRows("alice", kept)).toHaveLength(1);
    const next = await runInDurableObject(idempotencyStub("alice"), (_i, state: DurableObjectState) => state.storage.getAlarm());
    expect(next).not.toBeNull();
  });

  it("Idempotency-Key: a 4xx answer is stored and replayed", async () => {
    const { app } = await setup();
    const key = newKey();
    const body = { agent_id: "no-such-agent", message: "hello" };
    const first = await post(app, RUNS, body, { key });
    expect(first.status).toBe(404);
    const again = await post(app, RUNS, body, { key });
    expect(again.status).toBe(404);
    expect(again.text).toBe(first.text);
    expect(again.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
  });
});

describe("Idempotency-Key: what is not stored", () => {
  /** A route under the middleware whose answers the test chooses, for caller carol. */
  function flakyApp(config: GatewayConfig, answers: (() => Response | Promise<Response>)[]) {
    const app = new Hono<AppEnv>();
    const seen: (string | undefined)[] = [];
    app.use(async (c, next) => {
      c.set("config", config);
      c.set("logger", createLogger("error"));
      c.set("principal", { scope: "api", callerId: "carol" });
      await next();
    });
    app.post("/v1/flaky", idempotencyKey(), async (c) => {
      seen.push(c.get("idempotency")?.attempt);
      const answer = answers.shift();
      if (!answer) throw new Error("no more answers");
      return answer();
    });
    app.onError((err, c) => c.json({ error: { code: "internal.error", message: err.message } }, 500));
    const send = (key: string, body = '{"x":1}') =>
      app.request("https://gateway.test/v1/flaky", { method: "POST", headers: { "Idempotency-Key": key }, body }, env);
    return { send, seen };
  }

  it("Idempotency-Key: a 5xx answer or a thrown error is not stored; the key is released so the client can retry", async () => {
    const { config } = await setup();
    const { send, seen } = flakyApp(config, [
      () => Response.json({ error: "unavailable" }, { status: 503 }),
      () => {
        throw new Error("boom");
      },
      () => Response.json({ error: "slow down" }, { status: 429, headers: { "Retry-After": "1" } }),
      () => Response.json({ ok: true }, { status: 201 }),
    ]);
    const key = newKey();
    expect((await send(key)).status).toBe(503);
    expect(await storedRows("carol", key)).toEqual([]);
    expect((await send(key)).status).toBe(500);
    expect(await storedRows("carol", key)).toEqual([]);
    expect((await send(key)).status).toBe(429);
    expect(await storedRows("carol", key)).toEqual([]);
    const ok = await send(key);
    expect(ok.status).toBe(201);
    expect(ok.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    const replayed = await send(key);
    expect(replayed.status).toBe(201);
    expect(await replayed.json()).toEqual({ ok: true });
    expect(replayed.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    // Every retry of the released key ran under the first attempt's token (so it would reach the same run).
    expect(seen).toHaveLength(4);
    expect(new Set(seen).size).toBe(1);
  });
});

describe("Idempotency-Key on POST /v1/chat/messages", () => {
  const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;

  async function chatRuns(agent: string, roomId: string, userId: string): Promise<number> {
    const key = httpChatSessionKey(agent, "alice", roomId, userId); // the requests below are alice's
    if (!key.ok) throw new Error(key.error);
    return runInDurableObject(env.SESSIONS.getByName(sessionObjectName(key.key)), (_i, state: DurableObjectState) =>
      Number(state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM runs").one().n),
    );
  }

  it("Idempotency-Key: on chat messages a repeat replays, a repeat in flight is 409 and a different body is 422", async () => {
    const { app, agent } = await setup([{ content: "hi" }, { content: "second" }]);
    const key = newKey();
    const r = room();
    const body = { user_id: "u1", room_id: r, agent_id: agent, message: "hello there" };
    const first = await post(app, CHAT, body, { key });
    expect(first.status).toBe(202);
    const again = await post(app, CHAT, body, { key });
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(again.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    expect(await chatRuns(agent, r, "u1")).toBe(1);
    const other = await post(app, CHAT, { ...body, message: "something else" }, { key });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe("idempotency.mismatch");

    // In flight: recorded directly, as a request that has just begun would leave it.
    const busy = newKey();
    const text = JSON.stringify(body);
    const begun = await idempotencyStub("alice").begin(
      idempotencyScope("POST", CHAT),
      busy,
      await idempotencyFingerprint("POST", CHAT, text),
      Date.now(),
      86_400_000,
    );
    expect(begun.kind).toBe("new");
    const conflict = await post(app, CHAT, text, { key: busy });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe("conflict");

    // Keys are per route: the chat key on POST /v1/runs is a key of its own.
    const run = await post(app, RUNS, { agent_id: agent, message: "hello there" }, { key });
    expect(run.status).toBe(202);
    expect(run.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    expect(await chatRuns(agent, r, "u1")).toBe(1);
  });
});

describe("Idempotency-Key: re-attempts after a crash land on the same run", () => {
  /** What a Worker that died after queueing the run (before `complete`) left behind: the key in flight, begun at `at`, and the run. */
  async function crashedAttempt(config: GatewayConfig, agent: string, key: string, text: string, at: number) {
    const begun = await idempotencyStub("alice").begin(
      idempotencyScope("POST", RUNS),
      key,
      await idempotencyFingerprint("POST", RUNS, text),
      at,
      86_400_000,
    );
    if (begun.kind !== "new") throw new Error(`begin answered ${begun.kind}`);
    const sessionKey = parseSessionKey(`agent:${agent}:http:alice:run:${begun.attempt}`);
    if (!sessionKey.ok) throw new Error(sessionKey.error);
    const agentConfig = config.agents[agent] as GatewayConfig["agents"][string];
    const queued = await env.SESSIONS.getByName(sessionObjectName(sessionKey.key)).enqueueMessage(
      { sessionKey: formatSessionKey(sessionKey.key), agentId: agent },
      {
        message: JSON.parse(text).message,
        source: "http",
        limits: agentConfig.session,
        spec: buildRunSpec(config, agent, "http"),
        callerId: "alice",
        dispatchKey: idempotencyDispatchKey("alice", begun.attempt, key),
      },
    );
    return queued.runId;
  }

  it("Idempotency-Key: an in-flight key older than a minute is taken over, and the re-attempt returns the run the first attempt queued", async () => {
    const { app, agent, config } = await setup();
    const key = newKey();
    const text = JSON.stringify({ agent_id: agent, message: "survive a crash" });
    const runId = await crashedAttempt(config, agent, key, text, Date.now() - STALE_IN_FLIGHT_MS - 1_000);
    const retry = await post(app, RUNS, text, { key });
    expect(retry.status).toBe(202);
    expect(retry.body).toEqual({ id: runId, status: "queued" });
    expect(retry.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBeNull();
    const replay = await post(app, RUNS, text, { key });
    expect(replay.body.id).toBe(runId);
    expect(replay.headers.get(IDEMPOTENT_REPLAYED_HEADER)).toBe("true");
    expect((await settledRuns(app, agent, runId)).map((r) => r.run_id)).toEqual([runId]);
  });

  it("Idempotency-Key: a key released after a failure keeps its attempt, so the retry returns the run already queued", async () => {
    const { app, agent, config } = await setup();
    const key = newKey();
    const text = JSON.stringify({ agent_id: agent, message: "queued, then the answer failed" });
    const runId = await crashedAttempt(config, agent, key, text, Date.now());
    // A fresh in-flight entry is someone else's request under way.
    expect((await post(app, RUNS, text, { key })).status).toBe(409);
    // The failed attempt releases the key (as after a 5xx): the retry runs again, under the same attempt.
    await idempotencyStub("alice").abandon(idempotencyScope("POST", RUNS), key);
    expect(await storedRows("alice", key)).toEqual([]);
    const retry = await post(app, RUNS, text, { key });
    expect(retry.status).toBe(202);
    expect(retry.body.id).toBe(runId);
    expect((await settledRuns(app, agent, runId)).map((r) => r.run_id)).toEqual([runId]);
  });
});
