/**
 * Firing slots (S3 §4 "missed windows are not replayed"; DESIGN "Scheduler"),
 * pure. An `@every` job's slots are `anchor + k·interval` (k ≥ 1), anchored when
 * its schedule was set; a one-shot has one slot, its time. The scheduler stores
 * the next slot not yet fired (`nextRunMs`); a tick at `now` fires the LATEST
 * slot that has come — once, however many were missed — and moves the next run
 * to the first slot after it.
 */

export interface SlotState {
  kind: "every" | "once";
  /** `every`: the interval; `once`: null. */
  intervalMs: number | null;
  /** `every`: when the schedule was set; `once`: the time. */
  anchorMs: number;
  /** The next slot not yet fired; null when the job will not fire again. */
  nextRunMs: number | null;
}

export interface DueFiring {
  /** The slot this firing stands for. */
  slotMs: number;
  /** Slots before it that were never fired and will not be (0 when on time). */
  missed: number;
  /** The next run after this firing; null for a one-shot (it is then disabled). */
  nextRunMs: number | null;
}

/** The first slot strictly after `afterMs`. */
export function slotAfter(s: Pick<SlotState, "kind" | "intervalMs" | "anchorMs">, afterMs: number): number | null {
  if (s.kind === "once") return s.anchorMs > afterMs ? s.anchorMs : null;
  const interval = s.intervalMs as number;
  if (afterMs < s.anchorMs) return s.anchorMs + interval;
  return s.anchorMs + (Math.floor((afterMs - s.anchorMs) / interval) + 1) * interval;
}

/** The firing due at `nowMs`, or null when the next slot has not come (or there is none). */
export function dueFiring(s: SlotState, nowMs: number): DueFiring | null {
  if (s.nextRunMs === null || s.nextRunMs > nowMs) return null;
  if (s.kind === "once") return { slotMs: s.nextRunMs, missed: 0, nextRunMs: null };
  const interval = s.intervalMs as number;
  // The latest slot at or before now; never earlier than the stored next run (which is always a slot).
  const latest = s.anchorMs + Math.floor((nowMs - s.anchorMs) / interval) * interval;
  const slotMs = Math.max(latest, s.nextRunMs);
  return { slotMs, missed: Math.round((slotMs - s.nextRunMs) / interval), nextRunMs: slotMs + interval };
}
