/**
 * A session's inline L2 (S5 `session.system_prompt`; it replaces L2 only), per generation: read by the run engine
 * for each model call, read and set by admins. Setting and clearing are audited with the hash and size only —
 * the text itself stays out of the audit stream.
 */
import { sha256Hex } from "../prompts/hash";
import type { SessionContext } from "./context";
import { auditAdmin } from "./session-audit";
import { ensureSession, type SessionIdentity } from "./session-state";
import { deleteMeta, metaValue, setMeta } from "./session-store";

/** A session's inline L2 as stored. */
export interface StoredSystemPrompt {
  text: string;
  sha256: string;
  bytes: number;
  set_at: string;
}

/** The admin system-prompt calls' answer: the prompt (null: none), or `gone` for an archived generation. */
export type SystemPromptAnswer = { ok: true; prompt: StoredSystemPrompt | null } | { ok: false; reason: "gone" };

const keyOf = (sessionId: string) => `system_prompt:${sessionId}`;

/** The inline L2 set for generation `sessionId`, if any. */
export function inlinePrompt(cx: Pick<SessionContext, "sql">, sessionId: string): StoredSystemPrompt | undefined {
  const value = metaValue(cx.sql, keyOf(sessionId));
  return value ? (JSON.parse(value) as StoredSystemPrompt) : undefined;
}

/** Admin: the inline L2 of generation `sessionId` (null: none set); `gone` when it is not the current generation. */
export async function getSystemPrompt(cx: SessionContext, identity: SessionIdentity, sessionId: string): Promise<SystemPromptAnswer> {
  const state = await ensureSession(cx, identity);
  if (state.sessionId !== sessionId) return { ok: false, reason: "gone" };
  return { ok: true, prompt: inlinePrompt(cx, sessionId) ?? null };
}

/** Admin: sets (`text`) or clears (null) the inline L2 of the current generation; the next model call uses it. */
export async function setSystemPrompt(
  cx: SessionContext,
  identity: SessionIdentity,
  sessionId: string,
  text: string | null,
): Promise<SystemPromptAnswer> {
  const state = await ensureSession(cx, identity);
  if (state.sessionId !== sessionId) return { ok: false, reason: "gone" };
  const previous = inlinePrompt(cx, sessionId);
  if (text === null) {
    deleteMeta(cx.sql, keyOf(sessionId));
    if (previous) await auditAdmin(cx, "session.system_prompt_cleared", { session_id: sessionId, sha256: previous.sha256 });
    return { ok: true, prompt: null };
  }
  const sha256 = await sha256Hex(text);
  const prompt = { text, sha256, bytes: new TextEncoder().encode(text).length, set_at: new Date().toISOString() };
  setMeta(cx.sql, keyOf(sessionId), JSON.stringify(prompt));
  await auditAdmin(cx, "session.system_prompt_set", { session_id: sessionId, sha256, bytes: prompt.bytes });
  return { ok: true, prompt };
}
