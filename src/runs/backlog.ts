/**
 * The approvals backlog as the early check of `submitTurn` sees it (S1 §3.3, issue 20 §4, issue 23 D-055):
 * each isolate keeps the pending counts it last read from D1, per agent and per (agent, caller), instead of
 * asking D1 on every turn.
 *
 * A count read less than `BACKLOG_CACHE_MS` ago serves only while it cannot err the wrong way inside this
 * isolate: at or over the limit it refuses (a backlog cleared elsewhere is seen at most `BACKLOG_CACHE_MS`
 * late; a decision made through this isolate forgets it at once), under the limit it admits only while the
 * count plus the runs this isolate has admitted since the read stays under the limit (each admitted run is
 * assumed to have asked for an approval); past that, D1 is asked again — once: checks arriving while that read is
 * in flight wait for it. A run the Worker waited for gives its slot back when it ends without an approval still
 * pending (`giveSlotBack`, D-069: it completed, or made no tool call), in the copies that admitted it if they are
 * still the same read; a run that paused keeps its slot. Approvals made elsewhere in the last
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

/** The isolate's clock for the copies (tests set `now` to keep a run of turns inside one `BACKLOG_CACHE_MS`). */
export const backlogClock = { now: (): number => Date.now() };

/** Reads in flight, per (agent, caller): a check that finds the copy stale waits for the read already asked. */
const reading = new Map<string, Promise<unknown>>();

/** Pending approvals of `agentId` and of `caller` on it, from this isolate's copy when it serves, else from D1. */
export async function pendingBacklog(
  db: D1Database,
  agentId: string,
  caller: string,
  limits: { agent: number; caller: number },
  now = backlogClock.now(),
): Promise<{ agent: number; caller: number }> {
  const key = callerKey(agentId, caller);
  for (;;) {
    const a = agents.get(agentId);
    const c = callers.get(key);
    if (serves(a, limits.agent, now) && serves(c, limits.caller, now)) return { agent: a.pending, caller: c.pending };
    const inFlight = reading.get(key);
    if (!inFlight) return read(db, agentId, caller, now);
    await inFlight.catch(() => {}); // its copy answers next (or, if it failed, a read of this check's own)
  }
}

/** Reads the counts from D1 and keeps them as the copies of `agentId` and (`agentId`, `caller`). */
async function read(db: D1Database, agentId: string, caller: string, now: number): Promise<{ agent: number; caller: number }> {
  const key = callerKey(agentId, caller);
  const asked = pendingApprovalCounts(db, agentId, caller, new Date(now));
  reading.set(key, asked);
  try {
    const counts = await asked;
    if (agents.size + callers.size >= MAX_ENTRIES) forgetBacklog();
    agents.set(agentId, { at: now, pending: counts.agent, admitted: 0 });
    callers.set(key, { at: now, pending: counts.caller, admitted: 0 });
    return counts;
  } finally {
    if (reading.get(key) === asked) reading.delete(key);
  }
}

/** The copies one admitted run was counted against, until it gives its slot back (at most once). */
export interface Admission {
  copies: { map: Map<string, Seen>; key: string; seen: Seen }[];
  returned: boolean;
}

/** Counts a run the early check let through against the copies that answered for it. */
export function noteAdmitted(agentId: string, caller: string): Admission {
  const admission: Admission = { copies: [], returned: false };
  for (const [map, key] of [
    [agents, agentId],
    [callers, callerKey(agentId, caller)],
  ] as const) {
    const seen = map.get(key);
    if (!seen) continue;
    seen.admitted++;
    admission.copies.push({ map, key, seen });
  }
  return admission;
}

/**
 * An admitted run ended with no approval of it pending: the assumption that it asked for one is withdrawn from each
 * copy that admitted it, if that copy is still the same read (a newer read counted whatever it had asked).
 */
export function giveSlotBack(admission: Admission): void {
  if (admission.returned) return;
  admission.returned = true;
  for (const { map, key, seen } of admission.copies) if (map.get(key) === seen && seen.admitted > 0) seen.admitted--;
}

/** Drops this isolate's copies: after an approval was decided through it, and in tests. */
export function forgetBacklog(): void {
  agents.clear();
  callers.clear();
}
