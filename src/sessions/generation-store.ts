/**
 * Generations and archived parts, as named statements: each `/new` starts a generation (`generations`), an
 * archived generation keeps its R2 key, and turns archived early under the transcript limits are listed in
 * `archived_parts` until the whole generation is archived. The only module that writes SQL for these tables.
 */
import type { Sql } from "../storage/sql";

/** Starts a generation. */
export function insertGeneration(sql: Sql, sessionId: string, startedAt: string): void {
  sql.run`INSERT INTO generations (session_id, started_at) VALUES (${sessionId}, ${startedAt})`;
}

/** A generation's archive fields, or undefined when this session never had it. */
export function generationArchive(sql: Sql, sessionId: string): { archive_key: string | null; archived_at: string | null } | undefined {
  return sql.one<{ archive_key: string | null; archived_at: string | null }>`
    SELECT archive_key, archived_at FROM generations WHERE session_id = ${sessionId}`;
}

/** Marks a generation archived under `key`. */
export function markGenerationArchived(sql: Sql, sessionId: string, at: string, key: string): void {
  sql.run`UPDATE generations SET archived_at = ${at}, archive_key = ${key} WHERE session_id = ${sessionId}`;
}

/** Marks a resumed generation live again. */
export function reopenGeneration(sql: Sql, sessionId: string): void {
  sql.run`UPDATE generations SET archived_at = NULL WHERE session_id = ${sessionId}`;
}

/** The R2 keys of a generation's archived parts, oldest first. */
export function archivedPartKeys(sql: Sql, sessionId: string): string[] {
  return sql.all<{ r2_key: string }>`SELECT r2_key FROM archived_parts WHERE session_id = ${sessionId} ORDER BY first_seq`.map(
    (r) => r.r2_key,
  );
}

/** The R2 keys of the archived parts holding rows after `afterSeq`, oldest first. */
export function archivedPartKeysAfter(sql: Sql, sessionId: string, afterSeq: number): string[] {
  return sql.all<{
    r2_key: string;
  }>`SELECT r2_key FROM archived_parts WHERE session_id = ${sessionId} AND last_seq > ${afterSeq} ORDER BY first_seq`.map((r) => r.r2_key);
}

/** Lists an archived part (idempotent). */
export function insertArchivedPart(sql: Sql, sessionId: string, firstSeq: number, lastSeq: number, key: string): void {
  sql.run`INSERT INTO archived_parts (session_id, first_seq, last_seq, r2_key) VALUES (${sessionId}, ${firstSeq}, ${lastSeq}, ${key})
          ON CONFLICT DO NOTHING`;
}

/** Forgets a generation's archived parts (they are in its whole-generation archive now). */
export function deleteArchivedParts(sql: Sql, sessionId: string): void {
  sql.run`DELETE FROM archived_parts WHERE session_id = ${sessionId}`;
}
