/**
 * SessionDO storage foundation: a SQLite-backed Durable Object whose schema is
 * applied once, before any RPC, and survives eviction; the typed SQL helper.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { SessionDO } from "../../src/sessions/SessionDO";
import { SESSION_MIGRATIONS } from "../../src/sessions/schema";
import { createSql, migrate, SqlError } from "../../src/storage/sql";
import { describeSession } from "../support/session";

const stub = (name: string) => env.SESSIONS.getByName(name);

describe("SessionDO", () => {
  it("applies the latest schema before its first RPC", async () => {
    const info = await describeSession(stub("agent:main:http:room-1:dm:user-1"));
    expect(info.schemaVersion).toBe(SESSION_MIGRATIONS.length);
    expect(new Date(info.createdAt).toISOString()).toBe(info.createdAt);
  });

  it("storage survives eviction; the schema is not re-applied", async () => {
    const s = stub("agent:main:http:room-2:dm:user-2");
    const before = await describeSession(s);
    await runInDurableObject(s, (_instance: SessionDO, state) => {
      state.storage.sql.exec("INSERT INTO session_meta (key, value) VALUES ('probe', 'kept')");
    });
    await evictDurableObject(s);
    const after = await describeSession(s);
    expect(after).toEqual(before);
    await runInDurableObject(s, (_instance: SessionDO, state) => {
      expect(state.storage.sql.exec("SELECT value FROM session_meta WHERE key = 'probe'").one()).toEqual({ value: "kept" });
      expect(state.storage.sql.exec("SELECT version FROM _schema").one()).toEqual({ version: SESSION_MIGRATIONS.length });
    });
  });

  it("only the RPC methods are public: private state does not leak onto the stub", async () => {
    await runInDurableObject(stub("agent:main:http:room-3:dm:user-3"), (instance: SessionDO) => {
      // ctx and env come from the DurableObject base class; the object's own state is #private.
      expect(Object.keys(instance).sort()).toEqual(["ctx", "env"]);
    });
  });
});

describe("typed SQL helper", () => {
  it("binds values as parameters (never spliced into SQL)", async () => {
    await runInDurableObject(stub("sql-helper-1"), (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      sql.script("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)");
      const hostile = "x'); DROP TABLE t; --";
      expect(sql.run`INSERT INTO t (k, v) VALUES (${hostile}, ${1})`).toBeGreaterThan(0);
      expect(sql.run`INSERT INTO t (k, v) VALUES (${hostile}, ${2}) ON CONFLICT (k) DO NOTHING`).toBe(0);
      expect(sql.all<{ k: string; v: number }>`SELECT k, v FROM t`).toEqual([{ k: hostile, v: 1 }]);
      expect(sql.one<{ k: string }>`SELECT k FROM t WHERE k = ${"missing"}`).toBeUndefined();
    });
  });

  it("a failing query is rethrown as SqlError carrying the query text, not the values", async () => {
    await runInDurableObject(stub("sql-helper-2"), (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      let caught: unknown;
      try {
        sql.all`SELECT * FROM no_such_table WHERE secret = ${"sk-do-not-print-me"}`;
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(SqlError);
      expect((caught as SqlError).query).toBe("SELECT * FROM no_such_table WHERE secret = ?");
      expect((caught as SqlError).message).toContain("no such table: no_such_table");
      expect((caught as SqlError).message).not.toContain("sk-do-not-print-me");
    });
  });

  it("migrate() applies each migration once, in order, and refuses a schema newer than the code", async () => {
    await runInDurableObject(stub("sql-helper-3"), (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      const steps = ["CREATE TABLE a (x INTEGER)", "ALTER TABLE a ADD COLUMN y INTEGER"];
      // The object already migrated its own schema; reuse its _schema table under a fresh counter.
      state.storage.sql.exec("DELETE FROM _schema");
      expect(migrate(state.storage, sql, steps)).toBe(2);
      expect(migrate(state.storage, sql, steps)).toBe(2);
      expect(sql.all`PRAGMA table_info(a)`.map((c) => c.name)).toEqual(["x", "y"]);
      expect(() => migrate(state.storage, sql, steps.slice(0, 1))).toThrow(
        "storage schema version 2 is newer than this code knows (1); refusing to run",
      );
    });
  });

  it("a failing migration leaves the version where it was (each step is one transaction)", async () => {
    await runInDurableObject(stub("sql-helper-4"), (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      state.storage.sql.exec("DELETE FROM _schema");
      expect(() => migrate(state.storage, sql, ["CREATE TABLE b (x INTEGER)", "CREATE TABLE c (x INTEGER); SELECT * FROM nope"])).toThrow(
        SqlError,
      );
      expect(sql.one`SELECT version FROM _schema`).toEqual({ version: 1 });
      expect(sql.all`SELECT name FROM sqlite_master WHERE name = 'c'`).toEqual([]);
    });
  });
});

describe("new-object schema fast path (issue 12)", () => {
  const dump = (sql: ReturnType<typeof createSql>) =>
    sql.all<{ type: string; name: string; tbl_name: string; sql: string | null }>`
      SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name <> '_schema' ORDER BY type, name`;

  it("a brand-new object given the recorded snapshot has exactly the schema of every migration applied in turn", async () => {
    // v1–v15: since v16 a new object's schema has no memory tables (created when first written, D-055), so the
    // FTS5 virtual table this test replays is the one of the list as it stood before v16.
    const WITH_FTS5 = SESSION_MIGRATIONS.slice(0, 15);
    await runInDurableObject(stub("schema-fast-path-1"), async (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      const snapshots = new Map();
      // Empty the object (deleteAll drops every table), then the step-by-step path, which records the snapshot.
      await state.storage.deleteAll();
      expect(dump(sql)).toEqual([]);
      expect(migrate(state.storage, sql, WITH_FTS5, snapshots)).toBe(WITH_FTS5.length);
      const stepwise = dump(sql);
      expect(stepwise.filter((r) => r.type === "table").length).toBeGreaterThan(20);
      const snapshot = snapshots.get(WITH_FTS5) as string[];
      expect(snapshot.some((s) => s.startsWith("CREATE VIRTUAL TABLE"))).toBe(true);
      expect(snapshot.some((s) => s.startsWith("CREATE TRIGGER"))).toBe(true);
      // Empty again: this time the snapshot path (one transaction), the result identical, column for column.
      await state.storage.deleteAll();
      snapshots.set(WITH_FTS5, [...snapshot, "CREATE TABLE fast_path_marker (x INTEGER)"]);
      expect(migrate(state.storage, sql, WITH_FTS5, snapshots)).toBe(WITH_FTS5.length);
      expect(sql.all`SELECT name FROM sqlite_master WHERE name = 'fast_path_marker'`).toHaveLength(1); // it took the fast path
      state.storage.sql.exec("DROP TABLE fast_path_marker");
      expect(dump(sql)).toEqual(stepwise);
      expect(sql.one`SELECT version FROM _schema`).toEqual({ version: WITH_FTS5.length });
      // The schema works: FTS5 and the size triggers included.
      state.storage.sql.exec("INSERT INTO memory_fts (id, text) VALUES ('m1', 'hello fast path')");
      expect(state.storage.sql.exec("SELECT id FROM memory_fts WHERE memory_fts MATCH 'fast'").toArray()).toEqual([{ id: "m1" }]);
    });
  });

  it("migrations that seed rows are never snapshotted: every new object takes the steps", async () => {
    await runInDurableObject(stub("schema-fast-path-3"), async (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      const snapshots = new Map();
      const seeding = ["CREATE TABLE seeded (x INTEGER)", "INSERT INTO seeded (x) VALUES (1)"];
      await state.storage.deleteAll();
      expect(migrate(state.storage, sql, seeding, snapshots)).toBe(2);
      expect(snapshots.has(seeding)).toBe(false);
      const plain = ["CREATE TABLE unseeded (x INTEGER)"];
      await state.storage.deleteAll();
      expect(migrate(state.storage, sql, plain, snapshots)).toBe(1);
      expect(snapshots.get(plain)).toEqual(["CREATE TABLE unseeded (x INTEGER)"]);
    });
  });

  it("an object that already has tables never takes the fast path, even at version 0", async () => {
    await runInDurableObject(stub("schema-fast-path-2"), (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      const snapshots = new Map([[SESSION_MIGRATIONS, ["CREATE TABLE must_not_exist (x INTEGER)"]]]);
      state.storage.sql.exec("DELETE FROM _schema");
      const steps = ["CREATE TABLE fp_a (x INTEGER)"];
      snapshots.set(steps, ["CREATE TABLE must_not_exist (x INTEGER)"]);
      expect(migrate(state.storage, sql, steps, snapshots)).toBe(1);
      expect(sql.all`SELECT name FROM sqlite_master WHERE name = 'must_not_exist'`).toEqual([]);
    });
  });
});

describe("live generation size (maxTurns/maxBytes checks read one row)", () => {
  it("the trigger-kept counters equal a full recount after inserts, redaction updates, archiving deletes, /new and /resume", async () => {
    const { appendMessage, generationSize } = await import("../../src/sessions/transcript");
    const identity = { sessionKey: "agent:main:http:size-room:dm:size-user", agentId: "main" };
    const s = stub(identity.sessionKey);
    const limits = { maxTurns: 3, maxBytes: 1_000_000 };
    const first = await s.enqueueMessage(identity, { message: "my key is sk-abcdefghij", source: "http", limits });
    await s.enqueueMessage(identity, { message: "klmnopqrstuvwxyz123456 thanks", source: "http", limits }); // rewrites the previous row
    // An assistant row as the run engine stores one (its appendTranscript host call is appendMessage).
    await runInDurableObject(s, (_i: SessionDO, state) => {
      const row = { session_id: first.sessionId, role: "assistant" as const, content: "Noted — 中文 ✓", run_id: first.runId };
      appendMessage(createSql(state.storage.sql), row, new Date());
    });
    for (let i = 0; i < 4; i++) await s.enqueueMessage(identity, { message: `turn ${i}`, source: "http", limits }); // archives the oldest turns
    const fresh = await s.newSession(identity);
    if (!fresh.ok) throw new Error("newSession failed");
    await s.enqueueMessage(identity, { message: "in the new generation", source: "http", limits });
    await s.resumeSession(identity, first.sessionId); // re-imports the archived rows
    await runInDurableObject(s, (_i: SessionDO, state) => {
      const sql = createSql(state.storage.sql);
      for (const { session_id } of sql.all<{ session_id: string }>`SELECT session_id FROM generations`) {
        const recount = sql.one<{ messages: number; user_turns: number; bytes: number }>`
          SELECT COUNT(*) AS messages, COALESCE(SUM(role = 'user'), 0) AS user_turns, COALESCE(SUM(LENGTH(CAST(content AS BLOB))), 0) AS bytes
          FROM transcript WHERE session_id = ${session_id}`;
        expect(generationSize(sql, session_id)).toEqual({
          messages: recount?.messages,
          userTurns: recount?.user_turns,
          bytes: recount?.bytes,
        });
      }
      expect(generationSize(sql, first.sessionId).userTurns).toBeGreaterThan(0);
    });
  });
});
