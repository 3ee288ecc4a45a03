/** How the dashboard writes durations and offsets: no DOM here, so the browser tests import it to compute what the page must show. */

/** `+320 ms`, `+1.25 s`, `+2 min 05 s`: how long after the run's first event. */
export function offsetText(ms: number): string {
  const t = Math.max(0, Math.round(ms));
  if (t < 1000) return `+${t} ms`;
  if (t < 60_000) return `+${(t / 1000).toFixed(2)} s`;
  return `+${Math.floor(t / 60_000)} min ${String(Math.floor((t % 60_000) / 1000)).padStart(2, "0")} s`;
}

/** A duration as `320 ms` or `1.25 s` (null: —). */
export function durationText(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  return offsetText(ms).slice(1);
}
