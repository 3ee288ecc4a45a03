/**
 * Reaching a SessionDO's modules from a test, inside the object (`runInDurableObject`): for what no RPC serves
 * (the facade's RPC methods are the ones src/ calls; tests use the modules themselves for the rest).
 */
import { runInDurableObject } from "cloudflare:test";
import { outboxSize } from "../../src/audit/outbox";
import { applyAssistantNotes, rememberItem } from "../../src/sessions/checkpoint";
import { type SessionContext, sessionContext } from "../../src/sessions/context";
import { buildHistory, type HistoryOptions } from "../../src/sessions/history";
import type { MemoryKind } from "../../src/sessions/memory";
import { ensureSession, type SessionIdentity } from "../../src/sessions/session-state";
import { describeStorage } from "../../src/sessions/session-store";

/** Runs `fn` inside the session object behind `stub`, on a context over its storage and env. */
export function inSession<T>(stub: DurableObjectStub, fn: (cx: SessionContext) => T | Promise<T>): Promise<T> {
  return runInDurableObject(stub, (instance: unknown, state: DurableObjectState) =>
    fn(sessionContext(state, (instance as { env: Env }).env)),
  );
}

/** Audit events of the session not yet in R2. */
export function auditBacklog(stub: DurableObjectStub): Promise<number> {
  return inSession(stub, (cx) => outboxSize(cx.sql));
}

/** The storage schema version in force and when the session's storage was first created (creates the object). */
export function describeSession(stub: DurableObjectStub): Promise<{ schemaVersion: number; createdAt: string }> {
  return inSession(stub, (cx) => describeStorage(cx.sql));
}

/** S4 §2 for one assistant reply, applied inside the session object (checkpoint.ts). */
export function applyNotesIn(stub: DurableObjectStub, identity: SessionIdentity, reply: string) {
  return inSession(stub, (cx) => applyAssistantNotes(cx, identity, reply));
}

/** Stores a memory item in the session (checkpoint.ts; creates the session if needed). */
export function rememberIn(stub: DurableObjectStub, identity: SessionIdentity, item: { kind: MemoryKind; text: string }) {
  return inSession(stub, (cx) => rememberItem(cx, identity, item));
}

/** The history for the session's next model turn, built inside the object (history.ts). */
export function historyIn(stub: DurableObjectStub, identity: SessionIdentity, o: HistoryOptions) {
  return inSession(stub, async (cx) => buildHistory(cx, await ensureSession(cx, identity), o));
}
