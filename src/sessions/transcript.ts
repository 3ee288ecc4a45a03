/**
 * The transcript of a session, one row per message, in the SessionDO's SQLite
 * (the JSONL-equivalent of S1 §5.2). `seq` is strictly increasing across the
 * object's life; each row belongs to one generation (`session_id`).
 * Export is JSONL, one object per line with a fixed key order: byte-stable,
 * and `importJsonl(exportJsonl(x))` restores the same rows.
 */
import { z } from "zod";
import { type HistoryRow, rowTokens } from "../context/history";
import type { Sql } from "../storage/sql";

export const TranscriptRow = z.strictObject({
  seq: z.int().positive(),
  session_id: z.string().min(1),
  role: z.enum(["user", "assistant", "tool"]),
  content: z.string(),
  ts: z.string(),
  run_id: z.string().nullable(),
  tool_name: z.string().nullable(),
  tool_call_id: z.string().nullable(),
  redactions: z.array(z.string()),
});
export type TranscriptRow = z.infer<typeof TranscriptRow>;

export type NewMessage = Omit<TranscriptRow, "seq" | "ts" | "run_id" | "tool_name" | "tool_call_id" | "redactions"> &
  Partial<Pick<TranscriptRow, "run_id" | "tool_name" | "tool_call_id" | "redactions">>;

type DbRow = Omit<TranscriptRow, "redactions"> & { redactions: string; tokens?: number | null };

/** A stored row as the transcript's own shape (the token estimate is the history's business, see `historyPage`). */
const fromDb = ({ tokens: _tokens, ...r }: DbRow): TranscriptRow => ({ ...r, redactions: JSON.parse(r.redactions) as string[] });

/** The token estimate a row is stored with (schema v15): of the text the model is given for it. */
const tokensOf = (r: Pick<TranscriptRow, "seq" | "role" | "content" | "tool_name" | "tool_call_id">): number => rowTokens(r);

/** Appends one message with its token estimate, in one statement; returns the stored row. */
export function appendMessage(sql: Sql, m: NewMessage, now: Date): TranscriptRow {
  const ts = now.toISOString();
  // A tool row without a call id is shown under its own seq (`seq-<n>`), unknown until inserted: estimated on first read.
  const unnamedTool = m.role === "tool" && !m.tool_call_id;
  const tokens = unnamedTool
    ? null
    : tokensOf({ seq: 0, role: m.role, content: m.content, tool_name: m.tool_name ?? null, tool_call_id: m.tool_call_id ?? null });
  const row = sql.one<DbRow>`INSERT INTO transcript (session_id, role, content, ts, run_id, tool_name, tool_call_id, redactions, tokens)
          VALUES (${m.session_id}, ${m.role}, ${m.content}, ${ts}, ${m.run_id ?? null}, ${m.tool_name ?? null},
                  ${m.tool_call_id ?? null}, ${JSON.stringify(m.redactions ?? [])}, ${tokens})
          RETURNING *`;
  if (!row) throw new Error("transcript insert vanished");
  return fromDb(row);
}

/** Messages of one generation in order, after `afterSeq`, at most `limit`. */
export function listMessages(sql: Sql, sessionId: string, afterSeq = 0, limit = 1000): TranscriptRow[] {
  return sql.all<DbRow>`SELECT * FROM transcript WHERE session_id = ${sessionId} AND seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`.map(
    fromDb,
  );
}

/** The newest `limit` messages of a generation, returned oldest first (for context building). */
export function latestMessages(sql: Sql, sessionId: string, limit: number): TranscriptRow[] {
  return sql.all<DbRow>`SELECT * FROM transcript WHERE session_id = ${sessionId} ORDER BY seq DESC LIMIT ${limit}`.map(fromDb).reverse();
}

/**
 * A page of history: rows with afterSeq < seq < beforeSeq, newest first, at most `limit`, with their stored
 * token estimates. A row stored before estimates were (schema v15) is estimated here once and the estimate
 * written back, so each old row is tokenised at most once (lazy backfill).
 */
export function historyPage(sql: Sql, sessionId: string, afterSeq: number, beforeSeq: number, limit: number): HistoryRow[] {
  const rows = sql.all<{
    seq: number;
    role: TranscriptRow["role"];
    content: string;
    tool_name: string | null;
    tool_call_id: string | null;
    tokens: number | null;
  }>`
    SELECT seq, role, content, tool_name, tool_call_id, tokens FROM transcript
     WHERE session_id = ${sessionId} AND seq > ${afterSeq} AND seq < ${beforeSeq} ORDER BY seq DESC LIMIT ${limit}`;
  for (const r of rows) {
    if (r.tokens !== null) continue;
    r.tokens = tokensOf(r);
    sql.run`UPDATE transcript SET tokens = ${r.tokens} WHERE seq = ${r.seq}`;
  }
  return rows;
}

/** Count, user turns and content bytes of a generation's live rows (kept by triggers, see schema v6). */
export function generationSize(sql: Sql, sessionId: string): { messages: number; userTurns: number; bytes: number } {
  const row = sql.one<{ messages: number; user_turns: number; bytes: number }>`
    SELECT live_messages AS messages, live_user_turns AS user_turns, live_bytes AS bytes FROM generations WHERE session_id = ${sessionId}`;
  return { messages: row?.messages ?? 0, userTurns: row?.user_turns ?? 0, bytes: row?.bytes ?? 0 };
}

/** One row as a JSONL line (fixed key order, trailing newline). */
export function toJsonlLine(r: TranscriptRow): string {
  const ordered = {
    seq: r.seq,
    session_id: r.session_id,
    role: r.role,
    content: r.content,
    ts: r.ts,
    run_id: r.run_id,
    tool_name: r.tool_name,
    tool_call_id: r.tool_call_id,
    redactions: r.redactions,
  };
  return `${JSON.stringify(ordered)}\n`;
}

/** Rows as JSONL. */
export function exportJsonl(rows: readonly TranscriptRow[]): string {
  return rows.map(toJsonlLine).join("");
}

/** Parses JSONL produced by `exportJsonl`; every line is validated. */
export function parseJsonl(text: string): TranscriptRow[] {
  return text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line, i) => {
      const parsed = TranscriptRow.safeParse(JSON.parse(line));
      if (!parsed.success) throw new Error(`transcript JSONL line ${i + 1} is invalid`);
      return parsed.data;
    });
}

/** Restores archived rows with their original seq numbers (used by /resume). */
export function importRows(sql: Sql, rows: readonly TranscriptRow[]): void {
  for (const r of rows) {
    sql.run`INSERT INTO transcript (seq, session_id, role, content, ts, run_id, tool_name, tool_call_id, redactions, tokens)
            VALUES (${r.seq}, ${r.session_id}, ${r.role}, ${r.content}, ${r.ts}, ${r.run_id}, ${r.tool_name}, ${r.tool_call_id},
                    ${JSON.stringify(r.redactions)}, ${tokensOf(r)})
            ON CONFLICT (seq) DO NOTHING`;
  }
}

/** Deletes rows of a generation up to and including `throughSeq` (after they were archived). */
export function deleteThrough(sql: Sql, sessionId: string, throughSeq: number): void {
  sql.run`DELETE FROM transcript WHERE session_id = ${sessionId} AND seq <= ${throughSeq}`;
}

/** The newest rows of one role with seq < beforeSeq, newest first, at most `limit` (the split-secret look-back). */
export function recentOfRole(
  sql: Sql,
  sessionId: string,
  role: TranscriptRow["role"],
  beforeSeq: number,
  limit: number,
): { seq: number; content: string; redactions: string[] }[] {
  return sql.all<{ seq: number; content: string; redactions: string }>`SELECT seq, content, redactions FROM transcript
         WHERE session_id = ${sessionId} AND role = ${role} AND seq < ${beforeSeq} ORDER BY seq DESC LIMIT ${limit}`.map((r) => ({
    ...r,
    redactions: JSON.parse(r.redactions) as string[],
  }));
}

/** Replaces a stored row's content (a redaction found later) and its `redactions` paths; the estimate follows. */
export function rewriteContent(sql: Sql, seq: number, content: string, redactions: readonly string[]): void {
  // The estimate is left NULL: the next history page that reads the row estimates it again (`historyPage`).
  sql.run`UPDATE transcript SET content = ${content}, redactions = ${JSON.stringify(redactions)}, tokens = NULL WHERE seq = ${seq}`;
}

/** The R2 key of a generation's newest archived part (turns archived under maxTurns / maxBytes), if any. */
export function newestArchivedPartKey(sql: Sql, sessionId: string): string | undefined {
  return sql.one<{ r2_key: string }>`SELECT r2_key FROM archived_parts WHERE session_id = ${sessionId} ORDER BY last_seq DESC LIMIT 1`
    ?.r2_key;
}

/** The lowest seq still stored for a generation (undefined when it has no rows here). */
export function firstSeq(sql: Sql, sessionId: string): number | undefined {
  return sql.one<{ seq: number }>`SELECT MIN(seq) AS seq FROM transcript WHERE session_id = ${sessionId}`?.seq;
}
