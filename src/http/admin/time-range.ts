/**
 * The `from`/`to` query bounds of a list (GET /api/admin/runs): ISO 8601 dates or zoned date-times, normalised to
 * the `toISOString` form the index stores, so comparing them with `created_at` as text orders them as times.
 */
import { GatewayError } from "../../errors";

/** `YYYY-MM-DD`, or a date-time with minutes, optional seconds and fraction, and a zone (`Z` or `±HH:MM`). */
const ISO_BOUND = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/** The bound as `toISOString` text, or null when it is not a real ISO 8601 date or zoned date-time. */
export function isoBound(value: string): string | null {
  const m = ISO_BOUND.exec(value);
  if (!m) return null;
  const [y, mo, d, h = "0", mi = "0", s = "0"] = [m[1], m[2], m[3], m[4], m[5], m[6]].map((p) => p ?? undefined) as string[];
  const day = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  // Date rolls 2026-02-30 over to March: a day that does not exist is refused, as are hours and minutes out of range.
  if (day.getUTCMonth() !== Number(mo) - 1 || day.getUTCDate() !== Number(d)) return null;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return null;
  const t = Date.parse(m[7] === undefined ? `${value}T00:00:00Z` : value);
  return Number.isNaN(t) ? null : new Date(t).toISOString();
}

/** The list's time range, normalised; 400 `invalid.request` naming a bound that is not a time, or an empty range. */
export function timeRange(from: string | undefined, to: string | undefined): { from?: string; to?: string } {
  const norm = (name: string, v: string | undefined) => {
    if (v === undefined) return undefined;
    const iso = isoBound(v);
    if (iso === null)
      throw new GatewayError(
        "invalid.request",
        `${name}: ${JSON.stringify(v)} is not an ISO 8601 date or date-time with a zone (e.g. 2026-11-27T00:00:00Z)`,
      );
    return iso;
  };
  const range = { from: norm("from", from), to: norm("to", to) };
  if (range.from !== undefined && range.to !== undefined && range.from >= range.to)
    throw new GatewayError("invalid.request", `from (${range.from}) must be before to (${range.to})`);
  return Object.fromEntries(Object.entries(range).filter(([, v]) => v !== undefined));
}
