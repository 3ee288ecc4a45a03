/**
 * The S4 §1.2 checkpoint row (one per session), as named statements. The only module that writes SQL for
 * the `checkpoint` table; src/sessions/checkpoint.ts gives it meaning.
 */
import type { Sql } from "../storage/sql";

/** The checkpoint as stored: state and trace tail are JSON text. */
export interface CheckpointRow {
  revision: number;
  updated_ts: number;
  state: string;
  trace_tail: string;
}

/** The checkpoint row, or undefined before the first write. */
export function readCheckpointRow(sql: Sql): CheckpointRow | undefined {
  return sql.one<CheckpointRow & Record<string, SqlStorageValue>>`
    SELECT revision, updated_ts, state, trace_tail FROM checkpoint WHERE id = 1`;
}

/** Writes the checkpoint row (insert or replace). */
export function writeCheckpointRow(sql: Sql, row: CheckpointRow): void {
  sql.run`INSERT INTO checkpoint (id, revision, updated_ts, state, trace_tail) VALUES (1, ${row.revision}, ${row.updated_ts}, ${row.state}, ${row.trace_tail})
          ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, updated_ts = excluded.updated_ts, state = excluded.state, trace_tail = excluded.trace_tail`;
}
