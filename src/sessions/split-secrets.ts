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
import { queueRunOfMessage } from "./index-outbox-store";
import { newestArchivedPartKey, parseJsonl, recentOfRole, rewriteContent, type TranscriptRow } from "./transcript";

/** At most this many earlier messages are read back (whitespace-only messages cover nothing). */
export const SPLIT_LOOKBACK_MAX_MESSAGES = 256;
const BATCH = 16;
/**
 * Of each earlier message only its last `reach × TAIL_FACTOR` characters are scanned: a secret that ends in
 * the new message starts within `reach` characters of the view, and a form padded with invisible characters or
 * `%XX` escapes takes at most a few text characters per character of the view. It bounds the work a message
 * full of padding can cause.
 */
const TAIL_FACTOR = 16;
/** The most of an archived part that is read back: its end, where the newest rows are. */
const ARCHIVE_TAIL_BYTES = 64 * 1024;

/** The part of `content` that can hold the start of a secret ending in the next message (see TAIL_FACTOR). */
const tailOf = (content: string, reach: number) => {
  const keep = Math.max(1, reach) * TAIL_FACTOR;
  return content.length > keep ? content.slice(content.length - keep) : content;
};

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
      covered += scanLength(tailOf(row.content, reach));
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
    const object = await bucket.get(key, { range: { suffix: ARCHIVE_TAIL_BYTES } });
    if (!object) return [];
    let text = await object.text();
    // A read that starts inside the part starts inside a line: that line is dropped.
    if (object.size > ARCHIVE_TAIL_BYTES) text = text.slice(text.indexOf("\n") + 1);
    const rows = parseJsonl(text).filter((r) => r.role === role);
    const out: string[] = [];
    let covered = live.covered;
    for (let i = rows.length - 1; i >= 0 && covered < reach; i--) {
      const tail = tailOf((rows[i] as TranscriptRow).content, reach);
      out.unshift(tail);
      covered += scanLength(tail);
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
  const reach = reachOf(secrets);
  const { rows } = liveLookback(sql, sessionId, role, reach);
  if (rows.length === 0 && archived.length === 0) return { text, rewrites: [] };
  rows.reverse(); // oldest first
  // Each earlier message is scanned by its tail only; its head is put back in front of the result.
  const heads = rows.map((r) => r.content.slice(0, r.content.length - tailOf(r.content, reach).length));
  const tails = rows.map((r, i) => r.content.slice((heads[i] as string).length));
  const literal = redactAcrossMessages([...archived, ...tails], text, secrets);
  const previous = literal.previous.slice(archived.length).map((tail, i) => `${heads[i]}${tail}`);
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

/** Writes the rewrites `redactSplitSecrets` returned; a listed run whose message was rewritten is listed again (D-079). */
export function applySplitRewrites(sql: Sql, rewrites: readonly SplitRewrite[]): void {
  for (const r of rewrites) {
    rewriteContent(sql, r.seq, r.content, r.redactions);
    queueRunOfMessage(sql, r.seq);
  }
}
