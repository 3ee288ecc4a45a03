/**
 * Issue 33 "also found in the same round" (D-086): an API key record's limits and revocation hold on what stays
 * open, not only on each HTTP request.
 *  - Limits: every message frame of a key's WebSocket counts against the key's `requestsPerMinute` (the upgrade was
 *    the only request counted) and is held to the key's `tokensPerDay` in force (one set after the upgrade too).
 *  - Revocation: a revoked, rotated or expired key's open socket, `GET /v1/runs/{id}/events` and streamed
 *    `/v1/chat/completions` stop delivering at the next piece once the keys generation has propagated, and close
 *    with an error in their own shape; an idle one is checked every `keyChecks.idleMs` (the propagation bound, 5 s:
 *    an idle socket by its session object's upkeep alarm), so it closes within that without delivering anything.
 * Nothing here waits on the wall clock: the model's stream is held at a gate the test opens (test/support/outbound.ts),
 * propagation is forced the way the isolate's own probe would see it (`forgetAdminGenerations`), and the per-minute
 * counts run on a pinned clock (`keyClock`).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { STREAM_LEASE_TTL_MS } from "../../src/idempotency/stream-leases";
import { mintSecret } from "../../src/keys/format";
import { keyClock } from "../../src/keys/limits";
import { KEY_PROPAGATION_MS } from "../../src/keys/lookup";
import { keyChecks } from "../../src/keys/standing";
import { revokeKey, rotateKey } from "../../src/keys/store";
import { StreamGuard } from "../../src/prompts/stream-guard";
import { httpChatSessionKey, sessionObjectName } from "../../src/sessions/keys";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { openGate, requestsTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, type App, call, registerTestTools, runDetail, until } from "../support/runs";
import { type Client, connect, inForce } from "../support/socket";

beforeAll(() => registerTestTools());

const realClock = keyClock.now;
afterEach(() => {
  keyClock.now = realClock;
  keyChecks.idleMs = KEY_PROPAGATION_MS;
  vi.useRealTimers();
});

const label = () => crypto.randomUUID().slice(0, 8);
const room = () => `room-${label()}`;
const words = (n: number) => Array.from({ length: n }, (_, i) => `river${String.fromCharCode(97 + (i % 26))}${i}`);
/** `text` cut every `n` characters (cuts fall inside words). */
const cut = (text: string, n: number) => text.match(new RegExp(`[\\s\\S]{1,${n}}`, "g")) ?? [];

/** What the incremental output guard has released once these chunks of a benign answer are in. */
function releasedBy(chunks: string[]): string {
  const guard = new StreamGuard((raw) => raw);
  let released = "";
  for (const chunk of chunks) {
    const step = guard.push(chunk);
    if (step && "release" in step) released += step.release;
  }
  return released;
}

/**
 * A 60-word answer streamed in 6-character chunks, held before its first chunk until the test calls `start` (the
 * host's gate) and before chunk 60 until it calls `middle` (its second gate); `before` is what the output guard has
 * released by then, when the reader watched from the first chunk on (the guard's pieces depend on where reading began).
 */
async function gatedAnswer(host: string) {
  const answer = `${words(60).join(" ")}.`;
  const chunks = cut(answer, 6);
  await scriptProvider(host, [{ content: answer, chunks, gate: true, hold_at: 60 }]);
  const before = releasedBy(chunks.slice(0, 60));
  expect(before.length).toBeGreaterThan(0);
  return { answer, before, start: () => openGate(host), middle: () => openGate(host, "hold") };
}

/** A key record of a caller of its own (no other test's streams share its cap), through the admin API. */
async function createKey(app: App, body: Record<string, unknown> = {}) {
  const callerId = `c-${label()}`;
  const res = await call(app, "POST", "/api/admin/keys", { caller_id: callerId, label: `k-${label()}`, agents: "all", ...body }, ADMIN);
  if (res.status !== 201) throw new Error(`POST /api/admin/keys answered ${res.status}: ${res.text}`);
  return { key: res.body.key as string, keyId: res.body.key_id as string, callerId };
}

/** The key is revoked or rotated elsewhere; this isolate's keys-generation probe (every ADMIN_REFRESH_MS) is forced to run. */
function propagate(): void {
  forgetAdminGenerations();
}

const ended = (frames: any[], id: string) => frames.find((f) => f.type === "run" && f.id === id);
const deltaText = (frames: any[]) =>
  frames
    .filter((f) => f.type === "delta")
    .map((f) => f.text)
    .join("");

/** An SSE response read as it arrives: each message's event name and data. */
function readSse(res: Response): { messages: { event: string; data: string }[]; done: Promise<void> } {
  const messages: { event: string; data: string }[] = [];
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const done = (async () => {
    let buffer = "";
    for (;;) {
      const { done: end, value } = await reader.read();
      if (end) return;
      buffer += decoder.decode(value, { stream: true });
      for (let at = buffer.indexOf("\n\n"); at >= 0; at = buffer.indexOf("\n\n")) {
        const block = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (data !== undefined) messages.push({ event: /^event: (.*)$/m.exec(block)?.[1] ?? "message", data });
      }
    }
  })();
  return { messages, done };
}

/**
 * `done`, or a failure once `ms` pass: an idle check ends the stream within `keyChecks.idleMs` (50 ms here), while
 * without it the stream would end only at its heartbeat or long poll, 15 to 25 s on — so the bound has a wide margin.
 */
async function within(done: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms / 1000} s`)), ms);
  });
  try {
    await Promise.race([done, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A key's socket in a room of its own, and the session object that holds it (whose alarm the tests run). */
async function keySocket(app: App, key: string, callerId: string) {
  const roomId = room();
  const client = await connect(app, roomId, key);
  const session = httpChatSessionKey("main", callerId, roomId, "u1");
  if (!session.ok) throw new Error(session.error);
  return { client, stub: env.SESSIONS.getByName(sessionObjectName(session.key)) };
}

/** The one frame a socket gets when its key no longer stands, before it is closed (1008). */
const SOCKET_KEY_GONE = {
  type: "error",
  error: { code: "auth.unauthorized", message: "the API key this socket was opened with was revoked, rotated or has expired" },
};

/** Closes the client's socket and waits until its object has seen it close and given the slot back. */
async function closeAndWait(client: Client, callerId: string): Promise<void> {
  client.ws.close();
  await until(() => slotsFree(callerId));
}

/** The caller's open-stream slots in use, as its Durable Object counts them now (a probe lease of cap 1 fits only at 0). */
async function slotsFree(callerId: string): Promise<boolean> {
  const stub = env.IDEMPOTENCY.getByName(`api:${callerId}`);
  const probe = `probe-${label()}`;
  const r = await stub.acquireStream(probe, Date.now(), 1, STREAM_LEASE_TTL_MS);
  await stub.releaseStream(probe);
  return r.ok;
}

describe("ISSUE33 limits: a key's socket frames are its requests", () => {
  it("ISSUE33 limits: every socket frame that starts a turn counts against requestsPerMinute — at 3 a minute the upgrade and 2 turns pass, 18 of 20 frames get rate.limited error frames (retry in 45 s) and start no turn; the next minute admits again", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "one" }, { content: "two" }, { content: "three" }]);
    const app = await inForce(runConfig(host));
    const { key, keyId, callerId } = await createKey(app, { limits: { requestsPerMinute: 3 } });
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    keyClock.now = () => minute + 15_000; // 15 s into the minute: 45 s left
    const client = await connect(app, room(), key); // the upgrade is request 1 of 3
    for (let i = 0; i < 20; i++) client.send({ type: "message", id: `m-${i}`, text: `turn ${i}` });
    const answered = () => client.frames.filter((f) => f.type === "accepted" || f.type === "error");
    await until(async () => answered().length === 20);
    const accepted = client.frames.filter((f) => f.type === "accepted");
    const refused = client.frames.filter((f) => f.type === "error");
    expect(accepted).toHaveLength(2);
    expect(refused).toHaveLength(18);
    expect(new Set(answered().map((f) => f.id)).size).toBe(20);
    for (const f of refused)
      expect(f).toEqual({
        type: "error",
        id: f.id,
        error: {
          code: "rate.limited",
          message: `key ${keyId} is limited to 3 requests per minute; retry in 45 s`,
          retry_after_seconds: 45,
        },
      });
    await until(async () => accepted.every((a) => ended(client.frames, a.id)));
    expect(await requestsTo(host)).toHaveLength(2);
    // A frame refused started no turn: no run, no event carries its id.
    for (const f of refused) expect(client.frames.filter((x) => x.id === f.id)).toEqual([f]);
    // The next clock minute counts afresh.
    keyClock.now = () => minute + 75_000;
    client.send({ type: "message", id: "m-20", text: "next minute" });
    await until(async () => ended(client.frames, "m-20") !== undefined);
    expect(ended(client.frames, "m-20").run).toMatchObject({ status: "completed", output: "three" });
    expect(await requestsTo(host)).toHaveLength(3);
    await closeAndWait(client, callerId);
  }, 30_000);

  it("ISSUE33 limits: a socket frame is held to the key's tokensPerDay in force, a budget set after the upgrade included: once spent, an over_budget error frame with its retry hint and no turn", async () => {
    const host = uniqueHost("script");
    // The turn reserves its worst case (~5.6k) and spends 6000: the budget of 6000 is then spent.
    const spent = { prompt_tokens: 5000, completion_tokens: 1000, total_tokens: 6000 };
    await scriptProvider(host, [{ content: "spent", usage: spent }, { content: "never" }]);
    const app = await inForce(runConfig(host));
    const { key, keyId, callerId } = await createKey(app);
    const client = await connect(app, room(), key);
    // The budget comes after the upgrade (PATCH bumps the keys generation; in force on this isolate at once).
    expect((await call(app, "PATCH", `/api/admin/keys/${keyId}`, { limits: { tokensPerDay: 6_000 } }, ADMIN)).status).toBe(200);
    client.send({ type: "message", id: "m-1", text: "spend it" });
    await until(async () => ended(client.frames, "m-1") !== undefined);
    expect(ended(client.frames, "m-1").run).toMatchObject({ status: "completed", output: "spent" });
    const day = new Date().toISOString().slice(0, 10);
    const used = await env.DB.prepare("SELECT tokens FROM api_key_token_usage WHERE key_id = ?1 AND day = ?2")
      .bind(keyId, day)
      .first<{ tokens: number }>();
    expect(used?.tokens).toBe(6_000);
    client.send({ type: "message", id: "m-2", text: "more" });
    await until(async () => client.frames.some((f) => f.id === "m-2"));
    const [refusal] = client.frames.filter((f) => f.id === "m-2");
    const retry = refusal.error.retry_after_seconds as number;
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(86_400);
    expect(client.frames.filter((f) => f.id === "m-2")).toEqual([
      {
        type: "error",
        id: "m-2",
        error: {
          code: "over_budget",
          message: `key ${keyId} has used 6000 of its 6000 tokens for ${day} (UTC)`,
          retry_after_seconds: retry,
        },
      },
    ]);
    expect(await requestsTo(host)).toHaveLength(1);
    await closeAndWait(client, callerId);
  }, 30_000);
});

describe("ISSUE33 revocation: a key's open streams stop and close within the propagation bound", () => {
  const streaming = (host: string) => inForce(runConfig(host, { model: { supportsStreaming: true } }));

  it("ISSUE33 revocation: a revoked key's socket is sent no further delta or event of the run under way — one auth.unauthorized error frame, then the socket is closed (1008) and its slot is free; the run itself completes", async () => {
    const host = uniqueHost("script");
    const { answer, before, start, middle } = await gatedAnswer(host);
    const app = await streaming(host);
    const { key, keyId, callerId } = await createKey(app);
    const client = await connect(app, room(), key);
    client.send({ type: "message", id: "s-1", text: "rivers", stream: true });
    // The socket watches the run's release from its `accepted` frame on: the model may start streaming.
    await until(async () => client.frames.some((f) => f.type === "accepted"));
    await start();
    await until(async () => deltaText(client.frames) === before);
    const runId = client.frames.find((f) => f.type === "accepted").run_id as string;
    const seen = client.frames.length;
    await revokeKey(env.DB, keyId, new Date());
    propagate();
    await middle();
    const closed = await client.closed;
    expect(closed.code).toBe(1008);
    expect(client.frames.slice(seen)).toEqual([
      {
        type: "error",
        error: { code: "auth.unauthorized", message: "the API key this socket was opened with was revoked, rotated or has expired" },
      },
    ]);
    expect(deltaText(client.frames)).toBe(before);
    await until(async () => (await runDetail(app, runId)).run.status === "completed");
    expect((await runDetail(app, runId)).run.output).toBe(answer);
    await until(() => slotsFree(callerId));
  }, 30_000);

  it("ISSUE33 revocation: GET /v1/runs/{id}/events?deltas=true of a rotated key is sent no delta or event once the rotation has propagated — one error event in the S3 envelope, and the stream ends; the run itself completes", async () => {
    const host = uniqueHost("script");
    const { answer, start, middle } = await gatedAnswer(host);
    const app = await streaming(host);
    const { key, keyId, callerId } = await createKey(app);
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "rivers" }, key);
    expect(queued.status).toBe(202);
    const runId = queued.body.id as string;
    const res = await app.request(
      `https://gateway.test/v1/runs/${runId}/events?deltas=true`,
      { headers: { Authorization: `Bearer ${key}` } },
      env,
    );
    expect(res.status).toBe(200);
    const sse = readSse(res);
    // The model has written nothing yet (held at its first chunk): whatever it writes now comes after the rotation.
    await rotateKey(env.DB, keyId, (await mintSecret(keyId)).stored, new Date());
    propagate();
    await start();
    await middle();
    await sse.done;
    expect(sse.messages).toEqual([
      {
        event: "error",
        data: JSON.stringify({
          error: { code: "auth.unauthorized", message: "the API key this stream was opened with was revoked, rotated or has expired" },
        }),
      },
    ]);
    await until(async () => (await runDetail(app, runId)).run.status === "completed");
    expect((await runDetail(app, runId)).run.output).toBe(answer);
    await until(() => slotsFree(callerId));
  }, 30_000);

  it("ISSUE33 revocation: a streamed /v1/chat/completions of a revoked key is sent no chunk once the revocation has propagated — OpenAI's error object, and no [DONE]", async () => {
    const host = uniqueHost("script");
    const { start, middle } = await gatedAnswer(host);
    const app = await streaming(host);
    const { key, keyId, callerId } = await createKey(app);
    const res = await app.request(
      "https://gateway.test/v1/chat/completions",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "rivers" }], stream: true }),
      },
      env,
    );
    expect(res.status).toBe(200);
    const sse = readSse(res);
    await until(async () => sse.messages.length === 1); // the role chunk: the stream is open, the model held at its first chunk
    expect(JSON.parse(sse.messages[0]?.data ?? "").choices[0].delta).toEqual({ role: "assistant", content: "" });
    await revokeKey(env.DB, keyId, new Date());
    propagate();
    await start();
    await middle();
    await sse.done;
    expect(sse.messages.slice(1)).toEqual([
      {
        event: "message",
        data: JSON.stringify({
          error: {
            message: "the API key this stream was opened with was revoked, rotated or has expired",
            type: "authentication_error",
            code: "auth.unauthorized",
          },
        }),
      },
    ]);
    await until(() => slotsFree(callerId));
  }, 30_000);

  it("ISSUE33 revocation: an idle socket of an expired key is closed by its session object's upkeep alarm (auth.unauthorized error frame, 1008)", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const app = await inForce(runConfig(uniqueHost("script")));
    const { key, callerId } = await createKey(app, { expires_at: new Date(t0 + 60_000).toISOString() });
    const { client, stub } = await keySocket(app, key, callerId);
    vi.setSystemTime(t0 + 60_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await client.closed).code).toBe(1008);
    expect(client.frames).toEqual([SOCKET_KEY_GONE]);
    await until(() => slotsFree(callerId));
  });

  it("ISSUE33 revocation: an idle socket of a revoked key is checked by its object's upkeep alarm within the propagation bound (due at most 5 s after it opened), which closes it (auth.unauthorized error frame, 1008)", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const app = await inForce(runConfig(uniqueHost("script")));
    const { key, keyId, callerId } = await createKey(app);
    const { client, stub } = await keySocket(app, key, callerId);
    const alarm = await runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    expect(KEY_PROPAGATION_MS).toBe(5_000);
    expect(alarm).not.toBeNull();
    expect((alarm as number) - t0).toBeLessThanOrEqual(KEY_PROPAGATION_MS);
    await revokeKey(env.DB, keyId, new Date(t0));
    propagate();
    vi.setSystemTime(alarm as number);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await client.closed).code).toBe(1008);
    expect(client.frames).toEqual([SOCKET_KEY_GONE]);
    await until(() => slotsFree(callerId));
  });

  it("ISSUE33 revocation: an idle socket of a key that still stands is checked again every 5 s (the upkeep records the check and is due again 5 s on), and stays open", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const app = await inForce(runConfig(uniqueHost("script")));
    const { key, callerId } = await createKey(app);
    const { client, stub } = await keySocket(app, key, callerId);
    const first = (await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())) as number;
    vi.setSystemTime(first);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const next = (await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())) as number;
    expect(next - first).toBe(KEY_PROPAGATION_MS);
    expect(first - t0).toBeLessThanOrEqual(KEY_PROPAGATION_MS);
    expect(client.frames).toEqual([]);
    await closeAndWait(client, callerId);
  });

  it("ISSUE33 revocation: an idle GET /v1/runs/{id}/events?follow=true of a revoked key (the model has sent nothing) ends at its next idle check — one error event after the events it had, nothing else", async () => {
    keyChecks.idleMs = 50; // the bound is 5 s; shortened so the test does not wait for it
    const host = uniqueHost("script");
    const { start, middle } = await gatedAnswer(host);
    const app = await streaming(host);
    const { key, keyId, callerId } = await createKey(app);
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "rivers" }, key);
    const runId = queued.body.id as string;
    const res = await app.request(
      `https://gateway.test/v1/runs/${runId}/events?follow=true`,
      { headers: { Authorization: `Bearer ${key}` } },
      env,
    );
    expect(res.status).toBe(200);
    const sse = readSse(res);
    await until(async () => sse.messages.some((m) => m.event === "model.requested"));
    const seen = sse.messages.length;
    await revokeKey(env.DB, keyId, new Date());
    propagate();
    await within(sse.done, 10_000, "the idle events stream's end"); // nothing is delivered meanwhile: only an idle check ends it
    expect(sse.messages.slice(seen)).toEqual([
      {
        event: "error",
        data: JSON.stringify({
          error: { code: "auth.unauthorized", message: "the API key this stream was opened with was revoked, rotated or has expired" },
        }),
      },
    ]);
    await start();
    await middle();
    await until(async () => (await runDetail(app, runId)).run.status === "completed");
    await until(() => slotsFree(callerId));
  }, 30_000);

  it("ISSUE33 revocation: an idle streamed /v1/chat/completions of a revoked key (the model has sent nothing) ends at its next idle check — OpenAI's error object, no [DONE]", async () => {
    keyChecks.idleMs = 50; // the bound is 5 s; shortened so the test does not wait for it
    const host = uniqueHost("script");
    const { start, middle } = await gatedAnswer(host);
    const app = await streaming(host);
    const { key, keyId, callerId } = await createKey(app);
    const res = await app.request(
      "https://gateway.test/v1/chat/completions",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "rivers" }], stream: true }),
      },
      env,
    );
    expect(res.status).toBe(200);
    const sse = readSse(res);
    await until(async () => sse.messages.length === 1); // the role chunk
    await revokeKey(env.DB, keyId, new Date());
    propagate();
    await within(sse.done, 10_000, "the idle completion stream's end"); // the model is held at its first chunk: only an idle check ends it
    expect(sse.messages.slice(1)).toEqual([
      {
        event: "message",
        data: JSON.stringify({
          error: {
            message: "the API key this stream was opened with was revoked, rotated or has expired",
            type: "authentication_error",
            code: "auth.unauthorized",
          },
        }),
      },
    ]);
    await start();
    await middle();
    await until(() => slotsFree(callerId));
  }, 30_000);

  it("ISSUE33 revocation: the check before each piece reads no key record while the keys generation is unchanged (a streamed answer's deltas over a key's socket: 0 reads of api_keys)", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }]);
    const app = await streaming(host);
    const { key, callerId } = await createKey(app);
    const client = await connect(app, room(), key); // this isolate now holds the key's record under the current generation
    const reads: string[] = [];
    let statement = Object.getPrototypeOf(env.DB.prepare("SELECT 1")) as { first: (...a: unknown[]) => unknown };
    while (!Object.hasOwn(statement, "first")) statement = Object.getPrototypeOf(statement);
    const first = statement.first;
    statement.first = function (this: { statement?: string; query?: string }, ...a: unknown[]) {
      const text = String(this.statement ?? this.query ?? "");
      if (/FROM api_keys WHERE key_id/.test(text)) reads.push(text);
      return first.apply(this, a);
    };
    try {
      client.send({ type: "message", id: "s-1", text: "rivers", stream: true });
      await until(async () => ended(client.frames, "s-1") !== undefined);
    } finally {
      statement.first = first;
    }
    expect(client.frames.filter((f) => f.type === "delta").length).toBeGreaterThanOrEqual(3);
    expect(deltaText(client.frames)).toBe(answer);
    expect(reads).toEqual([]);
    await closeAndWait(client, callerId);
  }, 30_000);
});
