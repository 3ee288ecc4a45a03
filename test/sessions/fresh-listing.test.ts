/**
 * Issue 23 D-069: a fresh session's awaited turn is listed in ONE D1 batch — the session, its generation, the run and
 * its audit stream — sent when the run stops and awaited before the call answers, so the turn's shipping pass makes
 * only its R2 puts. A D1 failure never fails the call (the rows stay queued and the shipping window retries them); an
 * object lost between T1 and the model call, or evicted before its shipping pass, still ends with every row listed
 * once. Counted with the D-056 instrument (test/support/counters.ts) and checked in D1 itself.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { outboxSize } from "../../src/audit/outbox";
import { backlogClock, forgetBacklog } from "../../src/runs/backlog";
import { indexBacklog } from "../../src/sessions/index-outbox-store";
import { SessionDO } from "../../src/sessions/SessionDO";
import { noteServiceCommandsSaved } from "../../src/storage/setup-records";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type Counter, quiescent, startCounting } from "../support/counters";
import { ADMIN, type App, appFor, call, postRunAndWait, until } from "../support/runs";
import { inSession } from "../support/session";

const label = () => crypto.randomUUID().slice(0, 8);
const today = () => new Date().toISOString().slice(0, 10);

const realClock = backlogClock.now;
let counter: Counter | null = null;
afterEach(() => {
  counter?.stop();
  counter = null;
  backlogClock.now = realClock;
  forgetBacklog();
});

/** The D1 index rows of one session object: its session, generations, completed runs and today's audit stream. */
async function d1Rows(sessionKey: string, stream: string) {
  const count = async (q: string, ...binds: unknown[]) =>
    (
      (await env.DB.prepare(q)
        .bind(...binds)
        .first<{ n: number }>()) as { n: number }
    ).n;
  return {
    sessions: await count("SELECT COUNT(*) AS n FROM sessions WHERE session_key = ?1", sessionKey),
    generations: await count("SELECT COUNT(*) AS n FROM session_generations WHERE session_key = ?1", sessionKey),
    runs: await count("SELECT COUNT(*) AS n FROM runs WHERE session_key = ?1 AND status = 'completed'", sessionKey),
    streams: await count("SELECT COUNT(*) AS n FROM audit_streams WHERE stream = ?1 AND day = ?2", stream, today()),
  };
}

/** A turn through `/v1/chat/completions` (enqueueAndAwait) in conversation `user`: a new session for a new user. */
async function complete(app: App, agentId: string, user: string) {
  const res = await call(app, "POST", "/v1/chat/completions", {
    model: `agent:${agentId}`,
    user,
    messages: [{ role: "user", content: "hello" }],
  });
  return { status: res.status, runId: res.headers.get("X-Run-Id"), reply: res.body?.choices?.[0]?.message?.content as string | undefined };
}

/** The session key and object of conversation `user` on `agentId` through the OpenAI door (ALICE is caller `alice`). */
const conversationOf = (agentId: string, user: string) => {
  const key = `agent:${agentId}:openai:alice:dm:${user}`;
  return { key, stub: () => env.SESSIONS.getByName(key) };
};

const objectIdOf = (stub: DurableObjectStub) => runInDurableObject(stub, (_i, state: DurableObjectState) => state.id.toString());

/** Nothing left to ship: the index outbox and the audit outbox are empty. */
const drained = (stub: DurableObjectStub) => inSession(stub, (cx) => indexBacklog(cx.sql) === 0 && outboxSize(cx.sql) === 0);

describe("ISSUE23 D-069 a fresh session is listed with its first run in one D1 batch, before the call answers", () => {
  it("ISSUE23 a fresh POST /v1/runs (Prefer: wait) makes one D1 call of 4 statements — session, generation, run, audit stream — all in D1 when the answer arrives; its shipping pass makes only R2 puts", async () => {
    const agentId = `listing-${label()}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    noteServiceCommandsSaved(agentId); // "configured" known in this isolate: no D1 read for it
    const t0 = Date.now();
    backlogClock.now = () => t0; // the backlog copy the warm-up read serves the measured turn (D-069 (a))
    const fresh = async () => {
      const res = await postRunAndWait(app, { agent_id: agentId, message: "hello" });
      return (await res.json()) as { id: string; status: string; output: string };
    };
    await fresh(); // the isolate's schema snapshot, the backlog copy
    const probe = await runInDurableObject(env.SESSIONS.getByName(`listing-probe-${label()}`), (_i, s) => s.storage);
    counter = startCounting(probe, [SessionDO]);
    const view = await fresh();
    const answered = { ...counter.counts };
    expect(view).toMatchObject({ status: "completed", output: "pong" });
    // Listed before the answer: the run's row names its session; all four index rows are in D1 already.
    const row = await env.DB.prepare("SELECT session_key, session_id, status FROM runs WHERE run_id = ?1")
      .bind(view.id)
      .first<{ session_key: string; session_id: string; status: string }>();
    expect(row?.status).toBe("completed");
    const stub = env.SESSIONS.getByName(row?.session_key as string);
    expect(await d1Rows(row?.session_key as string, await objectIdOf(stub))).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    const sessions = (await call(app, "GET", `/api/admin/chat/sessions?agent_id=${agentId}`, undefined, ADMIN)).body.sessions;
    expect(sessions.map((s: { session_id: string }) => s.session_id)).toContain(row?.session_id);
    expect({ d1Calls: answered.d1Calls, d1Statements: answered.d1Statements }).toEqual({ d1Calls: 1, d1Statements: 4 });
    // The turn's shipping pass: its audit segment and bundle in R2, and no D1 write (before D-069 the listing and the
    // pass were 2 D1 calls). The test's own look-ups above only read D1.
    await quiescent(() => JSON.stringify(counter?.counts), 1_500);
    const all = { ...counter.counts };
    counter.stop();
    expect(all.d1Writes).toBe(4);
    expect(all.r2Puts).toBeGreaterThanOrEqual(2); // the audit segment and the run's bundle (log segments may join)
    expect(await drained(stub)).toBe(true);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true });
  });

  it("ISSUE23 D1 down during a fresh awaited turn: the call still answers 200, the rows stay queued, and the shipping window lists them once D1 is back", async () => {
    const agentId = `listing-${label()}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const conv = conversationOf(agentId, `down-${label()}`);
    const failing = { left: 1_000, batches: 0 };
    await runInDurableObject(conv.stub(), (instance: unknown) => {
      const e = (instance as { env: Env }).env;
      const real = e.DB;
      e.DB = new Proxy(real, {
        get(target, prop) {
          if (prop === "batch")
            return async (statements: D1PreparedStatement[]) => {
              failing.batches++;
              if (failing.left > 0) throw new Error("D1_ERROR: injected failure");
              return target.batch(statements);
            };
          const value = Reflect.get(target, prop);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    });
    const stream = await objectIdOf(conv.stub());
    const turn = await complete(app, agentId, conv.key.split(":dm:")[1] as string);
    expect(turn).toMatchObject({ status: 200, reply: "pong" });
    expect(failing.batches).toBeGreaterThanOrEqual(1);
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 0, generations: 0, runs: 0, streams: 0 });
    // The turn's shipping pass writes the audit segment (R2 is up) and its head queues the stream's row: four rows wait.
    await until(() => inSession(conv.stub(), (cx) => outboxSize(cx.sql) === 0));
    expect(await inSession(conv.stub(), (cx) => indexBacklog(cx.sql))).toBe(4); // session, generation, run, audit stream
    failing.left = 0;
    await until(async () => (await drained(conv.stub())) || ((await runDurableObjectAlarm(conv.stub())) && false), 15_000);
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
  });
});

describe("ISSUE23 D-069 a fresh session's turn lost or evicted: every row listed, once", () => {
  it("ISSUE23 crash between T1 and the model call of a fresh session's first turn: after the watchdog resumes it, the session, its generation, the run and the audit stream are listed once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "lost", delay_ms: 2_000 }, { content: "resumed" }]);
    const agentId = `listing-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const user = `crash-${label()}`;
    const conv = conversationOf(agentId, user);
    const pending = complete(app, agentId, user).catch((err: unknown) => ({ failed: String(err) }));
    // T1 is durable and the model call is in flight: the run has asked for it.
    await until(async () =>
      inSession(conv.stub(), (cx) => cx.sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM runs WHERE status = 'running'`?.n === 1),
    );
    const stream = await objectIdOf(conv.stub());
    await runInDurableObject(conv.stub(), (_i, state: DurableObjectState) => state.abort("simulated crash")).catch(() => {});
    await pending; // the caller's call is lost with the object (its answer does not matter here)
    // Nothing was listed: the listing waits for the run to stop.
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 0, generations: 0, runs: 0, streams: 0 });
    await runDurableObjectAlarm(conv.stub()); // the watchdog resumes the run
    await until(async () => (await drained(conv.stub())) || ((await runDurableObjectAlarm(conv.stub())) && false), 15_000);
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    const runs = (await call(app, "GET", `/api/admin/runs?agent_id=${agentId}`, undefined, ADMIN)).body.runs;
    expect(runs.map((r: { status: string }) => r.status)).toEqual(["completed"]);
    const sessions = (await call(app, "GET", `/api/admin/chat/sessions?agent_id=${agentId}`, undefined, ADMIN)).body.sessions;
    expect(sessions.map((s: { session_key: string }) => s.session_key)).toEqual([conv.key]);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true, streams: 1 });
  });

  it("ISSUE23 evicted during a fresh session's model call: the turn ends and is answered listed; the next instance ships what the pass left, and nothing is listed twice", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "answered", delay_ms: 500 }]);
    const agentId = `listing-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const user = `evict-${label()}`;
    const conv = conversationOf(agentId, user);
    const pending = complete(app, agentId, user);
    await until(async () =>
      inSession(conv.stub(), (cx) => cx.sql.one<{ n: number }>`SELECT COUNT(*) AS n FROM runs WHERE status = 'running'`?.n === 1),
    );
    const stream = await objectIdOf(conv.stub());
    await evictDurableObject(conv.stub()); // graceful: waits for the call, which waits for the run and its listing
    expect(await pending).toMatchObject({ status: 200, reply: "answered" });
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    // Whatever the evicted instance's pass had not recorded, the next one ships (upserts: still one row each).
    await until(async () => (await drained(conv.stub())) || ((await runDurableObjectAlarm(conv.stub())) && false), 15_000);
    await evictDurableObject(conv.stub());
    await runDurableObjectAlarm(conv.stub());
    expect(await drained(conv.stub())).toBe(true);
    expect(await d1Rows(conv.key, stream)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true, streams: 1 });
  });
});
