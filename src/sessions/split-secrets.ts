/**
 * A secret split over consecutive messages of one session (issue 20 §5): pasted in chunks by a user, or
 * emitted piece by piece by a model across replies. Before a message is stored, the previous messages of the
 * same role are read back, as far as the longest derived form of any configured secret reaches, and the
 * concatenation is scanned (src/security/redact.ts `redactAcrossMessages`): every fragment of a secret found
 * there is replaced, in the new message and in the earlier rows, which are rewritten in place.
 * What already left the object stays as it was: a user message leaves it only in an archived R2 part (turns
 * past `session.maxTurns`/`maxBytes`) or a generation archive (`/new`), which this look-back does not reach;
 * an assistant reply also leaves in its own run's output. See "Redaction" in docs/sessions.md.
 */
import { redactAcrossBoundary, redactAcrossMessages } from "../security/redact";
import { scanLength, secretMatcher } from "../security/secret-forms";
import type { Sql } from "../storage/sql";
import { recentOfRole, rewriteContent, type TranscriptRow } from "./transcript";

/** At most this many earlier messages are read back (whitespace-only messages cover nothing). */
export const SPLIT_LOOKBACK_MAX_MESSAGES = 256;
const BATCH = 16;

/** A stored row to rewrite: its new content and `redactions` paths. */
export interface SplitRewrite {
  seq: number;
  content: string;
  redactions: string[];
}

/**
 * `text` (already redacted on its own) with the fragments of any secret it completes replaced, and the
 * earlier rows of `role` to rewrite (apply them with `applySplitRewrites`, in the transaction that stores `text`).
 */
export function redactSplitSecrets(
  sql: Sql,
  sessionId: string,
  role: TranscriptRow["role"],
  text: string,
  secrets: readonly string[],
): { text: string; rewrites: SplitRewrite[] } {
  const reach = Math.max(0, secretMatcher(secrets).maxLength - 1);
  const rows: { seq: number; content: string; redactions: string[] }[] = [];
  let covered = 0;
  let before = Number.MAX_SAFE_INTEGER;
  // Newest first, until the rows read cover the longest form (or there are no more): a secret that ends in
  // `text` starts at most `reach` normalised characters back.
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
  if (rows.length === 0) return { text, rewrites: [] };
  rows.reverse(); // oldest first
  const literal = redactAcrossMessages(
    rows.map((r) => r.content),
    text,
    secrets,
  );
  // Credential patterns (sk-…, JWTs…) across the last boundary only, as before: they have no bounded length.
  const last = rows.length - 1;
  const pattern = redactAcrossBoundary(literal.previous[last] as string, literal.current, []);
  const contents = [...literal.previous.slice(0, last), pattern.previous];
  const rewrites = rows
    .map((r, i) => ({ row: r, content: contents[i] as string }))
    .filter(({ row, content }) => content !== row.content)
    .map(({ row, content }) => ({ seq: row.seq, content, redactions: [...new Set([...row.redactions, "content"])] }));
  return { text: pattern.current, rewrites };
}

/** Writes the rewrites `redactSplitSecrets` returned. */
export function applySplitRewrites(sql: Sql, rewrites: readonly SplitRewrite[]): void {
  for (const r of rewrites) rewriteContent(sql, r.seq, r.content, r.redactions);
}
