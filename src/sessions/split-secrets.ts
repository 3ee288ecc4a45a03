/**
 * A secret split over consecutive messages of one session (issue 20 §5): pasted in chunks by a user, or
 * emitted piece by piece by a model across replies. Before a message is stored, the previous messages of the
 * same role are read back, as far as the longest derived form of any configured secret reaches, and the
 * concatenation is scanned (src/security/redact.ts `redactAcrossMessages`): every fragment of a secret found
 * there is replaced, in the new message and in the earlier rows, which are rewritten in place.
 * What already left the object stays as it was (a create-only archive part, an earlier run's output): the
 * fragments that are still here and the one that completes the secret are redacted, so what left stays a
 * piece. See "Redaction of configured secrets" in docs/sessions.md.
 */
import { redactAcrossBoundary, redactAcrossMessages } from "../security/redact";
import { scanLength, secretMatcher } from "../security/secret-forms";
import type { Sql } from "../storage/sql";
import { newestArchivedPartKey, parseJsonl, recentOfRole, rewriteContent, type TranscriptRow } from "./transcript";

/** At most this many earlier messages are read back (whitespace-only messages cover nothing). */
export const SPLIT_LOOKBACK_MAX_MESSAGES = 256;
const BATCH = 16;

/** A stored row to rewrite: its new content and `redactions` paths. */
export interface SplitRewrite {
  seq: number;
  content: string;
  redactions: string[];
}

/** The live rows of `role`, newest first, until they cover `reach` normalised characters (or run out). */
function liveLookback(sql: Sql, sessionId: string, role: TranscriptRow["role"], reach: number) {
  const rows: { seq: number; content: string; redactions: string[] }[] = [];
  let covered = 0;
  let before = Number.MAX_SAFE_INTEGER;
  // A secret that ends in the new message starts at most `reach` normalised characters back.
  while (rows.length < SPLIT_LOOKBACK_MAX_MESSAGES && (covered < reach || rows.length === 0)) {
    const batch = recentOfRole(sql, sessionId, role, before, BATCH);
    for (const row of batch) {
      rows.push(row);
      covered += scanLength(row.content);
      if (covered >= reach || rows.length >= SPLIT_LOOKBACK_MAX_MESSAGES) break;
    }
    if (batch.length < BATCH) break;
    before = (batch.at(-1) as { seq: number }).seq;
  }
  return { rows, covered };
}

/** How far back a split secret can start: the longest derived form, less the one character in the new message. */
const reachOf = (secrets: readonly string[]) => Math.max(0, secretMatcher(secrets).maxLength - 1);

/**
 * When the live rows of `role` do not reach back far enough (a session whose older turns were archived to R2
 * under `session.maxTurns` / `maxBytes`), the contents of that role in the newest archived part, oldest
 * first, as far as still needed. They are read, never rewritten (archives are create-only): the fragments
 * still live and the new one are redacted, so the archived piece stays a piece. Unreadable → none.
 */
export async function archivedLookback(
  sql: Sql,
  bucket: R2Bucket,
  sessionId: string,
  role: TranscriptRow["role"],
  secrets: readonly string[],
): Promise<string[]> {
  const reach = reachOf(secrets);
  const live = liveLookback(sql, sessionId, role, reach);
  if (live.covered >= reach || live.rows.length >= SPLIT_LOOKBACK_MAX_MESSAGES) return [];
  const key = newestArchivedPartKey(sql, sessionId);
  if (!key) return [];
  try {
    const text = await (await bucket.get(key))?.text();
    if (text === undefined) return [];
    const rows = parseJsonl(text).filter((r) => r.role === role);
    const out: string[] = [];
    let covered = live.covered;
    for (let i = rows.length - 1; i >= 0 && covered < reach; i--) {
      out.unshift((rows[i] as TranscriptRow).content);
      covered += scanLength((rows[i] as TranscriptRow).content);
    }
    return out;
  } catch {
    return []; // R2 unavailable: the live rows are still checked
  }
}

/**
 * `text` (already redacted on its own) with the fragments of any secret it completes replaced, and the
 * earlier rows of `role` to rewrite (apply them with `applySplitRewrites`, in the transaction that stores
 * `text`). `archived`: older contents from `archivedLookback`, read but never rewritten.
 */
export function redactSplitSecrets(
  sql: Sql,
  sessionId: string,
  role: TranscriptRow["role"],
  text: string,
  secrets: readonly string[],
  archived: readonly string[] = [],
): { text: string; rewrites: SplitRewrite[] } {
  const { rows } = liveLookback(sql, sessionId, role, reachOf(secrets));
  if (rows.length === 0 && archived.length === 0) return { text, rewrites: [] };
  rows.reverse(); // oldest first
  const literal = redactAcrossMessages([...archived, ...rows.map((r) => r.content)], text, secrets);
  const previous = literal.previous.slice(archived.length);
  // Credential patterns (sk-…, JWTs…) across the last boundary only, as before: they have no bounded length.
  const last = rows.length - 1;
  const pattern = last >= 0 ? redactAcrossBoundary(previous[last] as string, literal.current, []) : undefined;
  const contents = pattern ? [...previous.slice(0, last), pattern.previous] : previous;
  const rewrites = rows
    .map((r, i) => ({ row: r, content: contents[i] as string }))
    .filter(({ row, content }) => content !== row.content)
    .map(({ row, content }) => ({ seq: row.seq, content, redactions: [...new Set([...row.redactions, "content"])] }));
  return { text: pattern ? pattern.current : literal.current, rewrites };
}

/** Writes the rewrites `redactSplitSecrets` returned. */
export function applySplitRewrites(sql: Sql, rewrites: readonly SplitRewrite[]): void {
  for (const r of rewrites) rewriteContent(sql, r.seq, r.content, r.redactions);
}
