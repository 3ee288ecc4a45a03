/**
 * Issue 23 "tables a fresh object rarely needs created lazily" (D-055): a brand-new session object has no memory
 * tables (one table, one FTS5 index of five shadow tables) until it first remembers something, so its first
 * plain turn runs fewer SQL statements; an object made by an older version keeps its memory through schema v16.
 * Statements are counted exactly through `sqlWork` (every call src/ makes into SQLite, each schema statement).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { buildRunSpec } from "../../src/runs/spec";
import { ensureLazyTables, LAZY_TABLES, lazyTablesPresent } from "../../src/sessions/lazy-tables";
import { latestSummary, recall, remember } from "../../src/sessions/memory";
import { SESSION_MIGRATIONS } from "../../src/sessions/schema";
import { createSql, migrate, sqlWork } from "../../src/storage/sql";
import { runConfig, uniqueHost } from "../support/config";

const identityFor = (name: string) => ({ sessionKey: `agent:main:http:${name}:dm:u`, agentId: "main" });
const stubFor = (name: string) => env.SESSIONS.getByName(identityFor(name).sessionKey);
const tables = (sql: ReturnType<typeof createSql>) =>
  sql.all<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory%' ORDER BY name`.map((r) => r.name);

/** Statements a fresh object runs for one plain turn, until its alarm has nothing left to do. */
async function firstTurn(name: string): Promise<{ statements: number; execs: number }> {
  const stub = stubFor(name);
  const spec = buildRunSpec(runConfig(uniqueHost("ok")), "main", "http");
  const before = { ...sqlWork };
  const { done } = await stub.enqueueAndAwait(
    identityFor(name),
    { message: "hello", source: "http", limits: { maxTurns: 100, maxBytes: 1_000_000 }, spec },
    15_000,
  );
  expect(done?.view.status).toBe("completed");
  // D-061: the shipping pass's timer settles the alarm when it is done (cleared when nothing is left); wait for that
  // first, so the count does not depend on whether the test's alarm call or the timer comes first.
  for (let i = 0; i < 60 && (await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())) !== null; i++)
    await new Promise((r) => setTimeout(r, 50));
  for (let i = 0; i < 10 && (await runDurableObjectAlarm(stub)); i++);
  return { statements: sqlWork.statements - before.statements, execs: sqlWork.execs - before.execs };
}

describe("ISSUE23 a fresh object's first plain turn", () => {
  it("ISSUE23 figure: a fresh object's first plain turn, its SQL statements counted exactly, and its schema has no memory tables", async () => {
    await firstTurn(`fresh-warm-${crypto.randomUUID().slice(0, 8)}`); // the isolate records its schema snapshot once
    const name = `fresh-${crypto.randomUUID().slice(0, 8)}`;
    const m = await firstTurn(name);
    console.log(`ISSUE23 fresh object, first plain turn: ${m.statements} SQL statements in ${m.execs} calls into SQLite`);
    // Before issue 23: 156 statements in 126 calls (the schema snapshot: 31 statements in one call). The lazy memory
    // tables (two fewer schema statements, one look-up instead of memory reads) and one statement instead of two per
    // transcript row written took it to 150 in 122; the index outbox (D-052) then adds its queue rows and the shipping
    // pass's reads and deletes, which buy one D1 batch per window instead of a D1 write per change: 176 in 141.
    // D-061: the run started in its storing transaction and ended in one, no env read for a generation that never
    // asked, the bundle marks in one commit, and no watchdog alarm run after the timer's pass: 166 in 130. D-062: the
    // job-notification, channel-reply and automation-completion tables are lazy, so no pass reads them: 154 in 121.
    // D-064: the shipping pass records in one commit — no `audit_pending` row written and read back before the put,
    // the outbox rows of a segment deleted by one range statement instead of one per event: 146 in 113.
    // D-065/D-066: the session row read once per object, not a dozen times per turn, the run's row not read again
    // where the engine has just read it, and a reply's NOTES applied without reading the checkpoint's recent messages
    // back twice. All of them: 123 in 90. D-069: the session is listed with its run in one D1 batch once the run has
    // stopped (one read of the days whose audit stream that batch lists), and a send stops at a short page of the
    // index outbox instead of reading an empty one after it (the listing's and the shipping pass's): 122 in 89.
    expect(m).toEqual({ statements: 122, execs: 89 });
    expect(
      await runInDurableObject(stubFor(name), (_i: unknown, state: DurableObjectState) => tables(createSql(state.storage.sql))),
    ).toEqual([]);
  });

  it("ISSUE23 remembering creates the memory tables on first write; retrieval then finds the item", async () => {
    const stub = stubFor(`fresh-mem-${crypto.randomUUID().slice(0, 8)}`);
    await runInDurableObject(stub, async (_i: unknown, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      expect(tables(sql)).toEqual([]);
      expect(latestSummary(sql, 0)).toBeUndefined();
      expect(recall(sql, "deploy pipeline")).toEqual([]);
      await remember(sql, { kind: "note", text: "the deploy pipeline needs a bigger pool", from_seq: null, to_seq: null }, new Date());
      expect(tables(sql)).toContain("memory");
      expect(tables(sql)).toContain("memory_fts");
      expect(recall(sql, "deploy pipeline").map((r) => r.text)).toEqual(["the deploy pipeline needs a bigger pool"]);
    });
  });

  it("ISSUE23 an object made by v15 keeps its memory through v16; an unused one loses only empty tables, and gets them back when it writes", async () => {
    const v15 = SESSION_MIGRATIONS.slice(0, 15);
    for (const used of [true, false]) {
      await runInDurableObject(
        stubFor(`fresh-old-${used}-${crypto.randomUUID().slice(0, 8)}`),
        async (_i: unknown, state: DurableObjectState) => {
          const sql = createSql(state.storage.sql);
          await state.storage.deleteAll();
          expect(migrate(state.storage, sql, v15, new Map())).toBe(15); // the object as an older version left it
          const v5Columns = sql.all`SELECT name, type, "notnull", pk FROM pragma_table_info('memory')`;
          if (used) await remember(sql, { kind: "decision", text: "ship on Fridays", from_seq: null, to_seq: null }, new Date());
          expect(migrate(state.storage, sql, SESSION_MIGRATIONS, new Map())).toBe(SESSION_MIGRATIONS.length);
          if (used) {
            expect(tables(sql)).toContain("memory_fts");
            expect(recall(sql, "Fridays").map((r) => r.text)).toEqual(["ship on Fridays"]);
            return;
          }
          expect(tables(sql)).toEqual([]);
          expect(recall(sql, "Fridays")).toEqual([]);
          await remember(sql, { kind: "decision", text: "ship on Fridays", from_seq: null, to_seq: null }, new Date());
          expect(recall(sql, "Fridays").map((r) => r.text)).toEqual(["ship on Fridays"]);
          // The lazily made table is schema v5's, column for column.
          expect(sql.all`SELECT name, type, "notnull", pk FROM pragma_table_info('memory')`).toEqual(v5Columns);
        },
      );
    }
  });

  it("ISSUE23 memory tables whose creation was rolled back read as empty, and the next write creates them again", async () => {
    const stub = stubFor(`fresh-rollback-${crypto.randomUUID().slice(0, 8)}`);
    await runInDurableObject(stub, async (_i: unknown, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      expect(() =>
        state.storage.transactionSync(() => {
          ensureLazyTables(sql, "memory");
          expect(lazyTablesPresent(sql, "memory")).toBe(true);
          throw new Error("the write after it failed");
        }),
      ).toThrow("the write after it failed");
      expect(tables(sql)).toEqual([]);
      expect(recall(sql, "deploy")).toEqual([]); // believed present, found absent: empty, and looked up again
      expect(latestSummary(sql, 0)).toBeUndefined();
      await remember(sql, { kind: "note", text: "deploy on Mondays", from_seq: null, to_seq: null }, new Date());
      expect(recall(sql, "deploy").map((r) => r.text)).toEqual(["deploy on Mondays"]);
    });
  });

  it("ISSUE23 no migration after the one that made a lazy table touches it (they change only in src/sessions/lazy-tables.ts)", () => {
    // Each group and the schema version that made it (v5 memory; D-062: v11, v12, v13).
    const madeAt = { memory: 5, notify_outbox: 11, automation_completions: 12, reply_outbox: 13 };
    expect(Object.keys(LAZY_TABLES)).toEqual(Object.keys(madeAt));
    for (const [group, version] of Object.entries(madeAt)) {
      const names = LAZY_TABLES[group as keyof typeof LAZY_TABLES].map((s) => /(?:TABLE|VIRTUAL TABLE) IF NOT EXISTS (\w+)/.exec(s)?.[1]);
      expect(names[0]).toBe(group);
      const made = SESSION_MIGRATIONS[version - 1];
      expect(typeof made === "string" && names.every((n) => new RegExp(`CREATE (VIRTUAL )?TABLE ${n}\\b`).test(made))).toBe(true);
      const later = SESSION_MIGRATIONS.slice(version).filter((m): m is string => typeof m === "string");
      expect(later.filter((m) => names.some((n) => new RegExp(`\\b${n}\\b`).test(m)))).toEqual([]);
    }
  });
});
