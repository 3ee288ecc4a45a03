/**
 * Generations and archives: `/new` archives the current generation to R2 (create-only) and starts another,
 * `/resume` brings an archived one back, an admin restores a `save_snapshot` snapshot into a new generation, and
 * any generation's messages are read back (archived parts, then live rows). Nothing changes when an archive fails.
 */
import { generationArchiveKey, putCreateOnly } from "./archive";
import { type Checkpoint, checkpointOf, writeCheckpoint } from "./checkpoint";
import { newId, type SessionContext } from "./context";
import {
  archivedPartKeys,
  archivedPartKeysAfter,
  deleteArchivedParts,
  generationArchive,
  insertGeneration,
  markGenerationArchived,
  reopenGeneration,
} from "./generation-store";
import { State } from "./notes";
import { auditAdmin } from "./session-audit";
import { hasActiveRun } from "./session-runs-store";
import { ensureSession, indexGeneration, refreshIndex, type SessionIdentity, type SessionRef } from "./session-state";
import { setCurrentGeneration } from "./session-store";
import { appendMessage, deleteThrough, exportJsonl, importRows, listMessages, parseJsonl, type TranscriptRow } from "./transcript";

/** The answer of `/new` and `/resume`. */
export type GenerationResult =
  | { ok: true; sessionId: string; previousSessionId: string }
  | { ok: false; reason: "archive_failed" | "not_found" };

/** A `save_snapshot` snapshot as an admin restores it (S4 §1.2). */
export interface Snapshot {
  snapshot_id: string;
  state: unknown;
  recent_messages: { role: string; content: string }[];
  trace_tail: string[];
}

/** A transcript archive read from R2; null when it is missing or R2 failed. */
export async function readArchive(cx: SessionContext, key: string): Promise<TranscriptRow[] | null> {
  try {
    const object = await cx.env.AUDIT.get(key);
    return object ? parseJsonl(await object.text()) : null;
  } catch {
    return null;
  }
}

/** Archives the current generation (its archived parts and live rows, create-only), then removes its rows here. False when R2 failed. */
async function archiveCurrent(cx: SessionContext, ref: SessionRef): Promise<boolean> {
  const rows = listMessages(cx.sql, ref.sessionId, 0, 1_000_000);
  const key = generationArchiveKey(ref.agentId, ref.sessionKey, ref.sessionId);
  let body = "";
  for (const partKey of archivedPartKeys(cx.sql, ref.sessionId)) {
    const archived = await readArchive(cx, partKey);
    if (archived === null) return false;
    body += exportJsonl(archived);
  }
  body += exportJsonl(rows);
  try {
    if (!(await putCreateOnly(cx.env.AUDIT, key, body))) return false;
  } catch {
    return false;
  }
  const last = rows.at(-1)?.seq ?? 0;
  cx.storage.transactionSync(() => {
    markGenerationArchived(cx.sql, ref.sessionId, new Date().toISOString(), key);
    deleteArchivedParts(cx.sql, ref.sessionId);
    deleteThrough(cx.sql, ref.sessionId, last);
  });
  return true;
}

/** `/new`: archives the current generation to R2 and starts another. Nothing changes if the archive fails. */
export async function newGeneration(cx: SessionContext, identity: SessionIdentity): Promise<GenerationResult> {
  const ref = await ensureSession(cx, identity);
  let result: GenerationResult = { ok: false, reason: "archive_failed" };
  // No other event may append to the generation while it is archived and switched.
  await cx.state.blockConcurrencyWhile(async () => {
    if (!(await archiveCurrent(cx, ref))) return;
    const sessionId = newId("ses");
    cx.storage.transactionSync(() => {
      insertGeneration(cx.sql, sessionId, new Date().toISOString());
      setCurrentGeneration(cx.sql, sessionId);
    });
    result = { ok: true, sessionId, previousSessionId: ref.sessionId };
  });
  const outcome = result as GenerationResult; // assigned inside the callback above
  if (outcome.ok) await indexGeneration(cx, { ...ref, sessionId: outcome.sessionId });
  return outcome;
}

/** `/resume <session_id>`: brings back an archived generation of this same session key. */
export async function resumeGeneration(cx: SessionContext, identity: SessionIdentity, targetSessionId: string): Promise<GenerationResult> {
  const ref = await ensureSession(cx, identity);
  const target = generationArchive(cx.sql, targetSessionId);
  if (!target) return { ok: false, reason: "not_found" };
  if (targetSessionId === ref.sessionId) return { ok: true, sessionId: ref.sessionId, previousSessionId: ref.sessionId };
  let result: GenerationResult = { ok: false, reason: "archive_failed" };
  await cx.state.blockConcurrencyWhile(async () => {
    if (!(await archiveCurrent(cx, ref))) return;
    const rows = target.archive_key ? await readArchive(cx, target.archive_key) : [];
    if (rows === null) return;
    cx.storage.transactionSync(() => {
      importRows(cx.sql, rows);
      reopenGeneration(cx.sql, targetSessionId);
      setCurrentGeneration(cx.sql, targetSessionId);
    });
    result = { ok: true, sessionId: targetSessionId, previousSessionId: ref.sessionId };
  });
  const outcome = result as GenerationResult; // assigned inside the callback above
  if (outcome.ok) await refreshIndex(cx, ref.sessionKey, targetSessionId, true);
  return outcome;
}

/** Starts generation `id` holding the snapshot: its recent messages as transcript, its state and trace tail as checkpoint. */
function startFromSnapshot(cx: SessionContext, id: string, snapshot: Snapshot, restored: State): void {
  const now = new Date();
  cx.storage.transactionSync(() => {
    insertGeneration(cx.sql, id, now.toISOString());
    setCurrentGeneration(cx.sql, id);
    for (const m of snapshot.recent_messages) {
      const role = m.role === "assistant" || m.role === "tool" ? m.role : "user";
      appendMessage(cx.sql, { session_id: id, role, content: m.content }, now);
    }
    writeCheckpoint(cx, restored, snapshot.trace_tail);
  });
}

/**
 * Admin: restores a snapshot of this session's checkpoint (S4 §1.2, taken by `save_snapshot`). Like `/new`, the
 * current generation is archived (and stays resumable); the new generation's transcript is the snapshot's recent
 * messages, and the checkpoint's state and trace tail become the snapshot's, at the next revision (revisions
 * only grow). Refused while a run of the session is queued, running or awaiting approval.
 */
export async function restoreSnapshot(
  cx: SessionContext,
  identity: SessionIdentity,
  snapshot: Snapshot,
): Promise<{ ok: true; previousSessionId: string; checkpoint: Checkpoint } | { ok: false; reason: "archive_failed" | "busy" }> {
  const ref = await ensureSession(cx, identity);
  const restored = State.parse(snapshot.state);
  if (hasActiveRun(cx.sql)) return { ok: false, reason: "busy" };
  let sessionId: string | null = null;
  await cx.state.blockConcurrencyWhile(async () => {
    if (hasActiveRun(cx.sql) || !(await archiveCurrent(cx, ref))) return;
    const id = newId("ses");
    startFromSnapshot(cx, id, snapshot, restored);
    sessionId = id;
  });
  if (sessionId === null) return { ok: false, reason: hasActiveRun(cx.sql) ? "busy" : "archive_failed" };
  await indexGeneration(cx, { ...ref, sessionId });
  await auditAdmin(cx, "snapshot.restored", {
    snapshot_id: snapshot.snapshot_id,
    session_id: sessionId,
    previous_session_id: ref.sessionId,
  });
  return { ok: true, previousSessionId: ref.sessionId, checkpoint: checkpointOf(cx, sessionId) };
}

/**
 * Every message of a generation of this session, in order (archived parts, then live rows); with `page`, only
 * those with seq > `afterSeq`, at most `limit` of them (the admin messages list pages on seq). Null: no such generation.
 */
export async function generationMessages(
  cx: SessionContext,
  sessionId: string,
  page?: { afterSeq: number; limit: number },
): Promise<TranscriptRow[] | null> {
  const generation = generationArchive(cx.sql, sessionId);
  if (!generation) return null;
  const afterSeq = page?.afterSeq ?? 0;
  const limit = page?.limit ?? 1_000_000;
  if (generation.archived_at && generation.archive_key) {
    const archived = await readArchive(cx, generation.archive_key);
    return archived && (page ? archived.filter((r) => r.seq > afterSeq).slice(0, limit) : archived);
  }
  const rows: TranscriptRow[] = [];
  for (const partKey of archivedPartKeysAfter(cx.sql, sessionId, afterSeq)) {
    if (rows.length >= limit) break;
    const archived = await readArchive(cx, partKey);
    if (archived) rows.push(...archived.filter((r) => r.seq > afterSeq));
  }
  if (rows.length < limit) rows.push(...listMessages(cx.sql, sessionId, afterSeq, limit - rows.length));
  return rows.slice(0, limit);
}

/** A generation's transcript as JSONL, byte-stable (null: no such generation). */
export async function exportTranscript(cx: SessionContext, sessionId: string): Promise<string | null> {
  const rows = await generationMessages(cx, sessionId);
  return rows ? exportJsonl(rows) : null;
}
