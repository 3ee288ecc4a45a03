/**
 * What the run engine's modules share: the `RunHost` a SessionDO gives the engine, the `RunContext` every step
 * of a run receives (host, tool registry, per-run memos), the `Finish` a step may end a run with, and the one
 * way a lifecycle event is written (`emit`). No step holds state of its own; the engine owns the context.
 */
import type { RunLogger } from "../observability/run-lines";
import type { PromptManifest } from "../prompts/manifest";
import type { Sql } from "../storage/sql";
import type { SessionToolHost, SessionType, ToolRegistry } from "../tools/registry";
import type { EventType, RunEvent } from "./events";
import type { RunSpec } from "./spec";
import { appendEvent } from "./store";

/** What the engine needs from its SessionDO. */
export interface RunHost {
  sql: Sql;
  storage: DurableObjectStorage;
  env: Env;
  /** Lines to the console and R2; a run's own lines held while a caller waits for it (D-068). */
  logger: RunLogger;
  registry?: ToolRegistry;
  /** The session the runs belong to. */
  session(): { sessionKey: string; agentId: string; sessionId: string };
  /** History before `beforeSeq`, within the budget left by `fixedTokens` (compacting if needed). */
  history(o: { beforeSeq: number; spec: RunSpec; fixedTokens: number }): Promise<
    // `tokens`: the messages' estimated tokens, from the estimates stored per transcript row (issue 23).
    | { ok: true; messages: { role: "user" | "assistant" | "tool"; content: string }[]; summaries: string[]; tokens?: number }
    | { ok: false; estimatedTokens: number; inputBudget: number }
  >;
  /** S4 §5: the session's memory for a user message (redacted, within `bounds` or the defaults), or null when nothing matches. */
  retrieveMemory?(query: string, bounds?: { topK: number; maxChars: number }): { text: string; ids: string[]; scores: number[] } | null;
  /** Applies NOTES (S4 §2) of an assistant reply to the checkpoint; returns the visible text and traces. */
  applyNotes(reply: string): Promise<{ visible: string; traces: { kind: "notes_patch" | "actions"; data: object }[] }>;
  /** A redacted reply with the fragments of a secret split over this and earlier replies redacted too (issue 20 §5). */
  redactSplitReply?(content: string, apply?: boolean): string;
  /** Appends an assistant or tool message to the transcript (already redacted). */
  appendTranscript(m: { role: "assistant" | "tool"; content: string; runId: string; toolName?: string; toolCallId?: string }): number;
  recordManifest(turnId: string, manifest: PromptManifest): void;
  /** This object's id (approval ids name it). */
  objectId(): string;
  /** The SHA-256 the tool-schema lock pins for a tool, if any (schema-drift guard). */
  lockedSchemaHash?(tool: string): string | undefined;
  /** The session's channel and the capabilities an admin granted it (S4 §1.1). */
  channel(): string;
  capabilities(): readonly string[];
  /** Called after each lifecycle event is written, inside the same storage transaction; `actor` for the audit. */
  onEvent?(event: RunEvent, actor: string): void;
  /** Wakes this object's waiters on `runId` (a streamed run released text): never another instance's (after a crash). */
  wake?(runId: string): void;
  /** The session's S5 type (setup sessions alone get setup-only tools); `ordinary` when absent. */
  sessionType?(): SessionType;
  /** What the session offers S5 tools for a call of `runId`. */
  toolHost?(runId: string): SessionToolHost;
  /** The session's inline L2 (S5 `session.system_prompt`, set by an admin): replaces L2 only. */
  inlineRole?(): string | undefined;
  /**
   * Issue 24 §2: the chat prompt (Approve / Deny buttons) of an approval `runId` asks for, when the run came from a
   * Telegram or Slack conversation; null otherwise. Asked only for runs whose spec offers chat approvals.
   */
  chatApprovalPrompt?(runId: string): ChatApprovalPrompt | null;
}

/** An approval's chat prompt: the buttons' D1 rows (batched with the approval's reservation) and the queued message. */
export interface ChatApprovalPrompt {
  buttons(db: D1Database, a: { approvalId: string; agentId: string; createdAt: string; expiresAt: string }): Promise<D1PreparedStatement[]>;
  /** Queues the message; called inside the transaction that stores the approval. */
  enqueue(a: { id: string; run_id: string; tool: string; args: string; expires_at: string }): void;
}

/** How a step ends the run (`paused`: it waits for a human and goes back to the queue when one decides). */
export type Finish =
  | { status: "paused" }
  | { status: "completed"; output: string; payload?: Record<string, unknown> }
  | { status: "failed"; code: string; message: string }
  | { status: "cancelled"; reason: string };

/** What every step of a run works with. One run executes at a time, so the memos hold that run's answers only. */
export interface RunContext {
  host: RunHost;
  registry: ToolRegistry;
  /** Whether the run's agent is configured (L5 coding vs scratch), read once per run from D1. */
  configured: Map<string, boolean>;
  /** The env key names fulfilled for the session, read once per run (not per round). */
  envNames: Map<string, string[]>;
}

/** The pseudo-tool a malformed marker block is reported as. */
export const MARKER_BLOCK = "tool_calls.block";

/** Appends a lifecycle event and tells the host (waiters on the run's events wake up, the audit copies it). */
export function emit(
  ctx: RunContext,
  run: { id: string; agent_id: string },
  type: EventType,
  payload: Record<string, unknown>,
  actor = "system",
): void {
  const event = appendEvent(ctx.host.sql, run, type, payload);
  // Called inside the caller's storage transaction: the audit copy is written atomically with the event.
  ctx.host.onEvent?.(event, actor);
}

/** The session's S5 type, `ordinary` when the host does not say. */
export function sessionTypeOf(ctx: RunContext): SessionType {
  return ctx.host.sessionType?.() ?? "ordinary";
}

/** The text parsed as JSON, or the text itself when it is not JSON. */
export function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
