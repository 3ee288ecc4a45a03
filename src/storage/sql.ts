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

export interface Sql {
  /** All rows of a query. */
  all<Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): Row[];
  /** The first row, or undefined. */
  one<Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]): Row | undefined;
  /** Runs a statement; returns SQLite's rows-written count (index writes included): 0 means nothing changed. */
  run(strings: TemplateStringsArray, ...values: SqlValue[]): number;
  /** Runs a script of several statements without parameters (schema migrations). */
  script(text: string): void;
}

/** Wraps `ctx.storage.sql`. */
export function createSql(storage: SqlStorage): Sql {
  const exec = <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, values: SqlValue[]) => {
    const query = strings.join("?");
    try {
      return storage.exec<Row>(query, ...values);
    } catch (err) {
      throw new SqlError(query, err);
    }
  };
  return {
    all: <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) =>
      exec<Row>(strings, values).toArray(),
    one: <Row extends Record<string, SqlStorageValue>>(strings: TemplateStringsArray, ...values: SqlValue[]) =>
      exec<Row>(strings, values).toArray()[0],
    run: (strings, ...values) => exec(strings, values).rowsWritten,
    script: (text) => {
      try {
        storage.exec(text);
      } catch (err) {
        throw new SqlError(text, err);
      }
    },
  };
}

/** An ordered list of schema migrations; entry i takes the schema from version i to i+1. */
export type Migrations = readonly string[];

/**
 * Brings the storage up to the latest schema version, each migration in its
 * own transaction, and returns the version now in force. Idempotent.
 */
export function migrate(storage: DurableObjectStorage, sql: Sql, migrations: Migrations): number {
  sql.script("CREATE TABLE IF NOT EXISTS _schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)");
  let version = sql.one<{ version: number }>`SELECT version FROM _schema WHERE id = 1`?.version ?? 0;
  if (version > migrations.length) {
    throw new Error(`storage schema version ${version} is newer than this code knows (${migrations.length}); refusing to run`);
  }
  while (version < migrations.length) {
    const next = version + 1;
    storage.transactionSync(() => {
      sql.script(migrations[version] as string);
      sql.run`INSERT INTO _schema (id, version) VALUES (1, ${next}) ON CONFLICT (id) DO UPDATE SET version = excluded.version`;
    });
    version = next;
  }
  return version;
}
