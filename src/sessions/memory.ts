/**
 * Session memory and retrieval (S4 §5): items with stable ids — compaction
 * summaries, decisions, notes — indexed with SQLite FTS5 in the SessionDO and
 * ranked with bm25. The retrieved block goes inside L6 (DESIGN), formatted
 * exactly as S4 shows:
 *
 *   === RETRIEVED_MEMORY ===
 *   - id=mem_xxx score=0.412
 *     excerpt...
 *   === END_RETRIEVED_MEMORY ===
 *
 * (The assembler adds the two marker lines around `formatRetrievedItems`.)
 */
import { sha256Hex } from "../prompts/hash";
import { placeholdersForModel, redactText } from "../security/redact";
import type { Sql } from "../storage/sql";
import { ensureLazyTables, readLazy } from "./lazy-tables";

export type MemoryKind = "summary" | "decision" | "note";

export interface MemoryItem {
  id: string;
  kind: MemoryKind;
  text: string;
  from_seq: number | null;
  to_seq: number | null;
  created_at: string;
}

export interface RetrievedItem {
  id: string;
  kind: MemoryKind;
  score: number;
  text: string;
}

/** A stable id: the same kind and text always get the same id. */
export async function memoryId(kind: MemoryKind, text: string): Promise<string> {
  return `mem_${(await sha256Hex(`${kind}\n${text}`)).slice(0, 16)}`;
}

/** Stores an item (idempotent by id) in the table and the FTS index. */
export async function remember(sql: Sql, item: Omit<MemoryItem, "id" | "created_at">, now: Date): Promise<MemoryItem> {
  const id = await memoryId(item.kind, item.text);
  const created = now.toISOString();
  ensureLazyTables(sql, "memory"); // a new object has no memory tables until its first item (D-055)
  const inserted = sql.run`INSERT INTO memory (id, kind, text, from_seq, to_seq, created_at) VALUES (${id}, ${item.kind}, ${item.text}, ${item.from_seq}, ${item.to_seq}, ${created})
                           ON CONFLICT (id) DO NOTHING`;
  if (inserted > 0) sql.run`INSERT INTO memory_fts (id, text) VALUES (${id}, ${item.text})`;
  return sql.one<MemoryRow>`SELECT id, kind, text, from_seq, to_seq, created_at FROM memory WHERE id = ${id}` as MemoryItem;
}

type MemoryRow = { id: string; kind: MemoryKind; text: string; from_seq: number | null; to_seq: number | null; created_at: string };

/** The newest compaction summary that reaches at least `minToSeq` (i.e. covers the current generation). */
export function latestSummary(sql: Sql, minToSeq: number): MemoryItem | undefined {
  return readLazy(
    sql,
    "memory",
    undefined,
    () => sql.one<MemoryRow>`SELECT id, kind, text, from_seq, to_seq, created_at FROM memory
                            WHERE kind = 'summary' AND to_seq >= ${minToSeq} ORDER BY to_seq DESC LIMIT 1`,
  );
}

/** Words of a free-text query as an FTS5 OR-query of quoted terms (no operator injection). */
export function ftsQuery(query: string): string | null {
  const words = query
    .normalize("NFKC")
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w.length >= 2)
    .slice(0, 32);
  if (words.length === 0) return null;
  return [...new Set(words)].map((w) => `"${w.replaceAll('"', '""')}"`).join(" OR ");
}

/** The best `k` items for `query`, best first; score = −bm25 (higher is better), 3 decimals. */
export function recall(sql: Sql, query: string, k = 5): RetrievedItem[] {
  const match = ftsQuery(query);
  if (!match) return [];
  const rows = readLazy(
    sql,
    "memory",
    [],
    () => sql.all<{ id: string; kind: MemoryKind; text: string; rank: number }>`
      SELECT m.id AS id, m.kind AS kind, m.text AS text, bm25(memory_fts) AS rank
      FROM memory_fts JOIN memory m ON m.id = memory_fts.id
      WHERE memory_fts MATCH ${match}
      ORDER BY rank, m.id LIMIT ${Math.max(1, Math.min(20, k))}`,
  );
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    text: r.text,
    score: Math.round(-r.rank * 1000) / 1000,
  }));
}

const EXCERPT_CHARS = 400;

/** The inner lines of S4 §5's block: `- id=… score=…` then the excerpt indented by two spaces. */
export function formatRetrievedItems(items: readonly RetrievedItem[]): string {
  return items
    .map((item) => {
      const flat = item.text.replace(/\s+/g, " ").trim();
      const excerpt = flat.length <= EXCERPT_CHARS ? flat : `${flat.slice(0, EXCERPT_CHARS - 1)}…`;
      return `- id=${item.id} score=${item.score.toFixed(3)}\n  ${excerpt}`;
    })
    .join("\n");
}

/** Bounds of one retrieval for a model turn (agents.<id>.memory). */
export interface RetrievalBounds {
  /** Items at most; 0 turns retrieval off. */
  topK: number;
  /** Characters of the block's inner text at most (items past it are left out). */
  maxChars: number;
}

/** Used when a run's spec predates the setting. */
export const DEFAULT_RETRIEVAL: RetrievalBounds = { topK: 5, maxChars: 2000 };

/** Characters of the user message used as the query: the query's cost does not grow with what the user sends. */
const QUERY_CHARS = 2000;

/** What a model turn gets from memory: the block's inner text, and the ids and scores of the items in it. */
export interface RetrievedMemory {
  text: string;
  ids: string[];
  scores: number[];
}

/**
 * Retrieval for a model turn (S4 §5): the best items for the user's message, each redacted
 * (secrets in force, placeholders worded for the model) before it is cut to an excerpt, within
 * `bounds`; `exclude` names items already in L6 (the compaction summary). Null when nothing matches.
 */
export function retrieveForTurn(
  sql: Sql,
  query: string,
  bounds: RetrievalBounds,
  secrets: readonly string[],
  exclude: readonly string[] = [],
): RetrievedMemory | null {
  if (bounds.topK <= 0) return null;
  const hits = recall(sql, query.slice(0, QUERY_CHARS), bounds.topK + exclude.length).filter((i) => !exclude.includes(i.id));
  const kept: RetrievedItem[] = [];
  let text = "";
  for (const hit of hits.slice(0, bounds.topK)) {
    const item = { ...hit, text: placeholdersForModel(redactText(hit.text, secrets)) };
    const next = formatRetrievedItems([...kept, item]);
    if (next.length > bounds.maxChars) break;
    kept.push(item);
    text = next;
  }
  if (kept.length === 0) return null;
  return { text, ids: kept.map((i) => i.id), scores: kept.map((i) => i.score) };
}
