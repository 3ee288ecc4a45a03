/**
 * Issue 23, what a plain turn does before its reply, counted exactly (test/support/counters.ts): the message, the
 * run's start, its watchdog alarm and, with nothing awaited on I/O in between, the prompt manifest and
 * `model.requested` are one commit (T1: `transactionSync` is a savepoint of the turn's implicit transaction, D-066),
 * the model's usage, the reply and the terminal state are one commit (T3), and a session that never asked for
 * an environment variable makes no D1 read for one; the agent's "configured" answer is kept per isolate.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { runObjectId } from "../../src/runs/ids";
import { SessionDO } from "../../src/sessions/SessionDO";
import { hasServiceCommands, noteServiceCommandsSaved, SETUP_CACHE_MS } from "../../src/storage/setup-records";
import { runConfig, uniqueHost } from "../support/config";
import { type Counter, quiescent, startCounting } from "../support/counters";
import { ADMIN, type App, appFor, call, postRunAndWait, runDetail } from "../support/runs";

let counter: Counter | null = null;
let undoPrepare: (() => void) | null = null;
afterEach(() => {
  counter?.stop();
  counter = null;
  undoPrepare?.();
  undoPrepare = null;
});

/** Every D1 statement text prepared in this isolate from now on (the Worker and every SessionDO share it). */
function recordD1(): string[] {
  const seen: string[] = [];
  const proto = Object.getPrototypeOf(env.DB) as { prepare: (q: string) => unknown };
  const original = proto.prepare;
  proto.prepare = function (this: unknown, q: string) {
    seen.push(q.replace(/\s+/g, " ").trim());
    return original.call(this, q);
  };
  undoPrepare = () => {
    proto.prepare = original;
  };
  return seen;
}

async function countFromHere(): Promise<Counter> {
  const storage = await runInDurableObject(env.SESSIONS.getByName(`commits-probe-${crypto.randomUUID()}`), (_i, s) => s.storage);
  counter = startCounting(storage, [SessionDO]);
  return counter;
}

function conversation(app: App, agentId: string, user: string) {
  return async () => {
    const res = await call(app, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      user,
      messages: [{ role: "user", content: "hello" }],
    });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content).toBe("pong");
    return res.headers.get("X-Run-Id") as string;
  };
}

describe("ISSUE23 a plain turn's commits and D1 reads before its reply", () => {
  it("ISSUE23 T1 and T3: a conversation's next plain turn makes exactly 2 commits before its reply (store, start and model.requested; usage, reply and end)", async () => {
    const agentId = `commits-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const turn = conversation(app, agentId, "commits-1");
    await turn(); // the session exists
    const c = await countFromHere();
    // The first turn's shipping pass is over (the counter counts every object's commits): only this turn's count.
    await quiescent(() => JSON.stringify(c.counts), 1_500);
    c.reset();
    const runId = await turn();
    const before = { ...c.counts };
    c.stop();
    expect(before.commits).toBe(2);
    expect(before.sqlWrites).toBeGreaterThan(0);
    // The run's lifecycle is whole and in order, with nothing written twice.
    const detail = await runDetail(app, runId);
    expect(detail.events.map((e: { event_type: string; seq: number }) => [e.seq, e.event_type])).toEqual([
      [1, "run.created"],
      [2, "run.started"],
      [3, "model.requested"],
      [4, "run.completed"],
    ]);
  });

  it("ISSUE23 T1 includes the watchdog: an idle conversation's turn writes its alarm once and still makes exactly 2 commits before its reply", async () => {
    const agentId = `watchdog-t1-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const turn = conversation(app, agentId, "watchdog-1");
    const firstId = await turn();
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(firstId) as string));
    // Idle: the first turn's shipping pass has cleared the alarm, so this turn must arm the watchdog itself.
    let alarm: number | null = 0;
    for (let i = 0; i < 50 && alarm !== null; i++) {
      await new Promise((r) => setTimeout(r, 100));
      alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    }
    expect(alarm).toBeNull();
    const c = await countFromHere();
    const t0 = Date.now();
    await turn();
    const before = { ...c.counts };
    c.stop();
    expect(before.alarmWrites).toBe(1);
    expect(before.commits).toBe(2);
    // The watchdog is set, within WATCHDOG_MS of the turn's start, until the shipping pass settles it.
    const armed = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    if (armed !== null) expect(armed - t0).toBeLessThanOrEqual(1_000 + (Date.now() - t0));
  });

  it("ISSUE23 after the timer's shipping pass, with nothing left to do, the object's alarm is cleared: no watchdog fires for an idle conversation", async () => {
    const agentId = `settle-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const turn = conversation(app, agentId, "settle-1");
    await turn();
    const c = await countFromHere();
    const runId = await turn();
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));
    let alarm: number | null = 0;
    for (let i = 0; i < 50 && alarm !== null; i++) {
      await new Promise((r) => setTimeout(r, 100));
      alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    }
    const counts = { ...c.counts };
    c.stop();
    expect(alarm).toBeNull();
    expect(counts.alarmFires).toBe(0);
    // Shipped all the same: the run's final index row is in D1.
    const row = await env.DB.prepare("SELECT status FROM runs WHERE run_id = ?1").bind(runId).first<{ status: string }>();
    expect(row).toEqual({ status: "completed" });
  });

  it("ISSUE23 D-064 a fresh-session turn (POST /v1/runs, Prefer: wait), its shipping included: 4 commits — the schema; session, message, run start, watchdog and model.requested; T3; the shipping pass, alarm cleared in it — one setAlarm, one deleteAlarm, no fire", async () => {
    const agentId = `fresh-commits-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    noteServiceCommandsSaved(agentId); // "configured" known in this isolate: no D1 read (its I/O would split T1)
    const fresh = async (): Promise<string> => {
      const res = await postRunAndWait(app, { agent_id: agentId, message: "hello" });
      const view = (await res.json()) as { id: string; status: string; output: string };
      expect(view).toMatchObject({ status: "completed", output: "pong" });
      return view.id;
    };
    await fresh(); // the isolate's schema snapshot and caches
    const c = await countFromHere();
    const runId = await fresh();
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));
    await quiescent(() => JSON.stringify(c.counts), 1_500);
    const counts = { ...c.counts };
    c.stop();
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    expect({ commits: counts.commits, setAlarm: counts.alarmWrites, deleteAlarm: counts.alarmDeletes, fires: counts.alarmFires }).toEqual({
      commits: 4,
      setAlarm: 1,
      deleteAlarm: 1,
      fires: 0,
    });
    // Shipped whole: listed, indexed, audited, bundled.
    const row = await env.DB.prepare("SELECT status FROM runs WHERE run_id = ?1").bind(runId).first<{ status: string }>();
    expect(row).toEqual({ status: "completed" });
    const audit = await call(
      app,
      "GET",
      `/api/admin/audit?agent_id=${agentId}&date=${new Date().toISOString().slice(0, 10)}`,
      undefined,
      ADMIN,
    );
    expect(audit.text).toContain(`"run_id":"${runId}"`);
    expect(await env.AUDIT.head(`agents/${agentId}/runs/${runId}/bundle.jsonl`)).not.toBeNull();
  });

  it("ISSUE23 a session that never asked for an environment variable reads neither env_requests nor, within SETUP_CACHE_MS, setup_records from D1", async () => {
    const agentId = `d1reads-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const turn = conversation(app, agentId, "d1reads-1");
    await turn();
    const seen = recordD1();
    await turn();
    await turn();
    expect(seen.filter((q) => q.includes("env_requests"))).toEqual([]);
    expect(seen.filter((q) => q.startsWith("SELECT") && q.includes("setup_records"))).toEqual([]);
  });

  it("ISSUE23 the configured answer: 'configured' is kept for good, 'not configured' for SETUP_CACHE_MS, and a save through this isolate is seen at once", async () => {
    const agentId = `setup-cache-${crypto.randomUUID().slice(0, 8)}`;
    const seen = recordD1();
    const t0 = 1_000_000;
    expect(await hasServiceCommands(env.DB, agentId, t0)).toBe(false);
    expect(await hasServiceCommands(env.DB, agentId, t0 + SETUP_CACHE_MS - 1)).toBe(false);
    expect(seen).toEqual(["SELECT 1 AS one FROM setup_records WHERE agent_id = ?1 AND kind = 'service_commands' LIMIT 1"]);
    // A save made elsewhere is read once the bound has passed.
    await env.DB.prepare(
      "INSERT INTO setup_records (agent_id, kind, payload, session_id, tool_call_id, updated_at) VALUES (?1, 'service_commands', '[]', 's', 't', 'now')",
    )
      .bind(agentId)
      .run();
    expect(await hasServiceCommands(env.DB, agentId, t0 + SETUP_CACHE_MS)).toBe(true);
    expect(seen.filter((q) => q.startsWith("SELECT") && q.includes("setup_records")).length).toBe(2);
    expect(await hasServiceCommands(env.DB, agentId, t0 + 100 * SETUP_CACHE_MS)).toBe(true);
    expect(seen.filter((q) => q.startsWith("SELECT") && q.includes("setup_records")).length).toBe(2);
    // A save through this isolate: no read at all.
    const other = `${agentId}-b`;
    expect(await hasServiceCommands(env.DB, other, t0)).toBe(false);
    noteServiceCommandsSaved(other);
    expect(await hasServiceCommands(env.DB, other, t0 + 1)).toBe(true);
    expect(seen.filter((q) => q.startsWith("SELECT") && q.includes("setup_records")).length).toBe(3);
  });
});
