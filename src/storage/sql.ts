/**
 * A small typed helper over a Durable Object's SQLite storage.
 *
 * Queries are tagged templates, so values are always bound parameters and
 * never spliced into SQL text. A failing query is rethrown as `SqlError`
 * carrying the query text (never the bound values, which may be user data).
 */

/** Values SQLite accepts as bound parameters. */
export type SqlValue = string | number | null | ArrayBuffer;

/** A query failed; `query` is the SQL text with `?` placeholders. */
export class SqlError extends Error {
  readonly query: string;
  constructor(query: string, cause: unknown) {
    super(`SQL failed: ${cause instanceof Error ? cause.message : String(cause)} — in: ${query}`, { cause });
    this.name = "SqlError";
    this.query = query;
  }
}

/**
 * How much SQL this isolate has run through `createSql` and `migrate`: calls into SQLite and the statements
 * they carried (a schema script counts each of its statements). Tests read it to count a turn's statements
 * exactly (issue 23); two additions per call.
 */
export const sqlWork = { execs: 0, statements: 0, trace: undefined as string[] | undefined };

export interface Sql {
  /** All rows of a query. */
  all<Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): Row[];
  /** The first row, or undefined. */
  one<Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): Row | undefined;
  /** Runs a statement; returns SQLite's rows-written count (index writes included): 0 means nothing changed. */
  run(strings: TemplateStringsArray, ...values: SqlValue[]): number;
  /** Runs a script of `statements` statements (default 1) without parameters (schema migrations). */
  script(text: string, statements?: number): void;
}

/** The storage behind each `Sql` made here: every `Sql` over one object's storage shares what is kept per object. */
const origins = new WeakMap<Sql, SqlStorage>();

/** What identifies the database behind `sql` (its SqlStorage; `sql` itself when it was not made by `createSql`). */
export function databaseOf(sql: Sql): object {
  return origins.get(sql) ?? sql;
}

/** Wraps `ctx.storage.sql`. */
export function createSql(storage: SqlStorage): Sql {
  const exec = <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, values: SqlValue[]) => {
    const query = strings.join("?");
    sqlWork.execs++;
    sqlWork.statements++;
    sqlWork.trace?.push(query);
    try {
      return storage.exec<Row>(query, ...values);
    } catch (err) {
      throw new SqlError(query, err);
    }
  };
  const sql: Sql = {
    all: <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) =>
      exec<Row>(strings, values).toArray(),
    one: <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) =>
      exec<Row>(strings, values).toArray()[0],
    run: (strings, ...values) => exec(strings, values).rowsWritten,
    script: (text, statements = 1) => {
      sqlWork.execs++;
      sqlWork.statements += statements;
      sqlWork.trace?.push(text.slice(0, 60));
      try {
        storage.exec(text);
      } catch (err) {
        throw new SqlError(text, err);
      }
    },
  };
  origins.set(sql, storage);
  return sql;
}

/**
 * An ordered list of schema migrations; entry i takes the schema from version i to i+1: a script, or a step
 * that must look at the data first (e.g. drop a table only if it is empty).
 */
export type Migrations = readonly (string | ((sql: Sql) => void))[];

/**
 * The schema a list of migrations produces, as the `CREATE …` statements SQLite itself keeps in
 * `sqlite_master` (in creation order), so that a brand-new object can be given it in one step.
 */
export type SchemaSnapshots = Map<Migrations, readonly string[]>;

/**
 * Per isolate: the schema every migration list produced the first time this isolate applied it in full to an
 * empty database. Every `POST /v1/runs` gets its own SessionDO, so applying the migrations one by one (13 steps,
 * 22 ALTER TABLEs that each make SQLite re-read its whole schema) was a large part of a turn's CPU (issue 12).
 */
const ISOLATE_SNAPSHOTS: SchemaSnapshots = new Map();

/** FTS5 creates these beside each virtual table itself: replaying its CREATE VIRTUAL TABLE makes them again. */
const FTS5_SHADOW_SUFFIXES = ["_data", "_idx", "_content", "_docsize", "_config"];

/** Objects of ours in `sqlite_master`: not SQLite's own (`sqlite_*`), not the runtime's (`_cf_*`), not `_schema`. */
const isOwn = (name: string) => !name.startsWith("sqlite_") && !name.startsWith("_cf_") && name !== "_schema";

/**
 * The current schema as replayable statements: `sqlite_master.sql` of every table, index, trigger and view,
 * in creation order (rowid; ALTER TABLE rewrites a table's row in place, keeping its rowid). Automatic indexes
 * (no SQL) and FTS5 shadow tables are left out: SQLite makes them again from the statements kept.
 */
export function schemaSnapshot(sql: Sql): string[] {
  const rows = sql.all<{ name: string; sql: string }>`SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid`.filter(
    (r) => isOwn(r.name),
  );
  const virtual = rows.filter((r) => /^CREATE VIRTUAL TABLE/i.test(r.sql)).map((r) => r.name);
  const shadow = new Set(virtual.flatMap((v) => FTS5_SHADOW_SUFFIXES.map((suffix) => `${v}${suffix}`)));
  return rows.filter((r) => !shadow.has(r.name)).map((r) => r.sql);
}

/** True when the database holds nothing of ours yet (a brand-new object). */
function isEmpty(sql: Sql): boolean {
  return sql.all<{ name: string }>`SELECT name FROM sqlite_master`.every((r) => !isOwn(r.name));
}

/**
 * Brings the storage up to the latest schema version and returns the version now in force. Idempotent.
 *
 * An existing object gets each missing migration in its own transaction, in order. A brand-new object
 * (version 0, nothing of ours in it) gets, once this isolate has applied the same list to an empty database,
 * the schema that produced — replayed in ONE transaction from `sqlite_master`'s own statements, hence the
 * very same schema (test/sessions/session-do.test.ts compares it with the step-by-step one). The first new object of
 * an isolate takes the steps and records the snapshot (unless its migrations left rows behind: those would
 * not be replayed). `snapshots` is for tests.
 */
export function migrate(
  storage: DurableObjectStorage,
  sql: Sql,
  migrations: Migrations,
  snapshots: SchemaSnapshots = ISOLATE_SNAPSHOTS,
): number {
  sql.script("CREATE TABLE IF NOT EXISTS _schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)");
  let version = sql.one<{ version: number }>`SELECT version FROM _schema WHERE id = 1`?.version ?? 0;
  if (version > migrations.length) {
    throw new Error(`storage schema version ${version} is newer than this code knows (${migrations.length}); refusing to run`);
  }
  const fresh = version === 0 && migrations.length > 0 && isEmpty(sql);
  const snapshot = fresh ? snapshots.get(migrations) : undefined;
  if (snapshot) {
    const latest = migrations.length;
    storage.transactionSync(() => {
      sql.script(snapshot.join(";\n"), snapshot.length); // one exec: ~30 statements, no crossing per statement
      sql.run`INSERT INTO _schema (id, version) VALUES (1, ${latest}) ON CONFLICT (id) DO UPDATE SET version = excluded.version`;
    });
    return latest;
  }
  while (version < migrations.length) {
    const next = version + 1;
    storage.transactionSync(() => {
      const step = migrations[version] as Migrations[number];
      if (typeof step === "function") step(sql);
      else sql.script(step);
      sql.run`INSERT INTO _schema (id, version) VALUES (1, ${next}) ON CONFLICT (id) DO UPDATE SET version = excluded.version`;
    });
    version = next;
  }
  if (fresh) {
    // Only a schema is replayed, never rows: a list whose migrations seed data keeps taking the steps.
    const statements = schemaSnapshot(sql);
    const tables = statements.map((s) => /^CREATE TABLE (?:IF NOT EXISTS )?"?(\w+)"?/i.exec(s)?.[1]).filter((t): t is string => !!t);
    if (tables.every((t) => storage.sql.exec(`SELECT 1 FROM "${t}" LIMIT 1`).toArray().length === 0)) snapshots.set(migrations, statements);
  }
  return version;
}
