/**
 * How the dashboard writes token counts and costs (issue 25 §3, D-082): no DOM here, so the browser tests import it
 * to compute what the page must show. Costs arrive as exact decimal USD strings (D-078); the text rounds them for
 * reading and the page keeps the exact string in a title.
 */

/** A count with thin groups of thousands: `12,345`. */
export function countText(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  return n.toLocaleString("en-US");
}

/**
 * An exact USD decimal string, rounded for reading: `$0`, `<$0.0001`, `$0.0123` (4 decimals under a dollar),
 * `$12.35`, `$1,234.50`. Null (cost unknown) is `—`.
 */
export function usdText(usd: string | null | undefined): string {
  if (usd === null || usd === undefined || usd === "") return "—";
  const v = Number(usd);
  if (!Number.isFinite(v)) return usd;
  if (v === 0) return "$0";
  const sign = v < 0 ? "-" : "";
  const a = Math.abs(v);
  if (a < 0.0001) return `${sign}<$0.0001`;
  const decimals = a < 1 ? 4 : 2;
  return `${sign}$${a.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals })}`;
}

/** The exact cost for a title: `$0.000012345 (exact)`; null: `no cost: model not priced or usage not reported`. */
export function usdTitle(usd: string | null | undefined): string {
  return usd === null || usd === undefined ? "no cost known: the model has no pricing, or a call reported no usage" : `$${usd} exact`;
}
