/**
 * Tables a session object creates only when it first writes to them (issue 23, D-055): a plain chat turn
 * never writes session memory (it is written by NOTES `remember`/`condense_*` and by compaction), so a brand-new
 * object does not pay for the `memory` table and its FTS5 index (one virtual table, five shadow tables).
 *
 * D-062 adds the tables only job runs, chat channels and `automation.complete` write: `notify_outbox` (v11),
 * `automation_completions` (v12), `reply_outbox` (v13). A plain turn's alarm pass then reads none of them.
 *
 * Schema v16 (memory) and v19 (the others) drop them from any object where they are empty (a brand-new object's
 * schema snapshot therefore lacks them); an object whose tables hold rows keeps them. Writers call
 * `ensureLazyTables` first, in the transaction of their write (CREATE … IF NOT EXISTS, the very statements of the
 * version that made them); readers go through `readLazy` and read nothing when absent. Whether they exist is
 * learned once per object (one `sqlite_master` read for every group) and kept per database. No migration after the
 * one that made a group may touch it (test/sessions/fresh-turn.test.ts holds it): a lazy table changes only here.
 * Issue 33 adds a group no migration ever made (`LAZY_ONLY_TABLES`): the disclosure ledger, made by its first writer.
 */
import { databaseOf, type Sql, SqlError } from "../storage/sql";

// The tables' DDL as the migrations that first made them ran it (schema.ts uses these very texts, so the two
// cannot drift): v5's memory, v11's notify outbox, v12's automation completions, v13's reply outbox.
/** Schema v5: memory items (summaries, decisions, notes) and their FTS5 index (S4 §5). */
export const MEMORY_SCHEMA = `CREATE TABLE memory (
     id TEXT PRIMARY KEY,
     kind TEXT NOT NULL CHECK (kind IN ('summary', 'decision', 'note')),
     text TEXT NOT NULL,
     from_seq INTEGER,
     to_seq INTEGER,
     created_at TEXT NOT NULL
   );
   CREATE VIRTUAL TABLE memory_fts USING fts5(id UNINDEXED, text, tokenize = 'unicode61');`;

/** Schema v11's job-notification outbox. */
export const NOTIFY_OUTBOX_SCHEMA = `CREATE TABLE notify_outbox (
     run_id TEXT PRIMARY KEY,
     job_id TEXT NOT NULL,
     scheduled_for TEXT NOT NULL,
     channel TEXT NOT NULL,
     target TEXT NOT NULL,
     webhook_id TEXT NOT NULL,
     settings TEXT NOT NULL,
     body TEXT,
     status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
     attempts INTEGER NOT NULL,
     next_attempt_at INTEGER NOT NULL,
     last_error TEXT,
     delivered_at TEXT,
     reported INTEGER NOT NULL
   );`;

/** Schema v12's automation completions, one per completion_id. */
export const AUTOMATION_COMPLETIONS_SCHEMA = `CREATE TABLE automation_completions (
     completion_id TEXT PRIMARY KEY,
     run_id TEXT NOT NULL,
     outcome TEXT NOT NULL,
     summary TEXT,
     tool_call_id TEXT NOT NULL,
     recorded_at TEXT NOT NULL
   );`;

/** Schema v13: chat-channel replies (issue 10), one outbox row per run a channel message started. */
export const REPLY_SCHEMA = `CREATE TABLE reply_outbox (
     run_id TEXT PRIMARY KEY,
     target TEXT NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'delivered', 'failed', 'unknown', 'skipped')),
     parts_sent INTEGER NOT NULL DEFAULT 0,
     message_ids TEXT NOT NULL DEFAULT '[]',
     attempts INTEGER NOT NULL DEFAULT 0,
     next_attempt_at INTEGER NOT NULL DEFAULT 0,
     last_error TEXT,
     updated_at TEXT NOT NULL
   );`;

/**
 * Issue 33: the conversation's disclosure ledger (src/prompts/leak-guard/ledger.ts) — what the model has already
 * given away of the hidden layers. Made when a conversation first releases model text; never touched by a migration.
 */
export const DISCLOSURE_LEDGER_SCHEMA = `CREATE TABLE disclosure_ledger (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     index_key TEXT NOT NULL,
     covered TEXT NOT NULL,
     tail TEXT NOT NULL,
     refusals INTEGER NOT NULL DEFAULT 0,
     last_refusal TEXT,
     updated_at TEXT NOT NULL
   );`;

/** A migration's DDL as statements that may run again (SQLite stores the same table text either way). */
const ifNotExists = (ddl: string): string[] =>
  ddl
    .split(";")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => s.replace(/^CREATE (VIRTUAL )?TABLE /, "CREATE $1TABLE IF NOT EXISTS "));

/** Each lazy group (named after its first table) and its statements: its migration's, IF NOT EXISTS. */
export const LAZY_TABLES = {
  memory: ifNotExists(MEMORY_SCHEMA),
  // D-062: written only by job runs, chat-channel messages and automation.complete.
  notify_outbox: ifNotExists(NOTIFY_OUTBOX_SCHEMA),
  automation_completions: ifNotExists(AUTOMATION_COMPLETIONS_SCHEMA),
  reply_outbox: ifNotExists(REPLY_SCHEMA),
} as const;

/** Tables no migration ever made: created by their first writer only (issue 33's disclosure ledger). */
export const LAZY_ONLY_TABLES = {
  disclosure_ledger: ifNotExists(DISCLOSURE_LEDGER_SCHEMA),
} as const;

const ALL_LAZY = { ...LAZY_TABLES, ...LAZY_ONLY_TABLES };

/** The lazy groups, in the order they are looked up together. */
const GROUPS = Object.keys(ALL_LAZY) as LazyGroup[];

/** A group of lazily created tables (named after its first table). */
export type LazyGroup = keyof typeof ALL_LAZY;

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
  if (!m.has(group)) {
    // Every group at once (D-062): a fresh object's first alarm pass asks about several; one read answers all.
    const names = new Set(
      sql.all<{
        name: string;
      }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (SELECT value FROM json_each(${JSON.stringify(GROUPS)}))`.map(
        (r) => r.name,
      ),
    );
    for (const g of GROUPS) if (!m.has(g)) m.set(g, names.has(g));
  }
  return m.get(group) === true;
}

/** Creates the group's tables if they do not exist yet (before the first write). */
export function ensureLazyTables(sql: Sql, group: LazyGroup): void {
  const m = knownOf(sql);
  if (m.get(group) === true) return;
  const statements = ALL_LAZY[group];
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

/**
 * A migration step (schema v19, D-062): drops each group's tables where they hold no row (a brand-new object, an
 * unused one); a group that holds rows is kept, and looked up again on first read. Every group named exists at v19.
 */
export function dropLazyIfEmpty(...groups: (keyof typeof LAZY_TABLES)[]): (sql: Sql) => void {
  return (sql) => {
    for (const group of groups) {
      if (holdsRows(sql, group)) {
        knownOf(sql).delete(group);
        continue;
      }
      const tables = LAZY_TABLES[group].map((s) => /TABLE IF NOT EXISTS (\w+)/.exec(s)?.[1] as string).reverse();
      sql.script(tables.map((t) => `DROP TABLE IF EXISTS ${t}`).join(";\n"), tables.length);
      knownOf(sql).set(group, false);
    }
  };
}

/** Whether the group's first table holds a row (one statement per table: a name cannot be a parameter). */
function holdsRows(sql: Sql, group: keyof typeof LAZY_TABLES): boolean {
  switch (group) {
    case "memory":
      return sql.one`SELECT 1 AS x FROM memory LIMIT 1` !== undefined;
    case "notify_outbox":
      return sql.one`SELECT 1 AS x FROM notify_outbox LIMIT 1` !== undefined;
    case "automation_completions":
      return sql.one`SELECT 1 AS x FROM automation_completions LIMIT 1` !== undefined;
    case "reply_outbox":
      return sql.one`SELECT 1 AS x FROM reply_outbox LIMIT 1` !== undefined;
  }
}
