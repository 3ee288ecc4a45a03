/**
 * Run lifecycle events (S3 §2): `run.created`, `run.started`, then rounds of
 * `model.requested`, `tool.call`, (`approval.requested`, `approval.decided`,)
 * `tool.result`, and exactly one terminal event — `run.completed`,
 * `run.failed` or `run.cancelled`. Minimum fields: event_id, event_type, ts,
 * run_id, agent_id, seq (strictly increasing per run, no gaps), payload.
 * `nextEvent` builds events in order and refuses an illegal transition, so a
 * run's log cannot be written out of order.
 */
import { z } from "zod";

export const EVENT_TYPES = [
  "run.created",
  "run.started",
  "model.requested",
  "tool.call",
  "approval.requested",
  "approval.decided",
  "tool.result",
  "run.completed",
  "run.failed",
  "run.cancelled",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const TERMINAL: ReadonlySet<EventType> = new Set(["run.completed", "run.failed", "run.cancelled"]);

export const RunEvent = z.strictObject({
  event_id: z.string().min(1),
  event_type: z.enum(EVENT_TYPES),
  ts: z.iso.datetime(),
  run_id: z.string().min(1),
  agent_id: z.string().min(1),
  seq: z.int().positive(),
  payload: z.record(z.string(), z.unknown()),
});
export type RunEvent = z.infer<typeof RunEvent>;

/** What may follow each event type (anything may be followed by a terminal event once the run exists). */
const NEXT: Record<EventType, readonly EventType[]> = {
  "run.created": ["run.started"],
  "run.started": ["model.requested"],
  "model.requested": ["model.requested", "tool.call"],
  "tool.call": ["tool.call", "approval.requested", "tool.result"],
  "approval.requested": ["approval.decided"],
  "approval.decided": ["tool.call", "approval.requested", "tool.result"],
  "tool.result": ["tool.result", "tool.call", "approval.requested", "model.requested"],
  "run.completed": [],
  "run.failed": [],
  "run.cancelled": [],
};

/** Whether `next` may follow `previous` (undefined = no event yet). */
export function canFollow(previous: EventType | undefined, next: EventType): boolean {
  if (previous === undefined) return next === "run.created";
  if (TERMINAL.has(previous)) return false;
  if (TERMINAL.has(next)) return true;
  return NEXT[previous].includes(next);
}

/** The next event of a run, or an error naming the illegal transition. */
export function nextEvent(
  previous: Pick<RunEvent, "event_type" | "seq"> | undefined,
  e: { event_type: EventType; run_id: string; agent_id: string; payload?: Record<string, unknown>; now?: Date },
): { ok: true; event: RunEvent } | { ok: false; error: string } {
  if (!canFollow(previous?.event_type, e.event_type)) {
    return { ok: false, error: `${e.event_type} cannot follow ${previous?.event_type ?? "nothing"}` };
  }
  return {
    ok: true,
    event: {
      event_id: `evt_${crypto.randomUUID().replaceAll("-", "")}`,
      event_type: e.event_type,
      ts: (e.now ?? new Date()).toISOString(),
      run_id: e.run_id,
      agent_id: e.agent_id,
      seq: (previous?.seq ?? 0) + 1,
      payload: e.payload ?? {},
    },
  };
}

/** Checks a whole run's log: legal order, seq 1..n without gaps, one terminal event at the end (if finished). */
export function validateRunLog(events: readonly RunEvent[]): string | null {
  let previous: RunEvent | undefined;
  for (const e of events) {
    if (e.seq !== (previous?.seq ?? 0) + 1) return `seq ${e.seq} after ${previous?.seq ?? 0}: seq must increase by exactly 1`;
    if (!canFollow(previous?.event_type, e.event_type)) return `${e.event_type} cannot follow ${previous?.event_type ?? "nothing"}`;
    previous = e;
  }
  return null;
}

/**
 * Payload fields that identify the hidden prompt layers (S2 §5, DESIGN: end users never see layer text or
 * hashes). They stay in storage, the admin run view, audit and bundles; API callers get events without them.
 */
export const ADMIN_ONLY_PAYLOAD_FIELDS: readonly string[] = ["stack_sha256", "layers", "manifest"];

/** An event as an API caller sees it: the same event without the admin-only payload fields. */
export function eventForApiCaller<E extends { payload: Record<string, unknown> }>(event: E): E {
  if (!ADMIN_ONLY_PAYLOAD_FIELDS.some((f) => Object.hasOwn(event.payload, f))) return event;
  const payload = Object.fromEntries(Object.entries(event.payload).filter(([k]) => !ADMIN_ONLY_PAYLOAD_FIELDS.includes(k)));
  return { ...event, payload };
}
