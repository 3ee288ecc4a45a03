/**
 * Issue 23 "Ship in batches": the index outbox and the shipping window (src/sessions/index-outbox*.ts,
 * shipping.ts, ship-window.ts). D1 and R2 failures are injected at the bindings of the session object; evictions
 * use evictDurableObject. Every claim is checked in D1 itself and through the admin lists.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { auditHead, outboxSize } from "../../src/audit/outbox";
import { indexBacklog } from "../../src/sessions/index-outbox-store";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, until, waitForRun } from "../support/runs";
import { inSession } from "../support/session";

const today = () => new Date().toISOString().slice(0, 10);

/** What an injected D1 binding saw and what it is told to do. */
interface D1Plan {
  /** Batches to refuse before D1 is reached. */
  fail: number;
  /** Batches to apply in D1 and then answer with an error (the answer lost). */
  ackLost: number;
  /** While set, every batch waits for it (to evict the object mid-batch). */
  hold: Promise<void> | null;
  batches: number;
  /** Statements prepared by the object (each D1 statement it runs, batched or not). */
  prepared: number;
  /** Statements in batches that D1 applied. */
  applied: number;
  /** Statements handed to batches (the others ran one D1 call each). */
  batched: number;
}

const plan = (p: Partial<D1Plan> = {}): D1Plan => ({
  fail: 0,
  ackLost: 0,
  hold: null,
  batches: 0,
  prepared: 0,
  applied: 0,
  batched: 0,
  ...p,
});

/** The D1 binding `real`, with failures injected and calls counted per `p`. */
function injectedD1(real: D1Database, p: D1Plan): D1Database {
  return new Proxy(real, {
    get(target, prop) {
      if (prop === "prepare")
        return (query: string) => {
          p.prepared++;
          return target.prepare(query);
        };
      if (prop === "batch")
        return async (statements: D1PreparedStatement[]) => {
          p.batches++;
          p.batched += statements.length;
          if (p.hold) await p.hold;
          if (p.fail > 0) {
            p.fail--;
            throw new Error("D1_ERROR: injected failure");
          }
          const result = await target.batch(statements);
          p.applied += statements.length;
          if (p.ackLost > 0) {
            p.ackLost--;
            throw new Error("D1_ERROR: injected lost answer");
          }
          return result;
        };
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** Counts the R2 puts of the object's AUDIT bucket (audit segments and run bundles; log segments go elsewhere). */
function countingBucket(real: R2Bucket, counts: { segments: number; bundles: number }): R2Bucket {
  return new Proxy(real, {
    get(target, prop) {
      if (prop === "put")
        return (key: string, ...rest: unknown[]) => {
          if (key.includes("/audit/")) counts.segments++;
          if (key.endsWith("/bundle.jsonl")) counts.bundles++;
          return (target.put as (...a: unknown[]) => unknown)(key, ...rest);
        };
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A fresh chat session of ALICE under `agentId`, its object, and how to send a message to it. */
function chatSession(agentId: string, app: ReturnType<typeof appFor>) {
  const room = `room-${crypto.randomUUID().slice(0, 8)}`;
  const user = "u-outbox";
  const key = `agent:${agentId}:http:alice~${room}:dm:${user}`;
  return {
    key,
    stub: env.SESSIONS.getByName(key),
    send: (message: string) => call(app, "POST", "/v1/chat/messages", { user_id: user, room_id: room, agent_id: agentId, message }),
  };
}

/** Lays `d1` (and optionally `bucket`) over the object's bindings, creating the object. */
function inject(stub: DurableObjectStub, d1: D1Plan, r2?: { segments: number; bundles: number }): Promise<void> {
  return runInDurableObject(stub, (instance: unknown) => {
    const e = (instance as { env: Env }).env;
    e.DB = injectedD1(e.DB, d1);
    if (r2) e.AUDIT = countingBucket(e.AUDIT, r2);
  });
}

/** Nothing left to ship: the index outbox and the audit outbox are empty. */
const drained = (stub: DurableObjectStub) => inSession(stub, (cx) => indexBacklog(cx.sql) === 0 && outboxSize(cx.sql) === 0);

/** The D1 rows of a session key, per index table. */
async function d1Rows(key: string, agentId: string) {
  const count = async (q: string, ...binds: unknown[]) =>
    (
      (await env.DB.prepare(q)
        .bind(...binds)
        .first<{ n: number }>()) as { n: number }
    ).n;
  return {
    sessions: await count("SELECT COUNT(*) AS n FROM sessions WHERE session_key = ?1", key),
    generations: await count("SELECT COUNT(*) AS n FROM session_generations WHERE session_key = ?1", key),
    runs: await count("SELECT COUNT(*) AS n FROM runs WHERE session_key = ?1 AND status = 'completed'", key),
    streams: await count("SELECT COUNT(*) AS n FROM audit_streams WHERE agent_id = ?1 AND day = ?2", agentId, today()),
  };
}

const listed = async (app: ReturnType<typeof appFor>, path: string, field: string): Promise<any[]> =>
  (await call(app, "GET", path, undefined, ADMIN)).body[field] ?? [];

describe("ISSUE23 index outbox: D1 index rows ship in batches, retried until D1 takes them", () => {
  it("ISSUE23 a session created while D1 refuses writes answers 202 (not 500), and is listed once D1 recovers", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan({ fail: 1_000 });
    await inject(chat.stub, d1);
    const res = await chat.send("hello while D1 is down");
    expect(res.status).toBe(202);
    expect(await waitForRun(app, res.body.id)).toMatchObject({ status: "completed", output: "first" });
    await until(async () => d1.batches >= 1);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 0, generations: 0, runs: 0, streams: 0 });
    expect(await inSession(chat.stub, (cx) => indexBacklog(cx.sql))).toBe(4); // session, generation, run, audit stream
    d1.fail = 0;
    await until(async () => (await drained(chat.stub)) || ((await runDurableObjectAlarm(chat.stub)) && false), 15_000);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    const sessions = await listed(app, `/api/admin/chat/sessions?agent_id=${agentId}`, "sessions");
    expect(sessions.map((s) => [s.session_key, s.session_id])).toEqual([[chat.key, res.body.session_id]]);
    const generations = await listed(app, `/api/admin/chat/generations?agent_id=${agentId}`, "generations");
    expect(generations.map((g) => [g.session_id, g.status])).toEqual([[res.body.session_id, "current"]]);
    const runs = await listed(app, `/api/admin/runs?agent_id=${agentId}`, "runs");
    expect(runs.map((r) => [r.run_id, r.status])).toEqual([[res.body.id, "completed"]]);
  });

  it("ISSUE23 a failing D1 batch is retried with backoff until it succeeds; every row lands once", { timeout: 20_000 }, async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "one" }, { content: "two" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan({ fail: 2 });
    await inject(chat.stub, d1);
    const a = await chat.send("one");
    await waitForRun(app, a.body.id);
    const b = await chat.send("two");
    await waitForRun(app, b.body.id);
    // Nothing else wakes the object: the retries come from its own alarm.
    await until(() => drained(chat.stub), 15_000);
    expect(d1.fail).toBe(0);
    expect(d1.batches).toBeGreaterThanOrEqual(3);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 2, streams: 1 });
    const runs = await listed(app, `/api/admin/runs?agent_id=${agentId}`, "runs");
    expect(runs.map((r) => [r.run_id, r.status]).sort()).toEqual(
      [
        [a.body.id, "completed"],
        [b.body.id, "completed"],
      ].sort(),
    );
  });

  it("ISSUE23 a batch D1 applied but whose answer was lost is shipped again: the upserts duplicate nothing", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "once" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan({ ackLost: 1 });
    await inject(chat.stub, d1);
    const res = await chat.send("once");
    await waitForRun(app, res.body.id);
    await until(() => drained(chat.stub), 15_000);
    expect(d1.ackLost).toBe(0);
    // The lost batch's rows were applied twice (then once more with nothing new): still one row each in D1.
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
  });

  it("ISSUE23 an eviction while a D1 batch is in flight loses nothing and duplicates nothing: the next instance ships it", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first" }, { content: "evicted" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan();
    await inject(chat.stub, d1);
    // The session exists and is listed first (its creation ships before answering, so it is not what is held).
    const first = await chat.send("first");
    await waitForRun(app, first.body.id);
    await until(() => drained(chat.stub));
    let release = () => {};
    d1.hold = new Promise<void>((r) => (release = r)); // no answer until the object is being evicted
    const before = d1.batches;
    const res = await chat.send("ship me");
    await waitForRun(app, res.body.id);
    await until(async () => d1.batches > before);
    expect(await inSession(chat.stub, (cx) => indexBacklog(cx.sql))).toBeGreaterThan(0);
    // Evicted while the batch is in flight: D1 applies it but the answer never reaches the instance, which is gone
    // before it can delete the shipped rows. (evictDurableObject waits for the held batch, so it is released after.)
    d1.ackLost = 1;
    const appliedBefore = d1.applied;
    const evicted = evictDurableObject(chat.stub);
    release();
    await evicted;
    expect(d1.applied).toBeGreaterThan(appliedBefore);
    // The new instance has the real binding and no window open: its alarm (the backup) ships at once. Evicted once
    // more for good measure: nothing it shipped is shipped twice.
    await until(async () => (await drained(chat.stub)) || ((await runDurableObjectAlarm(chat.stub)) && false), 15_000);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 2, streams: 1 });
    await evictDurableObject(chat.stub);
    await runDurableObjectAlarm(chat.stub);
    expect(await drained(chat.stub)).toBe(true);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 2, streams: 1 });
    const runs = await listed(app, `/api/admin/runs?agent_id=${agentId}`, "runs");
    expect(runs.map((r) => [r.run_id, r.status]).sort()).toEqual(
      [
        [first.body.id, "completed"],
        [res.body.id, "completed"],
      ].sort(),
    );
  }, 20_000);
});

describe("ISSUE23 D-064 the shipping pass records everything in one commit, after R2 and D1", () => {
  it("ISSUE23 an eviction after the pass put its audit segment and before its commit, with a turn's events queued meanwhile: the next pass adopts that segment, the day verifies, every event once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first" }, { content: "held" }, { content: "meanwhile" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan();
    const r2 = { segments: 0, bundles: 0 };
    await inject(chat.stub, d1, r2);
    const first = await chat.send("first");
    await waitForRun(app, first.body.id);
    await until(() => drained(chat.stub));
    expect(await inSession(chat.stub, (cx) => auditHead(cx.sql, today()).counter)).toBe(1);
    // The next pass puts its audit segment (segment 2), then waits in D1: nothing of it is committed.
    let release = () => {};
    d1.hold = new Promise<void>((r) => (release = r));
    const segmentsBefore = r2.segments;
    const batchesBefore = d1.batches;
    const held = await chat.send("held");
    await waitForRun(app, held.body.id);
    await until(async () => d1.batches > batchesBefore);
    expect(r2.segments).toBe(segmentsBefore + 1);
    // Meanwhile another turn queues its events behind the held pass's.
    const meanwhile = await chat.send("meanwhile");
    await waitForRun(app, meanwhile.body.id);
    expect(await inSession(chat.stub, (cx) => auditHead(cx.sql, today()).counter)).toBe(1);
    d1.ackLost = 1;
    const evicted = evictDurableObject(chat.stub);
    release();
    await evicted;
    d1.hold = null;
    await until(async () => (await drained(chat.stub)) || ((await runDurableObjectAlarm(chat.stub)) && false), 15_000);
    // Segment 2 is the one put before the eviction (adopted, not written again under another name); segment 3 holds
    // the turn queued meanwhile.
    const listedKeys = (await env.AUDIT.list({ prefix: `agents/${agentId}/audit/${today()}/` })).objects.map((o) => o.key);
    expect(listedKeys.map((k) => k.slice(-12))).toEqual(["000001.jsonl", "000002.jsonl", "000003.jsonl"]);
    expect(await inSession(chat.stub, (cx) => auditHead(cx.sql, today()).counter)).toBe(3);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true, segments: 3, streams: 1 });
    const lines = (await call(app, "GET", `/api/admin/audit?agent_id=${agentId}&date=${today()}`, undefined, ADMIN)).text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { seq: number; run_id: string | null; event_type: string });
    for (const id of [first.body.id, held.body.id, meanwhile.body.id]) {
      const ofRun = lines.filter((e) => e.run_id === id);
      expect(ofRun.filter((e) => e.event_type === "run.completed")).toHaveLength(1);
      expect(new Set(ofRun.map((e) => e.seq)).size).toBe(ofRun.length);
    }
    expect(verify.body.events).toBe(lines.length);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 3, streams: 1 });
  }, 20_000);
});

describe("ISSUE23 D-064 a failed audit put in a one-commit pass", () => {
  it("ISSUE23 an R2 failure of the audit segment: the pass still records the index rows and the bundle it shipped, and the segment's exact bytes with their backoff; the retry writes that very object, every event once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "one" }]);
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const failing = { left: 1 };
    await runInDurableObject(chat.stub, (instance: unknown) => {
      const e = (instance as { env: Env }).env;
      e.AUDIT = new Proxy(e.AUDIT, {
        get(target, prop) {
          if (prop === "put")
            return (key: string, ...rest: unknown[]) =>
              key.includes("/audit/") && failing.left-- > 0
                ? Promise.reject(new Error("injected R2 failure"))
                : (target.put as (...a: unknown[]) => unknown)(key, ...rest);
          const value = Reflect.get(target, prop);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    });
    const res = await chat.send("one");
    await waitForRun(app, res.body.id);
    const pending = () =>
      inSession(
        chat.stub,
        (cx) => cx.sql.one<{ key: string; attempts: number }>`SELECT key, attempts FROM audit_pending WHERE id = 1` ?? null,
      );
    await until(async () => (await pending()) !== null);
    const recorded = (await pending()) as { key: string; attempts: number };
    expect(recorded.attempts).toBe(1);
    // Everything else the pass shipped is recorded: the index rows are gone from the outbox, D1 has the run, R2 the bundle.
    expect(await inSession(chat.stub, (cx) => [indexBacklog(cx.sql) === 0, outboxSize(cx.sql) > 0])).toEqual([true, true]);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 0 });
    expect(await env.AUDIT.head(`agents/${agentId}/runs/${res.body.id}/bundle.jsonl`)).not.toBeNull();
    expect(await env.AUDIT.head(recorded.key)).toBeNull();
    // The retry (the backoff is 1 s) writes the recorded key, and the stream's row follows in that pass's batch.
    await until(async () => (await drained(chat.stub)) || ((await runDurableObjectAlarm(chat.stub)) && false), 15_000);
    const keys = (await env.AUDIT.list({ prefix: `agents/${agentId}/audit/${today()}/` })).objects.map((o) => o.key);
    expect(keys).toEqual([recorded.key]);
    expect(await pending()).toBeNull();
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: 1, streams: 1 });
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true, segments: 1, streams: 1 });
    const lines = (await call(app, "GET", `/api/admin/audit?agent_id=${agentId}&date=${today()}`, undefined, ADMIN)).text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { run_id: string | null; event_type: string });
    expect(lines.filter((e) => e.run_id === res.body.id && e.event_type === "run.completed")).toHaveLength(1);
  }, 20_000);
});

describe("ISSUE23 shipping window: one audit segment and one D1 batch per window", () => {
  it("ISSUE23 ten sequential plain turns: one D1 statement per run plus the session's, bundles once per run, audit verifies", async () => {
    const turns = 10;
    const host = uniqueHost("script");
    await scriptProvider(
      host,
      Array.from({ length: turns }, (_, i) => ({ content: `reply ${i}` })),
    );
    const agentId = `obx-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = plan();
    const r2 = { segments: 0, bundles: 0 };
    await inject(chat.stub, d1, r2);
    const started = Date.now();
    for (let i = 0; i < turns; i++) {
      const res = await chat.send(`turn ${i}`);
      expect((await waitForRun(app, res.body.id)).status).toBe("completed");
    }
    const elapsed = Date.now() - started;
    await until(() => drained(chat.stub), 15_000);
    await until(async () => r2.bundles === turns);
    // Every index row once: the session, its generation, each run's final state, today's audit stream.
    expect(d1.applied).toBe(turns + 3);
    expect(await d1Rows(chat.key, agentId)).toEqual({ sessions: 1, generations: 1, runs: turns, streams: 1 });
    expect(r2.bundles).toBe(turns);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true, segments: r2.segments, streams: 1 });
    console.log(
      `ISSUE23 figures: ${turns} plain turns in ${elapsed} ms → D1 calls ${d1.prepared - d1.batched + d1.batches} (batches ${d1.batches}), D1 statements ${d1.prepared} (index rows applied ${d1.applied}), R2 audit segments ${r2.segments}, R2 bundles ${r2.bundles}`,
    );
  });
});
