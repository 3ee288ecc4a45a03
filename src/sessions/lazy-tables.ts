/**
 * Tables a session object creates only when it first writes to them (issue 23, D-055): a plain chat turn
 * never writes session memory (it is written by NOTES `remember`/`condense_*` and by compaction), so a brand-new
 * object does not pay for the `memory` table and its FTS5 index (one virtual table, five shadow tables).
 *
 * Schema v16 drops them from any object where they are empty (a brand-new object's schema snapshot therefore
 * lacks them); an object whose memory holds rows keeps them. Writers call `ensureLazyTables` first (CREATE … IF
 * NOT EXISTS, the very statements of schema v5); readers ask `lazyTablesPresent` and read nothing when absent.
 * Whether they exist is learned once per object (one `sqlite_master` read) and kept per database. No migration
 * after v5 may touch these tables (test/sessions/fresh-turn.test.ts holds it): a lazy table changes only here.
 */
import { databaseOf, type Sql, SqlError } from "../storage/sql";

/** Each lazy group: the name of its first table and its statements, exactly schema v5's (IF NOT EXISTS). */
export const LAZY_TABLES = {
  memory: [
    `CREATE TABLE IF NOT EXISTS memory (
     id TEXT PRIMARY KEY,
     kind TEXT NOT NULL CHECK (kind IN ('summary', 'decision', 'note')),
     text TEXT NOT NULL,
     from_seq INTEGER,
     to_seq INTEGER,
     created_at TEXT NOT NULL
   )`,
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(id UNINDEXED, text, tokenize = 'unicode61')",
  ],
} as const;

/** A group of lazily created tables (named after its first table). */
export type LazyGroup = keyof typeof LAZY_TABLES;

const known = new WeakMap<object, Map<LazyGroup, boolean>>();

function knownOf(sql: Sql): Map<LazyGroup, boolean> {
  const db = databaseOf(sql);
  let m = known.get(db);
  if (!m) {
    m = new Map();
    known.set(db, m);
  }
  return m;
}

/** True when the object has the group's tables (learned once per object, then kept). */
export function lazyTablesPresent(sql: Sql, group: LazyGroup): boolean {
  const m = knownOf(sql);
  let present = m.get(group);
  if (present === undefined) {
    present = sql.one<{ x: number }>`SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = ${group}` !== undefined;
    m.set(group, present);
  }
  return present;
}

/** Creates the group's tables if they do not exist yet (before the first write). */
export function ensureLazyTables(sql: Sql, group: LazyGroup): void {
  const m = knownOf(sql);
  if (m.get(group) === true) return;
  const statements = LAZY_TABLES[group];
  sql.script(statements.join(";\n"), statements.length);
  // Not `true`: a transaction that rolls the CREATE back must not leave us believing it exists; the next read looks.
  m.delete(group);
}

/**
 * `read()` when the group's tables exist, else `absent` (nothing was ever written). A table that vanished under a
 * kept belief (its CREATE was rolled back) reads as absent and is looked up again next time.
 */
export function readLazy<T>(sql: Sql, group: LazyGroup, absent: T, read: () => T): T {
  if (!lazyTablesPresent(sql, group)) return absent;
  try {
    return read();
  } catch (err) {
    if (!(err instanceof SqlError && /no such table/.test(err.message))) throw err;
    knownOf(sql).delete(group);
    return absent;
  }
}

/** Schema v16's step: drops the memory tables where they hold no row (a brand-new object, an unused one). */
export function dropMemoryIfEmpty(sql: Sql): void {
  if (sql.one`SELECT 1 AS x FROM memory LIMIT 1` !== undefined) {
    knownOf(sql).delete("memory"); // kept: looked up again on first read
    return;
  }
  sql.script("DROP TABLE IF EXISTS memory_fts;\nDROP TABLE IF EXISTS memory", 2);
  knownOf(sql).set("memory", false);
}
