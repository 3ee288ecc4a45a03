/**
 * S1 §5.3 maxTurns / maxBytes: when a generation grows over its limits, its oldest whole turns are archived to
 * R2 (create-only) as an archived part and only then deleted here. A failed write keeps them; the next message
 * tries again. The newest turn is never archived.
 */
import { partArchiveKey, putCreateOnly } from "./archive";
import type { SessionContext } from "./context";
import { insertArchivedPart } from "./generation-store";
import type { SessionRef } from "./session-state";
import { deleteThrough, exportJsonl, generationSize, listMessages, type TranscriptRow } from "./transcript";

/** A session's transcript limits (from the agent's configuration). */
export interface SessionLimitsInput {
  maxTurns: number;
  maxBytes: number;
}

/** How many of the oldest rows make the whole turns to drop for the generation to fit its limits (0: none). */
function rowsToArchive(rows: readonly TranscriptRow[], size: { userTurns: number; bytes: number }, limits: SessionLimitsInput): number {
  let turns = size.userTurns;
  let bytes = size.bytes;
  let cut = 0;
  // Drop whole turns (a user message and everything until the next one), oldest first.
  while (cut < rows.length - 1 && (turns > limits.maxTurns || bytes > limits.maxBytes)) {
    let end = cut + 1;
    while (end < rows.length && (rows[end] as TranscriptRow).role !== "user") end++;
    if (end >= rows.length) break; // never archive the newest turn
    for (let i = cut; i < end; i++) bytes -= new TextEncoder().encode((rows[i] as TranscriptRow).content).length;
    turns--;
    cut = end;
  }
  return cut;
}

/** Archives the oldest whole turns over the limits to R2, then deletes them here. */
export async function enforceLimits(cx: SessionContext, ref: SessionRef, limits: SessionLimitsInput): Promise<void> {
  const size = generationSize(cx.sql, ref.sessionId);
  if (size.userTurns <= limits.maxTurns && size.bytes <= limits.maxBytes) return;
  const rows = listMessages(cx.sql, ref.sessionId, 0, 100_000);
  const cut = rowsToArchive(rows, size, limits);
  if (cut === 0) return;
  const part = rows.slice(0, cut);
  const first = (part[0] as TranscriptRow).seq;
  const last = (part.at(-1) as TranscriptRow).seq;
  const key = partArchiveKey(ref.agentId, ref.sessionKey, ref.sessionId, first, last);
  try {
    if (!(await putCreateOnly(cx.env.AUDIT, key, exportJsonl(part)))) return;
  } catch {
    return; // R2 unavailable: the rows stay; the next message tries again.
  }
  cx.storage.transactionSync(() => {
    insertArchivedPart(cx.sql, ref.sessionId, first, last, key);
    deleteThrough(cx.sql, ref.sessionId, last);
  });
}
