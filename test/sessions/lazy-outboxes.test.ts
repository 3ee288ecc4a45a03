/**
 * Issue 23 "tables a fresh object rarely needs created lazily" (D-062): job notifications (`notify_outbox`),
 * automation completions (`automation_completions`) and chat-channel replies (`reply_outbox`) exist in an object
 * only once something was written to them. A fresh session's plain turn — the request, the run, every alarm pass
 * after it — creates none of them and runs no statement naming them (every SqlStorage.exec text in the isolate is
 * recorded, by wrapping the prototype the way test/support/counters.ts does); the first write creates the table
 * in its own transaction; schema v19 drops them where empty and keeps them where they hold rows.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { enqueueReply, nextReplyAt } from "../../src/channels/replies";
import { recordedCompletion } from "../../src/runs/completion";
import { runObjectId } from "../../src/runs/ids";
import { enqueueNotify, nextNotifyAt } from "../../src/scheduler/notify";
import { ensureLazyTables, LAZY_TABLES, lazyTablesPresent } from "../../src/sessions/lazy-tables";
import { SESSION_MIGRATIONS } from "../../src/sessions/schema";
import { automationCompletion, insertAutomationCompletion } from "../../src/sessions/session-runs-store";
import { createSql, migrate } from "../../src/storage/sql";
import { runConfig, uniqueHost } from "../support/config";
import { appFor, call } from "../support/runs";

const NAMES = ["notify_outbox", "automation_completions", "reply_outbox"] as const;
const NAMING = /\b(notify_outbox|automation_completions|reply_outbox)\b/;
const lazyTablesOf = (sql: ReturnType<typeof createSql>) =>
  sql.all<{
    name: string;
  }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('notify_outbox', 'automation_completions', 'reply_outbox') ORDER BY name`.map(
    (r) => r.name,
  );

let undo: (() => void) | null = null;
afterEach(() => {
  undo?.();
  undo = null;
});

/** Every SqlStorage.exec text any object of this isolate runs from now on (all objects share the prototype). */
async function recordSql(): Promise<string[]> {
  const storage = await runInDurableObject(env.SESSIONS.getByName(`lazy-probe-${crypto.randomUUID()}`), (_i, s) => s.storage);
  let owner = storage.sql as object;
  while (!Object.hasOwn(owner, "exec")) owner = Object.getPrototypeOf(owner);
  const descriptor = Object.getOwnPropertyDescriptor(owner, "exec") as PropertyDescriptor;
  const original = descriptor.value as (...a: unknown[]) => unknown;
  const seen: string[] = [];
  Object.defineProperty(owner, "exec", {
    ...descriptor,
    value(this: unknown, ...a: unknown[]) {
      seen.push(String(a[0]));
      return original.apply(this, a);
    },
  });
  undo = () => Object.defineProperty(owner, "exec", descriptor);
  return seen;
}

describe("ISSUE23 job notifications, automation completions and channel replies are created on first write (D-062)", () => {
  it("ISSUE23 a fresh session's plain turn through HTTP, until its alarm has nothing left, creates none of these tables and runs no statement naming them", async () => {
    const agentId = `lazy-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(uniqueHost("ok"), { agentId, agent: { tools: { allow: [] } } }));
    const seen = await recordSql();
    const res = await call(app, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      user: `lazy-user-${crypto.randomUUID().slice(0, 8)}`,
      messages: [{ role: "user", content: "hello" }],
    });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content).toBe("pong");
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(res.headers.get("X-Run-Id") as string) as string));
    for (let i = 0; i < 10 && (await runDurableObjectAlarm(stub)); i++);
    expect(seen.length).toBeGreaterThan(0); // the recorder saw the turn
    expect(seen.filter((q) => NAMING.test(q))).toEqual([]);
    // The run view (it reads the run's completion) answers without them.
    const view = await call(app, "GET", `/v1/runs/${res.headers.get("X-Run-Id")}`);
    expect(view.status).toBe(200);
    expect(view.body.status).toBe("completed");
    expect(view.body.completion).toBeUndefined();
    expect(seen.filter((q) => NAMING.test(q))).toEqual([]);
    expect(await runInDurableObject(stub, (_i, state) => lazyTablesOf(createSql(state.storage.sql)))).toEqual([]);
  });

  it("ISSUE23 each first write creates its table inside its transaction; readers find nothing before and the row after", async () => {
    await runInDurableObject(env.SESSIONS.getByName(`lazy-first-${crypto.randomUUID()}`), async (_i, state) => {
      const sql = createSql(state.storage.sql);
      expect(lazyTablesOf(sql)).toEqual([]);
      expect(nextNotifyAt(sql, 1_000)).toBeNull();
      expect(nextReplyAt(sql)).toBeNull();
      expect(recordedCompletion(sql, "run_1")).toBeNull();
      expect(automationCompletion(sql, "c-1")).toBeUndefined();
      state.storage.transactionSync(() => {
        sql.run`INSERT INTO runs (id, session_id, source, agent_id, status, message_seq, created_at, updated_at)
                VALUES ('run_1', 's', 'job', 'main', 'completed', 1, 'now', 'now')`;
        enqueueNotify(sql, "run_1", {
          channel: "webhook",
          target: "https://hook.test/x",
          webhookId: "msg_1",
          jobId: "j",
          scheduledFor: "2030-01-01T00:00:00.000Z",
          maxAttempts: 1,
          retryBaseMs: 1_000,
          timeoutMs: 1_000,
        });
        enqueueReply(sql, "run_1", { channel: "standard", url: "https://reply.test/x", userId: "u", roomId: "r", inReplyTo: "m" });
        insertAutomationCompletion(sql, {
          completion_id: "c-1",
          run_id: "run_1",
          outcome: "succeeded",
          summary: "done",
          tool_call_id: "call_1",
          recorded_at: "2030-01-01T00:00:01.000Z",
        });
      });
      expect(lazyTablesOf(sql)).toEqual(["automation_completions", "notify_outbox", "reply_outbox"]);
      expect(nextNotifyAt(sql, 1_000)).toBe(0);
      expect(nextReplyAt(sql)).toBe(0);
      expect(recordedCompletion(sql, "run_1")).toEqual({
        status: "recorded",
        completion_id: "c-1",
        outcome: "succeeded",
        summary: "done",
        recorded_at: "2030-01-01T00:00:01.000Z",
      });
      expect(automationCompletion(sql, "c-1")?.tool_call_id).toBe("call_1");
    });
  });

  it("ISSUE23 a lazy table whose creation was rolled back reads as empty, and the next write creates it again", async () => {
    await runInDurableObject(env.SESSIONS.getByName(`lazy-rollback-${crypto.randomUUID()}`), async (_i, state) => {
      const sql = createSql(state.storage.sql);
      expect(() =>
        state.storage.transactionSync(() => {
          ensureLazyTables(sql, "reply_outbox");
          expect(lazyTablesPresent(sql, "reply_outbox")).toBe(true);
          throw new Error("the write after it failed");
        }),
      ).toThrow("the write after it failed");
      expect(lazyTablesOf(sql)).toEqual([]);
      expect(nextReplyAt(sql)).toBeNull(); // believed present, found absent: nothing, and looked up again
      state.storage.transactionSync(() => {
        sql.run`INSERT INTO runs (id, session_id, source, agent_id, status, message_seq, created_at, updated_at)
                VALUES ('run_2', 's', 'telegram', 'main', 'failed', 1, 'now', 'now')`;
        enqueueReply(sql, "run_2", { channel: "standard", url: "https://reply.test/x", userId: "u", roomId: "r", inReplyTo: "m" });
      });
      expect(nextReplyAt(sql)).toBe(0);
    });
  });

  it("ISSUE23 schema v19 keeps these tables where they hold rows and drops them where empty; a table made lazily is the very one its migration made", async () => {
    const v18 = SESSION_MIGRATIONS.slice(0, 18);
    const made = new Map<string, string>();
    for (const used of [true, false]) {
      await runInDurableObject(env.SESSIONS.getByName(`lazy-v18-${used}-${crypto.randomUUID()}`), async (_i, state) => {
        const sql = createSql(state.storage.sql);
        await state.storage.deleteAll();
        expect(migrate(state.storage, sql, v18, new Map())).toBe(18); // the object as an older version left it
        for (const n of NAMES) made.set(n, sql.one<{ sql: string }>`SELECT sql FROM sqlite_master WHERE name = ${n}`?.sql as string);
        if (used) {
          sql.run`INSERT INTO runs (id, session_id, source, agent_id, status, message_seq, created_at, updated_at)
                  VALUES ('run_3', 's', 'job', 'main', 'queued', 1, 'now', 'now')`;
          enqueueReply(sql, "run_3", { channel: "standard", url: "https://reply.test/x", userId: "u", roomId: "r", inReplyTo: "m" });
        }
        expect(migrate(state.storage, sql, SESSION_MIGRATIONS, new Map())).toBe(SESSION_MIGRATIONS.length);
        expect(lazyTablesOf(sql)).toEqual(used ? ["reply_outbox"] : []);
        if (used) {
          expect(sql.one`SELECT run_id, status FROM reply_outbox`).toEqual({ run_id: "run_3", status: "pending" });
          return;
        }
        // Created again by their writers, each is the table its migration made, statement for statement.
        for (const group of NAMES) ensureLazyTables(sql, group);
        for (const n of NAMES) expect(sql.one<{ sql: string }>`SELECT sql FROM sqlite_master WHERE name = ${n}`?.sql).toBe(made.get(n));
      });
    }
    expect(Object.keys(LAZY_TABLES)).toEqual(["memory", ...NAMES]);
  });
});
