/**
 * The S4 checkpoint, NOTES and memory: the checkpoint (state, revision, bounded recent messages, trace tail),
 * applying the NOTES of an assistant reply to it (S4 §2, new decisions and the episode summary become searchable
 * memory, condense actions compact the history), admin grants and revocations of capabilities (S4 §1.1), and
 * storing memory items.
 */

import { readCheckpointRow, writeCheckpointRow } from "./checkpoint-store";
import type { SessionContext } from "./context";
import { compactNow, DEFAULT_KEEP_TURNS } from "./history";
import { type MemoryItem, type MemoryKind, remember } from "./memory";
import { EMPTY_STATE, grantCapability, type NotesTrace, processAssistantNotes, revokeCapability, State } from "./notes";
import { auditAdmin } from "./session-audit";
import { ensureSession, type SessionIdentity } from "./session-state";
import { latestMessages } from "./transcript";

/** S4 §1.2 Checkpoint. */
export interface Checkpoint {
  session_id: string;
  revision: number;
  updated_ts: number;
  state: State;
  recent_messages: { role: string; content: string }[];
  trace_tail: string[];
}

/** Bounds of the checkpoint's lists. */
const RECENT_MESSAGES = 20;
const TRACE_TAIL = 50;

/** The checkpoint with the recent messages of generation `sessionId`. */
export function checkpointOf(cx: Pick<SessionContext, "sql">, sessionId: string): Checkpoint {
  const row = readCheckpointRow(cx.sql);
  const recent = latestMessages(cx.sql, sessionId, RECENT_MESSAGES).map((m) => ({ role: m.role, content: m.content }));
  return {
    session_id: sessionId,
    revision: row?.revision ?? 0,
    updated_ts: row?.updated_ts ?? 0,
    state: row ? State.parse(JSON.parse(row.state)) : EMPTY_STATE,
    recent_messages: recent,
    trace_tail: row ? (JSON.parse(row.trace_tail) as string[]) : [],
  };
}

/** The S4 checkpoint of the current generation (creating the session on first use). */
export async function checkpoint(cx: SessionContext, identity: SessionIdentity): Promise<Checkpoint> {
  return checkpointOf(cx, (await ensureSession(cx, identity)).sessionId);
}

/** The capabilities an admin granted the session (S4 §1.1). */
export function grantedCapabilities(cx: Pick<SessionContext, "sql">): string[] {
  const row = readCheckpointRow(cx.sql);
  return row ? State.parse(JSON.parse(row.state)).capabilities_granted : [];
}

/** Writes the checkpoint at the next revision, with `tail` as its trace tail. */
export function writeCheckpoint(cx: Pick<SessionContext, "sql">, state: State, tail: readonly string[]): void {
  const revision = (readCheckpointRow(cx.sql)?.revision ?? 0) + 1;
  writeCheckpointRow(cx.sql, { revision, updated_ts: Date.now() / 1000, state: JSON.stringify(state), trace_tail: JSON.stringify(tail) });
}

/** Writes the checkpoint at the next revision, appending `traces` to the bounded trace tail. */
function saveCheckpoint(cx: SessionContext, state: State, traces: readonly NotesTrace[]): void {
  const row = readCheckpointRow(cx.sql);
  const tail = [...(row ? (JSON.parse(row.trace_tail) as string[]) : []), ...traces.map((t) => JSON.stringify(t))].slice(-TRACE_TAIL);
  writeCheckpoint(cx, state, tail);
}

/**
 * S4 §2 for one assistant reply: strips NOTES from the visible text, applies the patch, runs its actions, and
 * persists the new checkpoint. Malformed NOTES are traced, never fatal. Returns the checkpoint as it now is.
 */
export async function applyAssistantNotes(
  cx: SessionContext,
  identity: SessionIdentity,
  reply: string,
): Promise<{ visible: string; checkpoint: Checkpoint; traces: NotesTrace[]; compaction: "now" | "smart" | null }> {
  await ensureSession(cx, identity);
  const applied = await applyReplyNotes(cx, identity, reply);
  return { ...applied, checkpoint: await checkpoint(cx, identity) };
}

/**
 * `applyAssistantNotes` for a run's reply in an existing session: what the run needs (the visible text, the
 * traces), without reading the checkpoint's recent messages back — twice per reply before issue 23's third round,
 * 20 transcript rows each, for a checkpoint the run never looked at.
 */
export async function applyReplyNotes(
  cx: SessionContext,
  identity: SessionIdentity,
  reply: string,
): Promise<{ visible: string; traces: NotesTrace[]; compaction: "now" | "smart" | null }> {
  const row = readCheckpointRow(cx.sql);
  const before = row ? State.parse(JSON.parse(row.state)) : EMPTY_STATE;
  const result = processAssistantNotes(before, reply);
  if (result.traces.length > 0 || result.state !== before) saveCheckpoint(cx, result.state, result.traces);
  // New decisions and the episode summary become searchable memory (S4 §5).
  const now = new Date();
  for (const decision of result.state.decisions.filter((d) => !before.decisions.includes(d))) {
    await remember(cx.sql, { kind: "decision", text: decision, from_seq: null, to_seq: null }, now);
  }
  if (result.state.episode_summary && result.state.episode_summary !== before.episode_summary) {
    await remember(cx.sql, { kind: "note", text: result.state.episode_summary, from_seq: null, to_seq: null }, now);
  }
  if (result.compaction) await compactNow(cx, identity, result.compaction === "now" ? 2 : DEFAULT_KEEP_TURNS);
  return { visible: result.visible, traces: result.traces, compaction: result.compaction };
}

/** Admin: grants or revokes a capability (S4 §1.1; a grant removes it from pending). Audited. */
export async function changeCapability(
  cx: SessionContext,
  identity: SessionIdentity,
  cap: string,
  change: "grant" | "revoke",
): Promise<Checkpoint> {
  const current = await checkpoint(cx, identity);
  saveCheckpoint(cx, change === "grant" ? grantCapability(current.state, cap) : revokeCapability(current.state, cap), []);
  await auditAdmin(cx, change === "grant" ? "capability.granted" : "capability.revoked", {
    capability: cap,
    session_id: current.session_id,
  });
  return checkpoint(cx, identity);
}

/** Stores a memory item (idempotent: same kind and text, same id). Creates the session if needed. */
export async function rememberItem(
  cx: SessionContext,
  identity: SessionIdentity,
  item: { kind: MemoryKind; text: string },
): Promise<MemoryItem> {
  await ensureSession(cx, identity);
  return remember(cx.sql, { kind: item.kind, text: item.text, from_seq: null, to_seq: null }, new Date());
}
