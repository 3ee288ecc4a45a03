/**
 * Issue 23's counts, measured (D-056, docs/capacity.md): what a plain turn asks of the platform — R2 puts, D1
 * statements, alarm writes, SQLite commits — counted by test/support/counters.ts for real turns through the HTTP
 * surface (the app, every SessionDO, local R2 and D1; the model mocked at the network boundary), background
 * shipping included (counting runs until nothing has moved for 5 s).
 *
 * The first test proves the instrument on known operations, with exact values. The second runs COUNT_TURNS plain
 * turns (vitest.config.ts binding; `npm run bench -- --only=counts` sets it) through `/v1/chat/completions` in 8
 * long-lived conversations, then through `POST /v1/runs` (a fresh session per turn), and prints the counts per
 * 1,000 turns on one line (`ISSUE23_COUNTS {...}`) for bench/counts.bench.ts. It asserts what holds of any turn
 * design (every turn answered, indexed and audited; at least one commit per turn), never
 * today's figures: those are what the issue changes.
 */

import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { SessionDO } from "../../src/sessions/SessionDO";
import { runConfig, uniqueHost } from "../support/config";
import { type Counter, type Counts, per1000, quiescent, startCounting } from "../support/counters";
import { ADMIN, type App, call, postRunAndWait } from "../support/runs";

const TURNS = Math.max(8, Number((env as unknown as { COUNT_TURNS?: string }).COUNT_TURNS ?? "24") || 24);
const CONVERSATIONS = 8;
/**
 * Counting ends once nothing has moved for this long: longer than any background window (log segments flush at
 * most every 2 s per isolate; issue 23 ships index rows and audit segments within a couple of seconds). The checks
 * after it (every turn indexed and audited) fail if shipping was still under way.
 */
const QUIET_MS = 5_000;

let counter: Counter | null = null;
afterEach(() => {
  counter?.stop();
  counter = null;
});

/** A counter over this isolate, started from inside a Durable Object (for its storage's prototypes). */
async function count(): Promise<Counter> {
  const storage = await runInDurableObject(env.SESSIONS.getByName(`counts-probe-${crypto.randomUUID()}`), (_i, state) => state.storage);
  counter = startCounting(storage, [SessionDO]);
  return counter;
}

describe("ISSUE23 the counting instrument", () => {
  it("ISSUE23 counts R2 operations, D1 calls and statements, SQLite statements, commits per event-loop turn, alarm writes and fires exactly", async () => {
    const stub = env.SESSIONS.getByName(`counts-unit-${crypto.randomUUID()}`);
    await runInDurableObject(stub, () => {}); // the object exists (its schema) before counting starts
    const c = await count();
    await runInDurableObject(stub, async (_i, state) => {
      const sql = state.storage.sql;
      // One turn: four statements, three of them writes → one implicit commit.
      sql.exec("CREATE TABLE IF NOT EXISTS counted (n INTEGER)");
      sql.exec("INSERT INTO counted VALUES (1)");
      sql.exec("INSERT INTO counted VALUES (2)");
      sql.exec("SELECT n FROM counted").toArray();
      // I/O ends the turn; the next write commits on its own, and a microtask does not end a turn.
      await env.AUDIT.put(`counts-unit/${crypto.randomUUID()}`, "x");
      await env.AUDIT.head("counts-unit/none");
      sql.exec("INSERT INTO counted VALUES (3)");
      await Promise.resolve();
      sql.exec("INSERT INTO counted VALUES (4)");
      await env.AUDIT.head("counts-unit/none");
      // A transactionSync opening a turn opens its implicit transaction (one commit); a write after it in the same
      // turn, a second transactionSync (a savepoint) and an alarm write all join that commit.
      state.storage.transactionSync(() => {
        sql.exec("INSERT INTO counted VALUES (5)");
        sql.exec("INSERT INTO counted VALUES (6)");
      });
      sql.exec("INSERT INTO counted VALUES (7)");
      state.storage.transactionSync(() => sql.exec("INSERT INTO counted VALUES (8)"));
      await state.storage.setAlarm(Date.now() + 3_600_000);
      await env.AUDIT.head("counts-unit/none");
      // A new turn: an alarm write alone is a commit.
      await state.storage.deleteAlarm();
    });
    // D1: one statement, then one batch of a schema statement and a write.
    await env.DB.prepare("SELECT 1 AS one").first();
    await env.DB.batch([
      env.DB.prepare("CREATE TABLE IF NOT EXISTS counted_d1 (n INTEGER)"),
      env.DB.prepare("INSERT INTO counted_d1 VALUES (?)").bind(1),
    ]);
    expect({ ...c.counts }).toEqual({
      r2Puts: 1,
      r2Reads: 3,
      r2Deletes: 0,
      d1Calls: 2,
      d1Statements: 3,
      d1Writes: 2,
      sqlStatements: 10,
      sqlWrites: 9,
      commits: 4,
      alarmWrites: 1,
      alarmDeletes: 1,
      alarmFires: 0,
      consoleLines: 0,
    } satisfies Counts);
    // An alarm fire of a SessionDO (whatever its alarm then does is counted too).
    await runInDurableObject(stub, (_i, state) => state.storage.setAlarm(Date.now() + 60_000));
    await runDurableObjectAlarm(stub);
    expect(c.counts.alarmFires).toBe(1);
    c.stop();
    // Stopped: nothing counts any more.
    const reads = c.counts.r2Reads;
    await env.AUDIT.head("counts-unit/none");
    expect(c.counts.r2Reads).toBe(reads);
  });
});

/** Runs `turns` through `once(conversation)` over `CONVERSATIONS` clients side by side; returns the run ids. */
async function drive(turns: number, once: (conversation: number) => Promise<string>): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONVERSATIONS }, async (_, c) => {
      while (next < turns) {
        next++;
        ids.push(await once(c));
      }
    }),
  );
  return ids;
}

/** The counts of `turns` turns, background shipping included, per 1,000 turns. */
async function measure(c: Counter, turns: number, once: (conversation: number) => Promise<string>) {
  c.reset();
  const ids = await drive(turns, once);
  await quiescent(() => JSON.stringify(c.counts), QUIET_MS);
  return { ids, counts: { ...c.counts }, per1000: per1000(c.counts, ids.length) };
}

describe("ISSUE23 counts per 1,000 plain turns", () => {
  it("ISSUE23 plain turns through /v1/chat/completions (8 conversations) and POST /v1/runs (fresh sessions): R2 puts, D1 statements, alarm writes and commits per 1,000 turns, printed", {
    timeout: 300_000,
  }, async () => {
    const agentId = `counts-${crypto.randomUUID().slice(0, 8)}`;
    // The app prints its request lines to the console, as in production (not to R2: the R2 puts stay the objects'),
    // so that `consoleLines` counts what a turn prints: the Worker's `http.request` line and the SessionDO's (D-068).
    const config = runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } });
    const app: App = createApp({ config, logger: createLogger("info") });
    const completion = async (conversation: number): Promise<string> => {
      const res = await call(app, "POST", "/v1/chat/completions", {
        model: `agent:${agentId}`,
        user: `conversation-${conversation}`,
        messages: [{ role: "user", content: "hello" }],
      });
      expect(res.status).toBe(200);
      expect(res.body.choices[0].message.content).toBe("pong");
      return res.headers.get("X-Run-Id") as string;
    };
    const fresh = async (): Promise<string> => {
      const res = await postRunAndWait(app, { agent_id: agentId, message: "hello" });
      const view = (await res.json()) as { id: string; status: string; output: string };
      expect(res.status).toBe(200);
      expect(view).toMatchObject({ status: "completed", output: "pong" });
      return view.id;
    };

    const c = await count();
    // Each conversation exists first (its session row and object): the measured turns are a conversation's next turns.
    await drive(CONVERSATIONS, completion);
    await quiescent(() => JSON.stringify(c.counts), QUIET_MS);
    const conversations = await measure(c, TURNS, completion);
    const freshSessions = await measure(c, Math.max(8, Math.round(TURNS / 3)), fresh);
    c.stop();

    for (const m of [conversations, freshSessions]) {
      // What any design of the turn does: at least one commit per turn, and R2 writes.
      expect(m.counts.commits).toBeGreaterThanOrEqual(m.ids.length);
      expect(m.counts.r2Puts).toBeGreaterThan(0);
      // Every turn shipped: its D1 index row final, its events in the audit log.
      const statuses: string[] = [];
      for (let i = 0; i < m.ids.length; i += 50) {
        const ids = m.ids.slice(i, i + 50); // D1 binds at most 100 parameters
        const { results } = await env.DB.prepare(`SELECT status FROM runs WHERE run_id IN (${ids.map(() => "?").join(",")})`)
          .bind(...ids)
          .all<{ status: string }>();
        statuses.push(...results.map((r) => r.status));
      }
      expect(statuses).toEqual(m.ids.map(() => "completed"));
    }
    const audit = await call(
      app,
      "GET",
      `/api/admin/audit?agent_id=${agentId}&date=${new Date().toISOString().slice(0, 10)}`,
      undefined,
      ADMIN,
    );
    expect(audit.status).toBe(200);
    for (const id of [...conversations.ids, ...freshSessions.ids]) expect(audit.text).toContain(id);

    console.log(
      `ISSUE23_COUNTS ${JSON.stringify({
        conversations: {
          endpoint: "POST /v1/chat/completions (user = conversation)",
          turns: conversations.ids.length,
          per_1000_turns: conversations.per1000,
        },
        fresh_sessions: { endpoint: "POST /v1/runs, Prefer: wait", turns: freshSessions.ids.length, per_1000_turns: freshSessions.per1000 },
      })}`,
    );
  });
});
