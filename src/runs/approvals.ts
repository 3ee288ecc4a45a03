/**
 * Human approvals (S1 §3.3 Phase 1, DESIGN "Approvals"): rows in the SessionDO
 * and the D1 index that lists them. An approval has its own id (`apr_` + the
 * object's id + random, never the tool_call_id), the tool and its redacted
 * arguments with their SHA-256, the requester, the channel and an expiry.
 * Decided once: a second decision is a conflict, a late one finds it expired.
 */
import { sha256Hex } from "../prompts/hash";
import type { Sql } from "../storage/sql";

export const APPROVAL_ID = /^apr_([0-9a-f]{64})([0-9a-f]{16})$/;

export type ApprovalStatus = "pending" | "approved" | "denied" | "expired";

export interface ApprovalRow {
  id: string;
  run_id: string;
  round: number;
  tool_call_id: string;
  tool: string;
  args: string;
  args_sha256: string;
  requester: string;
  channel: string;
  reason: string;
  status: ApprovalStatus;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  decided_by: string | null;
  decision_reason: string | null;
}

/** A new approval id inside the object `objectId`. */
export function mintApprovalId(objectId: string): string {
  const random = crypto.getRandomValues(new Uint8Array(8));
  return `apr_${objectId}${[...random].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The object id inside an approval id, or null. */
export const approvalObjectId = (id: string): string | null => APPROVAL_ID.exec(id)?.[1] ?? null;

export const argsDigest = (args: string): Promise<string> => sha256Hex(args);

export function getApproval(sql: Sql, id: string): ApprovalRow | undefined {
  return sql.one<ApprovalRow & Record<string, SqlStorageValue>>`SELECT * FROM approvals WHERE id = ${id}`;
}

export function approvalForCall(sql: Sql, runId: string, round: number, toolCallId: string): ApprovalRow | undefined {
  return sql.one<ApprovalRow & Record<string, SqlStorageValue>>`
    SELECT * FROM approvals WHERE run_id = ${runId} AND round = ${round} AND tool_call_id = ${toolCallId}`;
}

export function insertApproval(sql: Sql, a: Omit<ApprovalRow, "status" | "decided_at" | "decided_by" | "decision_reason">): void {
  sql.run`INSERT INTO approvals (id, run_id, round, tool_call_id, tool, args, args_sha256, requester, channel, reason, status, created_at, expires_at)
          VALUES (${a.id}, ${a.run_id}, ${a.round}, ${a.tool_call_id}, ${a.tool}, ${a.args}, ${a.args_sha256}, ${a.requester}, ${a.channel},
                  ${a.reason}, 'pending', ${a.created_at}, ${a.expires_at})`;
}

export function decideApprovalRow(
  sql: Sql,
  id: string,
  status: Exclude<ApprovalStatus, "pending">,
  by: string | null,
  reason: string | null,
  now: Date,
): void {
  sql.run`UPDATE approvals SET status = ${status}, decided_at = ${now.toISOString()}, decided_by = ${by}, decision_reason = ${reason}
          WHERE id = ${id} AND status = 'pending'`;
}

/** Pending approvals whose time is up. */
export function overdueApprovals(sql: Sql, now: Date): ApprovalRow[] {
  return sql.all<ApprovalRow & Record<string, SqlStorageValue>>`
    SELECT * FROM approvals WHERE status = 'pending' AND expires_at <= ${now.toISOString()} ORDER BY expires_at`;
}

/** When the next pending approval expires (ms), if any. */
export function nextExpiry(sql: Sql): number | null {
  const row = sql.one<{ at: string | null }>`SELECT MIN(expires_at) AS at FROM approvals WHERE status = 'pending'`;
  return row?.at ? Date.parse(row.at) : null;
}

// ---- D1 index -------------------------------------------------------------------------

export interface ApprovalIndexRow {
  approval_id: string;
  agent_id: string;
  run_id: string;
  session_key: string;
  tool: string;
  status: ApprovalStatus;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  /** Issue 24 §2: who decided (`admin`, `telegram:<user id>`, `slack:<user id>`) and through what; null while pending. */
  /** (Absent when written: null.) */
  decided_by?: string | null;
  decided_via?: DecidedVia | null;
}

/** Through what an approval was decided: the admin API (and dashboard), or a chat's button (issue 24 §2, D-075). */
export type DecidedVia = "admin" | "telegram" | "slack";

/** The channel a decider's name says it decided through (`telegram:…` → telegram); null for an expiry (no decider). */
export function decidedVia(decidedBy: string | null): DecidedVia | null {
  if (decidedBy === null) return null;
  const prefix = decidedBy.split(":", 1)[0];
  return prefix === "telegram" || prefix === "slack" ? prefix : "admin";
}

/** Creates or updates an approval's index row. */
export async function indexApproval(db: D1Database, r: ApprovalIndexRow): Promise<void> {
  await approvalIndexStatement(db, r).run();
}

/** The upsert of an approval's index row, for a batch (idempotent: a retried batch changes nothing). */
export function approvalIndexStatement(db: D1Database, r: ApprovalIndexRow): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO approvals (approval_id, agent_id, run_id, session_key, tool, status, created_at, expires_at, decided_at, decided_by, decided_via)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
       ON CONFLICT (approval_id) DO UPDATE SET status = excluded.status, decided_at = excluded.decided_at,
         decided_by = excluded.decided_by, decided_via = excluded.decided_via`,
    )
    .bind(
      r.approval_id,
      r.agent_id,
      r.run_id,
      r.session_key,
      r.tool,
      r.status,
      r.created_at,
      r.expires_at,
      r.decided_at,
      r.decided_by ?? null,
      r.decided_via ?? null,
    );
}

/** Approvals matching the filters, newest first: (created_at, approval_id) descending, a stable and unique order. */
export async function listApprovals(
  db: D1Database,
  f: {
    status?: string | undefined;
    agentId?: string | undefined;
    /** Keyset cursor: only approvals after this (created_at, approval_id) in list order. */
    after?: readonly [createdAt: string, approvalId: string] | undefined;
    limit: number;
  },
): Promise<ApprovalIndexRow[]> {
  const rows = await db
    .prepare(
      `SELECT approval_id, agent_id, run_id, session_key, tool, status, created_at, expires_at, decided_at, decided_by, decided_via FROM approvals
       WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR agent_id = ?2) AND (?3 IS NULL OR (created_at, approval_id) < (?3, ?4))
       ORDER BY created_at DESC, approval_id DESC LIMIT ?5`,
    )
    .bind(f.status ?? null, f.agentId ?? null, f.after?.[0] ?? null, f.after?.[1] ?? null, f.limit)
    .all<ApprovalIndexRow>();
  return rows.results;
}

/** Pending approvals of `agentId`, all callers and `caller`'s own. */
export async function pendingApprovalCounts(
  db: D1Database,
  agentId: string,
  caller: string,
  now: Date,
): Promise<{ agent: number; caller: number }> {
  const row = await db
    .prepare(
      `SELECT COUNT(*) AS agent, COALESCE(SUM(caller = ?3), 0) AS mine FROM approvals
       WHERE agent_id = ?1 AND status = 'pending' AND expires_at > ?2`,
    )
    .bind(agentId, now.toISOString(), caller)
    .first<{ agent: number; mine: number }>();
  return { agent: row?.agent ?? 0, caller: row?.mine ?? 0 };
}

export type ApprovalSlot = { ok: true } | { ok: false; limit: "agent" | "caller"; pending: number; max: number };

/**
 * Indexes a new pending approval only if its agent and its caller are both under their pending limits (issue 20
 * §4). Count and insert are one D1 statement, and D1 runs statements one at a time, so requests racing from any
 * number of sessions never leave more than the limit pending — unlike counting first and inserting later.
 */
export async function reserveApprovalSlot(
  db: D1Database,
  r: Omit<ApprovalIndexRow, "status" | "decided_at" | "decided_by" | "decided_via"> & { caller: string },
  limits: { perAgent: number; perCaller: number },
  now: Date,
  /** Statements that ride the reservation's round trip, in its batch (a chat's approval buttons, issue 24 §2). */
  alongside: readonly D1PreparedStatement[] = [],
): Promise<ApprovalSlot> {
  const at = now.toISOString();
  const reserve = db
    .prepare(
      `INSERT INTO approvals (approval_id, agent_id, run_id, session_key, tool, status, created_at, expires_at, decided_at, caller)
       SELECT ?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, NULL, ?8
       WHERE (SELECT COUNT(*) FROM approvals WHERE agent_id = ?2 AND status = 'pending' AND expires_at > ?9) < ?10
         AND (SELECT COUNT(*) FROM approvals WHERE agent_id = ?2 AND caller = ?8 AND status = 'pending' AND expires_at > ?9) < ?11`,
    )
    .bind(
      r.approval_id,
      r.agent_id,
      r.run_id,
      r.session_key,
      r.tool,
      r.created_at,
      r.expires_at,
      r.caller,
      at,
      limits.perAgent,
      limits.perCaller,
    );
  const inserted = alongside.length === 0 ? await reserve.run() : ((await db.batch([reserve, ...alongside]))[0] as D1Result);
  if (inserted.meta.changes === 1) return { ok: true };
  // Which limit was full, for the message (read after the fact: the refusal itself was atomic).
  const counts = await pendingApprovalCounts(db, r.agent_id, r.caller, now);
  return counts.agent >= limits.perAgent
    ? { ok: false, limit: "agent", pending: counts.agent, max: limits.perAgent }
    : { ok: false, limit: "caller", pending: counts.caller, max: limits.perCaller };
}
