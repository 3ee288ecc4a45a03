/**
 * Issue 23 "the turn to reach", run side: a run starts inline in the RPC that queues it (the alarm is only the
 * watchdog and the shipper), a plain turn writes two commits (T1 before the network, T3 after the model), and
 * an object lost between T1 and the model call, or between T3 and shipping, loses and repeats nothing.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { validateRunLog } from "../../src/runs/events";
import { runObjectId } from "../../src/runs/ids";
import { WATCHDOG_MS } from "../../src/sessions/capabilities";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, runDetail, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

/**
 * Calls that leave the object through the runtime's fetch (the provider) mark an I/O wait for `countCommits`.
 * Installed at import, before any provider client of this isolate captures `fetch`.
 */
let onFetch: (() => void) | null = null;
const runtimeFetch = globalThis.fetch;
globalThis.fetch = ((...a: Parameters<typeof fetch>) => {
  onFetch?.();
  return runtimeFetch(...a);
}) as typeof fetch;

const label = () => crypto.randomUUID().slice(0, 8);
const today = () => new Date().toISOString().slice(0, 10);
const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

/** One turn of conversation `user` through POST /v1/chat/completions (enqueueAndAwait): status, run id, reply. */
async function complete(app: App, user: string, content: string) {
  const res = await app.request(
    "https://gateway.test/v1/chat/completions",
    {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
      body: JSON.stringify({ model: "agent:main", user, messages: [{ role: "user", content }] }),
    },
    env,
  );
  const body = (await res.json()) as { choices?: { message: { content: string } }[] };
  return { status: res.status, runId: res.headers.get("X-Run-Id") as string, reply: body.choices?.[0]?.message.content };
}

/** A chat turn through POST /v1/chat/messages (202 at once): its run id and session id. */
async function say(app: App, agentId: string, room: string, message: string) {
  const res = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: agentId, message });
  if (res.status !== 202) throw new Error(`POST /v1/chat/messages answered ${res.status}: ${res.text}`);
  return res.body as { id: string; session_id: string };
}

const alarmOf = (stub: DurableObjectStub) => runInDurableObject(stub, (_i, state: DurableObjectState) => state.storage.getAlarm());

/** Kills the object abruptly (a crash or a deploy): in-flight work is dropped, storage stays. */
async function crash(stub: DurableObjectStub): Promise<void> {
  await runInDurableObject(stub, (_i, state: DurableObjectState) => {
    state.abort("simulated crash");
  }).catch(() => {});
}

/** The session's transcript as [role, content] pairs. */
async function transcript(app: App, sessionId: string): Promise<[string, string][]> {
  const res = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/messages?limit=100`, undefined, ADMIN);
  return res.body.messages.map((m: { role: string; content: string }) => [m.role, m.content]);
}

/** Audit lines of an agent today, from the read side. */
async function auditLines(app: App, agentId: string): Promise<{ event_id: string; event_type: string; run_id: string | null }[]> {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
  return res.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

/** Counts the object's storage commits from now on (see `countCommits`). */
interface CommitCounter {
  /** Groups of writes with no I/O between them: each is one SQLite commit (workerd's implicit transaction). */
  commits: number;
  /** Top-level `transactionSync` calls. */
  transactions: number;
  /** Write statements. */
  writes: number;
  alarmWrites: number;
  /** Each write as `commit#: statement head`, for the report. */
  trace: string[];
  /** Puts the object's storage and bindings back. */
  restore(): Promise<void>;
}

/**
 * Instruments the object: every write statement, top-level transaction and alarm write, and every call that
 * leaves the object (fetch, D1, R2). workerd commits the writes made since the last I/O when the object next
 * waits on I/O (its implicit transaction; `transactionSync` inside it is a savepoint), so the writes between two
 * calls that leave the object are one commit.
 */
async function countCommits(stub: DurableObjectStub): Promise<CommitCounter> {
  let open = false;
  const c: CommitCounter = { commits: 0, transactions: 0, writes: 0, alarmWrites: 0, trace: [], restore: async () => {} };
  const wrote = (what: string) => {
    if (!open) c.commits++;
    open = true;
    c.trace.push(`${c.commits}: ${what}`);
  };
  const io = () => {
    open = false;
  };
  await runInDurableObject(stub, (object: unknown, state: DurableObjectState) => {
    const instance = object as { env: Record<string, unknown> };
    const sql = state.storage.sql as { exec: SqlStorage["exec"] };
    const exec = sql.exec.bind(sql);
    sql.exec = ((query: string, ...values: SqlStorageValue[]) => {
      if (/^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(query)) {
        c.writes++;
        wrote(query.trim().replace(/\s+/g, " ").slice(0, 40));
      }
      return exec(query, ...values);
    }) as SqlStorage["exec"];
    const storage = state.storage as {
      transactionSync: DurableObjectStorage["transactionSync"];
      setAlarm: DurableObjectStorage["setAlarm"];
    };
    const tx = storage.transactionSync.bind(storage);
    let depth = 0;
    storage.transactionSync = (<T>(fn: () => T): T => {
      if (depth === 0) c.transactions++;
      depth++;
      try {
        return tx(fn);
      } finally {
        depth--;
      }
    }) as DurableObjectStorage["transactionSync"];
    const setAlarm = storage.setAlarm.bind(storage);
    storage.setAlarm = ((at: number | Date, o?: DurableObjectSetAlarmOptions) => {
      c.alarmWrites++;
      wrote("setAlarm");
      return setAlarm(at, o);
    }) as DurableObjectStorage["setAlarm"];
    // Every way out of the object: the provider (fetch), D1 and R2; and the start of each event (an RPC, the alarm).
    onFetch = io;
    const target = instance as unknown as Record<string, (...a: unknown[]) => unknown>;
    for (const name of ["alarm"]) {
      const method = (target[name] as (...a: unknown[]) => unknown).bind(instance);
      target[name] = (...a: unknown[]) => {
        io();
        return method(...a);
      };
    }
    const [db, bucket] = [instance.env.DB as D1Database, instance.env.AUDIT as R2Bucket];
    /** A binding whose `methods` (all functions when null) mark an I/O wait before they run. */
    const marked = <T extends object>(binding: T, methods: string[] | null): T =>
      new Proxy(binding, {
        get: (t, k) => {
          const v = Reflect.get(t, k);
          if (typeof v !== "function" || (methods && !methods.includes(String(k)))) return v;
          io();
          return v.bind(t);
        },
      });
    instance.env.DB = marked(db, ["prepare", "batch", "exec"]);
    instance.env.AUDIT = marked(bucket, null);
    c.restore = () =>
      runInDurableObject(stub, (object: unknown) => {
        const i = object as { env: Record<string, unknown> };
        onFetch = null;
        i.env.DB = db;
        i.env.AUDIT = bucket;
      });
  });
  return c;
}

describe("ISSUE23 run inline", () => {
  it("ISSUE23 run inline: with no alarm able to fire, a message's run still starts and ends (202 at once, the run in the object); the one alarm asked for is the watchdog, WATCHDOG_MS ahead", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "inline answer" }]);
    const agentId = `inl-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const room = `room-${label()}`;
    const stub = env.SESSIONS.getByName(`agent:${agentId}:http:alice~${room}:dm:u`);
    // The object's alarm is never set: a run the alarm would have to start would never start. The object still sees
    // the alarm it asked for (getAlarm), as it would a real one that has not fired yet.
    const asked: number[] = [];
    await runInDurableObject(stub, (_i, state: DurableObjectState) => {
      let armed: number | null = null;
      const storage = state.storage as { setAlarm: DurableObjectStorage["setAlarm"]; getAlarm: DurableObjectStorage["getAlarm"] };
      storage.setAlarm = async (at: number | Date) => {
        asked.push(Number(at) - Date.now());
        armed = Number(at);
      };
      storage.getAlarm = async () => armed;
    });
    const turn = await say(app, agentId, room, "hello");
    const run = await waitForRun(app, turn.id);
    expect(run).toMatchObject({ status: "completed", output: "inline answer" });
    await runInDurableObject(stub, (_i, state: DurableObjectState) => {
      delete (state.storage as { getAlarm?: unknown }).getAlarm;
    });
    expect(await alarmOf(stub)).toBeNull();
    expect(WATCHDOG_MS).toBe(1_000);
    expect(asked).toHaveLength(1);
    expect(asked[0]).toBeGreaterThan(0);
    expect(asked[0]).toBeLessThanOrEqual(WATCHDOG_MS);
    const detail = await runDetail(app, turn.id);
    expect(detail.events.map((e: { event_type: string }) => e.event_type)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "run.completed",
    ]);
    await runInDurableObject(stub, (_i, state: DurableObjectState) => {
      delete (state.storage as { setAlarm?: unknown }).setAlarm;
    });
  });

  it("ISSUE23 run inline: a second message while a run executes queues behind it and runs after it, in arrival order, inline", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "first", delay_ms: 600 }, { content: "second" }]);
    const agentId = `inl-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const room = `room-${label()}`;
    const one = await say(app, agentId, room, "one");
    const two = await say(app, agentId, room, "two");
    const [a, b] = [await waitForRun(app, one.id), await waitForRun(app, two.id)];
    expect([a.output, b.output]).toEqual(["first", "second"]);
    expect((await bodiesSentTo(host)).map((s) => s.messages.at(-1).content)).toEqual(["one", "two"]);
    // The second run started only once the first had ended (one run at a time).
    const started = (await runDetail(app, two.id)).events.find((e: { event_type: string }) => e.event_type === "run.started");
    const ended = (await runDetail(app, one.id)).events.at(-1);
    expect(ended.event_type).toBe("run.completed");
    expect(started.ts >= ended.ts).toBe(true);
    // "two" was stored on arrival, while "one" ran; the first run's prompt did not include it (its history ends before).
    expect(await transcript(app, one.session_id)).toEqual([
      ["user", "one"],
      ["user", "two"],
      ["assistant", "first"],
      ["assistant", "second"],
    ]);
    expect((await bodiesSentTo(host))[0]?.messages.some((m: { content: string }) => m.content === "two")).toBe(false);
  });
});

describe("ISSUE23 two commits per plain turn", () => {
  it("ISSUE23 two commits per plain turn: T1 before the model call, T3 after it; one alarm write; nothing else before the reply", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "warm" }, { content: "measured" }]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: [] } } }));
    const user = `u-${label()}`;
    const warm = await complete(app, user, "first"); // creates the session; its alarm ships it
    const stub = stubOf(warm.runId);
    await runDurableObjectAlarm(stub);
    const c = await countCommits(stub);
    const turn = await complete(app, user, "second");
    const atReply = { commits: c.commits, transactions: c.transactions, writes: c.writes, alarmWrites: c.alarmWrites };
    expect(turn.reply).toBe("measured");
    console.log(`ISSUE23 plain turn before the reply: ${JSON.stringify(atReply)}\n${c.trace.join("\n")}`);
    // T1: the message, the run row, run.created/run.started, the watchdog alarm, manifest, model.requested, llm_req,
    // the audit outbox rows — one commit before the model call. T3: usage, traces, the reply, run.completed.
    const [t1, t3] = [1, 2].map((n) => c.trace.filter((w) => w.startsWith(`${n}: `)).map((w) => w.slice(3)));
    expect(t1).toEqual([
      "INSERT INTO transcript (session_id, role",
      "INSERT INTO runs (id, session_id, source",
      "INSERT INTO run_events (run_id, seq, eve",
      "INSERT INTO audit_outbox (day, event) VA",
      // D-061: the run starts in the transaction that stores it, before the watchdog is armed.
      "UPDATE runs SET status = 'running', star",
      "INSERT INTO run_events (run_id, seq, eve",
      "INSERT INTO audit_outbox (day, event) VA",
      "setAlarm",
      "INSERT INTO prompt_manifests (turn_id, s",
      "INSERT INTO run_events (run_id, seq, eve",
      "INSERT INTO audit_outbox (day, event) VA",
      "INSERT INTO run_traces (run_id, ts, kind",
    ]);
    expect(t3).toEqual([
      "UPDATE runs SET prompt_tokens = prompt_t",
      "INSERT INTO run_traces (run_id, ts, kind",
      "INSERT INTO transcript (session_id, role",
      "UPDATE runs SET status = 'completed', ou",
      "INSERT INTO run_events (run_id, seq, eve",
      "INSERT INTO audit_outbox (day, event) VA",
    ]);
    // The answer waits for T3 only: the D1 index write (and its `indexed` flag, ship.ts) follows the answer.
    expect(atReply.commits).toBeGreaterThanOrEqual(2);
    expect(atReply.alarmWrites).toBe(1);
    // The shipping alarm after it (audit segment, run bundle, index rows): counted, not asserted (the outbox's part).
    await runDurableObjectAlarm(stub);
    await c.restore();
    const total = { commits: c.commits, transactions: c.transactions, writes: c.writes, alarmWrites: c.alarmWrites };
    console.log(`ISSUE23 plain turn with its shipping alarm: ${JSON.stringify(total)}`);
    console.log(`ISSUE23 writes by commit:\n${c.trace.join("\n")}`);
  });
});

describe("ISSUE23 crash tests", () => {
  it("ISSUE23 crash between T1 and the model call: the watchdog (≤ WATCHDOG_MS) resumes the run; one user and one assistant message, one run.completed, audit once", async () => {
    const host = uniqueHost("script");
    // The first request is answered late: the object is killed while it waits, after T1 is durable.
    await scriptProvider(host, [{ content: "lost", delay_ms: 2_000 }, { content: "resumed" }]);
    const agentId = `t1-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const turn = await say(app, agentId, `room-${label()}`, "survive");
    const stub = () => stubOf(turn.id); // a stub is broken once its object is aborted: a fresh one each time
    await until(async () => (await runDetail(app, turn.id)).events.some((e: { event_type: string }) => e.event_type === "model.requested"));
    const before = Date.now();
    await crash(stub());
    const alarm = await alarmOf(stub());
    expect(alarm).not.toBeNull();
    expect((alarm as number) - before).toBeLessThanOrEqual(1_000); // a second, not 60 s
    await runDurableObjectAlarm(stub());
    const run = await waitForRun(app, turn.id);
    expect(run).toMatchObject({ status: "completed", output: "resumed" });
    const detail = await runDetail(app, turn.id);
    expect(validateRunLog(detail.events)).toBeNull();
    expect(detail.events.filter((e: { event_type: string }) => e.event_type === "run.completed")).toHaveLength(1);
    expect(detail.events.filter((e: { event_type: string }) => e.event_type === "model.requested")).toHaveLength(2);
    expect(await transcript(app, turn.session_id)).toEqual([
      ["user", "survive"],
      ["assistant", "resumed"],
    ]);
    await until(async () => {
      await runDurableObjectAlarm(stub()).catch(() => {});
      return (await auditBacklog(stub())) === 0;
    });
    const lines = await auditLines(app, agentId);
    expect(lines.map((l) => l.event_id)).toEqual(detail.events.map((e: { event_id: string }) => e.event_id));
  });

  it("ISSUE23 crash between T3 and shipping (and during it): the next alarm ships the audit events, the bundle and the index row exactly once; the chain verifies", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "shipped later" }]);
    const agentId = `t3-${label()}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: [] } } }));
    const room = `room-${label()}`;
    const stub = () => env.SESSIONS.getByName(`agent:${agentId}:http:alice~${room}:dm:u`);
    // Every R2 put of this instance hangs: its shipping (audit segment, bundle) never finishes — the crash ends it.
    await runInDurableObject(stub(), (object: unknown) => {
      const instance = object as { env: { AUDIT: R2Bucket } };
      const bucket = instance.env.AUDIT;
      instance.env.AUDIT = new Proxy(bucket, {
        get: (t, k) => (k === "put" ? () => new Promise(() => {}) : (Reflect.get(t, k).bind?.(t) ?? Reflect.get(t, k))),
      });
    });
    const turn = await say(app, agentId, room, "ship it");
    const run = await waitForRun(app, turn.id);
    expect(await auditBacklog(stub())).toBeGreaterThan(0); // T3 is durable, nothing shipped
    await crash(stub());
    await runDurableObjectAlarm(stub());
    expect(await auditBacklog(stub())).toBe(0);
    const detail = await runDetail(app, turn.id);
    expect(detail.events.filter((e: { event_type: string }) => e.event_type === "run.completed")).toHaveLength(1);
    const lines = await auditLines(app, agentId);
    expect(lines.map((l) => l.event_id)).toEqual(detail.events.map((e: { event_id: string }) => e.event_id));
    const bundles = await env.AUDIT.list({ prefix: `${run.artifact_path}/` });
    expect(bundles.objects.map((o) => o.key.slice(run.artifact_path.length + 1))).toEqual(["bundle.jsonl"]);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toMatchObject({ ok: true });
    expect(await transcript(app, turn.session_id)).toEqual([
      ["user", "ship it"],
      ["assistant", "shipped later"],
    ]);
  });
});
