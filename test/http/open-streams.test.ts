/**
 * Issue 20 §4 "Open event streams per caller are unbounded; cap them": `limits.maxOpenStreamsPerCaller` counts a
 * caller's open `GET /v1/runs/{run_id}/events` and streamed `POST /v1/chat/completions` responses in the caller's
 * own Durable Object (leases). At the cap the next one is 429 `rate.limited` (OpenAI's error shape on the OpenAI
 * path); a stream that ends or whose client disconnects gives its slot back; a lease whose isolate died lapses.
 *
 * Issue 33 (D-086): an open WebSocket holds its slot however long it idles — its session object's alarm renews the
 * lease — and gives it back when it closes.
 *
 * Each test uses callers of its own (added to GATEWAY_API_TOKENS for its requests), so streams other test files
 * open for alice or bob can never shift a count here.
 */
import { runDurableObjectAlarm } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { STREAM_LEASE_RENEW_MS, STREAM_LEASE_TTL_MS } from "../../src/idempotency/stream-leases";
import { httpChatSessionKey, sessionObjectName } from "../../src/sessions/keys";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type App, appFor, readResponse, registerTestTools, until } from "../support/runs";

beforeAll(() => registerTestTools());
afterEach(() => {
  vi.useRealTimers();
});

interface Caller {
  id: string;
  token: string;
}

/** Fresh API callers, and an env whose GATEWAY_API_TOKENS knows them. */
function callers(n: number): { list: Caller[]; env: Env } {
  const list = Array.from({ length: n }, (_, i) => {
    const tag = crypto.randomUUID().replaceAll("-", "").slice(0, 12);
    return { id: `streamer${i}-${tag}`, token: `stream-token-${tag}-0123456789` };
  });
  const tokens = [env.GATEWAY_API_TOKENS, ...list.map((c) => `${c.id}:${c.token}`)].join(",");
  return { list, env: { ...env, GATEWAY_API_TOKENS: tokens } as Env };
}

/** The app on a scripted provider, with the given cap. */
function appWith(host: string, maxOpenStreamsPerCaller: number): App {
  return appFor({ ...runConfig(host), limits: { maxOpenStreamsPerCaller } });
}

function request(app: App, e: Env, who: Caller, method: string, path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { Authorization: `Bearer ${who.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return Promise.resolve(
    app.request(`https://gateway.test${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) }, e),
  );
}

/** A run of `who` paused for an approval: its event stream stays open (follow) until the run moves on. */
async function pausedRun(app: App, e: Env, who: Caller): Promise<string> {
  const res = await readResponse(await request(app, e, who, "POST", "/v1/runs", { agent_id: "main", message: "tell ops" }));
  expect(res.status).toBe(202);
  const id = res.body.id as string;
  await until(async () => (await readResponse(await request(app, e, who, "GET", `/v1/runs/${id}`))).body.status === "awaiting_approval");
  return id;
}

const send = (id: string) => ({
  tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: "hi" }) }],
});

/** Opens the run's event stream; the response is open (200, text/event-stream) while its body is not cancelled. */
async function openEvents(app: App, e: Env, who: Caller, runId: string): Promise<Response> {
  return request(app, e, who, "GET", `/v1/runs/${runId}/events`);
}

/** Closes an open stream as a client that disconnects does. */
async function close(res: Response): Promise<void> {
  await res.body?.cancel();
}

const refusal = (open: number, max: number) => ({
  code: "rate.limited",
  message: `this caller already has ${open} event streams open (limit ${max}); close one before opening another`,
});

describe("ISSUE20-§4 open event streams per caller are capped (limits.maxOpenStreamsPerCaller)", () => {
  it("ISSUE20-§4 at the cap (2) the next event stream is 429 rate.limited with retry_after_seconds; closing one lets a new one in; another caller is unaffected", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), send("s2")]);
    const app = appWith(host, 2);
    const {
      list: [a, b],
      env: e,
    } = callers(2) as { list: [Caller, Caller]; env: Env };
    const runA = await pausedRun(app, e, a);
    const runB = await pausedRun(app, e, b);

    const s1 = await openEvents(app, e, a, runA);
    // A second app instance (as another isolate would have): the count is not kept in the app.
    const s2 = await openEvents(appWith(host, 2), e, a, runA);
    expect([s1.status, s2.status]).toEqual([200, 200]);
    expect(s1.headers.get("content-type")).toBe("text/event-stream");

    const third = await openEvents(app, e, a, runA);
    expect(third.status).toBe(429);
    expect(third.headers.get("retry-after")).toBe("5");
    expect(await third.json()).toEqual({ error: { ...refusal(2, 2), retry_after_seconds: 5 } });

    // Another caller has slots of its own.
    const other = await openEvents(app, e, b, runB);
    expect(other.status).toBe(200);

    // The client of s1 goes away: its slot comes back, and exactly one new stream fits.
    await close(s1);
    let s3: Response | undefined;
    await until(async () => {
      const res = await openEvents(app, e, a, runA);
      if (res.status === 200) s3 = res;
      else await res.body?.cancel();
      return res.status === 200;
    });
    const again = await openEvents(app, e, a, runA);
    expect(again.status).toBe(429);
    expect(await again.json()).toEqual({ error: { ...refusal(2, 2), retry_after_seconds: 5 } });

    for (const res of [s2, s3 as Response, other]) await close(res);
    for (const [who, id] of [
      [a, runA],
      [b, runB],
    ] as const)
      await request(app, e, who, "POST", `/v1/runs/${id}/cancel`);
  });

  it("ISSUE20-§4 a stream that ends by itself gives its slot back; a streamed chat completion counts too, refused in OpenAI's error shape before any run is queued", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), { content: "not streamed" }]);
    const app = appWith(host, 1);
    const {
      list: [a],
      env: e,
    } = callers(1) as { list: [Caller]; env: Env };
    const run = await pausedRun(app, e, a);
    // follow=false streams end on their own: each one's slot is back before the next.
    for (let i = 0; i < 3; i++) {
      const res = await request(app, e, a, "GET", `/v1/runs/${run}/events?follow=false`);
      expect(res.status).toBe(200);
      await res.text();
    }
    const held = await openEvents(app, e, a, run);
    expect(held.status).toBe(200);
    const sentBefore = (await bodiesSentTo(host)).length;

    const streamed = await request(app, e, a, "POST", "/v1/chat/completions", {
      model: "agent:main",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    expect(streamed.status).toBe(429);
    expect(streamed.headers.get("retry-after")).toBe("5");
    expect(await streamed.json()).toEqual({
      error: { message: refusal(1, 1).message, type: "rate_limit_error", code: "rate.limited" },
    });
    // A completion that is not streamed is not an open stream.
    const plain = await request(app, e, a, "POST", "/v1/chat/completions", {
      model: "agent:main",
      messages: [{ role: "user", content: "hi" }],
    });
    expect(plain.status).toBe(200);
    expect((await bodiesSentTo(host)).length).toBe(sentBefore + 1); // the refused stream queued no run

    await close(held);
    await request(app, e, a, "POST", `/v1/runs/${run}/cancel`);
  });

  it("ISSUE20-§4 a streamed chat completion holds a slot while it is open, and gives it back when it ends", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "slow answer", delay_ms: 1_500 }, send("s1")]);
    const app = appWith(host, 1);
    const {
      list: [a],
      env: e,
    } = callers(1) as { list: [Caller]; env: Env };
    const streamed = await request(app, e, a, "POST", "/v1/chat/completions", {
      model: "agent:main",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    expect(streamed.status).toBe(200);
    const runId = streamed.headers.get("x-run-id") as string;
    const meanwhile = await openEvents(app, e, a, runId);
    expect(meanwhile.status).toBe(429);
    expect(await meanwhile.json()).toEqual({ error: { ...refusal(1, 1), retry_after_seconds: 5 } });
    expect(await streamed.text()).toContain("slow answer");
    const after = await request(app, e, a, "GET", `/v1/runs/${runId}/events?follow=false`);
    expect(after.status).toBe(200);
    await after.text();
  });

  it("ISSUE20-§4 the count lives in the caller's Durable Object: a lease its isolate stopped renewing lapses after the TTL", async () => {
    const stub = env.IDEMPOTENCY.getByName(`api:lease-${crypto.randomUUID()}`);
    const t0 = 1_000_000;
    expect(await stub.acquireStream("l1", t0, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: true });
    expect(await stub.acquireStream("l2", t0, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: true });
    expect(await stub.acquireStream("l3", t0 + 1, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: false, open: 2 });
    // A live lease renews even at the cap.
    expect(await stub.acquireStream("l1", t0 + 30_000, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: true });
    // l2's isolate died at t0 and never renewed: at t0 + TTL it no longer counts, l1 (renewed) still does.
    expect(await stub.acquireStream("l3", t0 + STREAM_LEASE_TTL_MS, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: true });
    expect(await stub.acquireStream("l4", t0 + STREAM_LEASE_TTL_MS, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: false, open: 2 });
    await stub.releaseStream("l1");
    expect(await stub.acquireStream("l4", t0 + STREAM_LEASE_TTL_MS, 2, STREAM_LEASE_TTL_MS)).toEqual({ ok: true });
  });

  it("ISSUE33 slots: idle sockets keep their slots past the lease TTL — their session objects' alarms renew them — so at the cap (2) a third socket is refused; a closed socket frees its slot and its object keeps no alarm for it", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t0 = Date.now();
    const app = appWith(uniqueHost("script"), 2);
    const {
      list: [a],
      env: e,
    } = callers(1) as { list: [Caller]; env: Env };
    const upgrade = (roomId: string) =>
      app.request(
        `https://gateway.test/v1/chat/socket?agent_id=main&room_id=${roomId}&user_id=u1`,
        { headers: { Authorization: `Bearer ${a.token}`, Upgrade: "websocket" } },
        e,
      );
    const open = async (roomId: string) => {
      const res = await upgrade(roomId);
      expect(res.status).toBe(101);
      const ws = res.webSocket as WebSocket;
      ws.accept();
      const session = httpChatSessionKey("main", a.id, roomId, "u1");
      if (!session.ok) throw new Error(session.error);
      return { ws, stub: env.SESSIONS.getByName(sessionObjectName(session.key)) };
    };
    const one = await open(`r1-${a.id}`);
    const two = await open(`r2-${a.id}`);
    // Both idle through the lease's TTL: each object's alarm renews its socket's lease when due.
    vi.setSystemTime(t0 + STREAM_LEASE_TTL_MS - STREAM_LEASE_RENEW_MS);
    expect(await runDurableObjectAlarm(one.stub)).toBe(true);
    expect(await runDurableObjectAlarm(two.stub)).toBe(true);
    vi.setSystemTime(t0 + STREAM_LEASE_TTL_MS + STREAM_LEASE_RENEW_MS); // the leases taken at t0 would have lapsed
    const third = await upgrade(`r3-${a.id}`);
    expect(third.webSocket).toBeNull();
    expect(await readResponse(third)).toMatchObject({ status: 429, body: { error: refusal(2, 2) } });
    // A socket that closes gives its slot back at once; its object then has nothing to renew.
    one.ws.close();
    let res = await upgrade(`r3-${a.id}`);
    while (res.status === 429) {
      await new Promise((r) => setTimeout(r, 25));
      res = await upgrade(`r3-${a.id}`);
    }
    expect(res.status).toBe(101);
    res.webSocket?.accept();
    expect(await runDurableObjectAlarm(one.stub)).toBe(true);
    expect(await runDurableObjectAlarm(one.stub)).toBe(false);
    res.webSocket?.close();
    two.ws.close();
    // Both slots come back once their objects have seen the sockets close (nothing is left running after the test).
    const stub = env.IDEMPOTENCY.getByName(`api:${a.id}`);
    await until(async () => {
      const probe = await stub.acquireStream("probe", Date.now(), 1, STREAM_LEASE_TTL_MS);
      await stub.releaseStream("probe");
      return probe.ok;
    });
  });
});
