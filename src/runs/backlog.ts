/**
 * The approvals backlog as the early check of `submitTurn` sees it (S1 §3.3, issue 20 §4, issue 23 D-055):
 * each isolate keeps the pending counts it last read from D1, per agent and per (agent, caller), instead of
 * asking D1 on every turn.
 *
 * A count read less than `BACKLOG_CACHE_MS` ago serves only while it cannot err the wrong way inside this
 * isolate: at or over the limit it refuses (a backlog cleared elsewhere is seen at most `BACKLOG_CACHE_MS`
 * late; a decision made through this isolate forgets it at once), under the limit it admits only while the
 * count plus the runs this isolate has admitted since the read stays under the limit (each admitted run is
 * assumed to have asked for an approval); past that, D1 is asked again. Approvals made elsewhere in the last
 * `BACKLOG_CACHE_MS` (other isolates, channel senders, jobs) can be missed by the early answer — as requests
 * racing past it always could — and the limit itself is still never exceeded: `reserveApprovalSlot` counts
 * and inserts in one D1 statement when the approval is indexed.
 */
import { pendingApprovalCounts } from "./approvals";

/** The longest an isolate answers the early check from a count it read (D-055). */
export const BACKLOG_CACHE_MS = 2_000;
/** Entries kept before the isolate's copy is dropped whole (an isolate serves a bounded set of agents and callers). */
const MAX_ENTRIES = 4_096;

interface Seen {
  at: number;
  pending: number;
  admitted: number;
}

const agents = new Map<string, Seen>();
const callers = new Map<string, Seen>();
const callerKey = (agentId: string, caller: string) => `${agentId}\u0000${caller}`;

/** True when `seen` may answer for `limit` at `now` (see the module comment). */
function serves(seen: Seen | undefined, limit: number, now: number): seen is Seen {
  if (!seen || now < seen.at || now - seen.at >= BACKLOG_CACHE_MS) return false;
  return seen.pending >= limit || seen.pending + seen.admitted < limit;
}

/** Pending approvals of `agentId` and of `caller` on it, from this isolate's copy when it serves, else from D1. */
export async function pendingBacklog(
  db: D1Database,
  agentId: string,
  caller: string,
  limits: { agent: number; caller: number },
  now = Date.now(),
): Promise<{ agent: number; caller: number }> {
  const a = agents.get(agentId);
  const c = callers.get(callerKey(agentId, caller));
  if (serves(a, limits.agent, now) && serves(c, limits.caller, now)) return { agent: a.pending, caller: c.pending };
  const counts = await pendingApprovalCounts(db, agentId, caller, new Date(now));
  if (agents.size + callers.size >= MAX_ENTRIES) forgetBacklog();
  agents.set(agentId, { at: now, pending: counts.agent, admitted: 0 });
  callers.set(callerKey(agentId, caller), { at: now, pending: counts.caller, admitted: 0 });
  return counts;
}

/** Counts a run the early check let through against the copies that answered for it. */
export function noteAdmitted(agentId: string, caller: string): void {
  const a = agents.get(agentId);
  const c = callers.get(callerKey(agentId, caller));
  if (a) a.admitted++;
  if (c) c.admitted++;
}

/** Drops this isolate's copies: after an approval was decided through it, and in tests. */
export function forgetBacklog(): void {
  agents.clear();
  callers.clear();
}
