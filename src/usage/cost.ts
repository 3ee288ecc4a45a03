/**
 * Cost from provider-reported tokens and the model's configured pricing (issue 25 §2, D-078), in integer pico-USD
 * (10^-12 USD): a price of p USD per million tokens is p × 10^6 pico-USD per token, an integer because prices have at
 * most 6 decimals (src/config/schema.ts), so a cost is exact and sums are exact. Shown as a decimal USD string.
 */
import type { ModelPricing } from "../config/schema";

/** One model call's provider-reported tokens (cached: the part of the prompt served from the provider's cache). */
export interface ReportedTokens {
  prompt: number;
  completion: number;
  cached: number;
}

const picoPerToken = (usdPerMillion: number): bigint => BigInt(Math.round(usdPerMillion * 1e6));

/** The call's cost in pico-USD: cached prompt tokens at the cached price (else the input price), the rest at the input price. */
export function callCostPico(pricing: ModelPricing, t: ReportedTokens): number {
  const cached = Math.min(t.cached, t.prompt);
  const pico =
    BigInt(t.prompt - cached) * picoPerToken(pricing.inputPerMillion) +
    BigInt(cached) * picoPerToken(pricing.cachedInputPerMillion ?? pricing.inputPerMillion) +
    BigInt(t.completion) * picoPerToken(pricing.outputPerMillion);
  // A single call stays far below 2^53 pico-USD (≈ 9,007 USD); refuse to round silently if it ever does not.
  if (pico > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError("a model call's cost exceeds 9,007 USD");
  return Number(pico);
}

/** Pico-USD (a safe integer, or the decimal text SQLite's CAST(SUM(..) AS TEXT) gives) as a USD decimal string: "0.00125". */
export function usdOfPico(pico: number | string | bigint): string {
  const v = BigInt(pico);
  const sign = v < 0n ? "-" : "";
  const abs = v < 0n ? -v : v;
  const whole = abs / 1_000_000_000_000n;
  const frac = (abs % 1_000_000_000_000n).toString().padStart(12, "0").replace(/0+$/, "");
  return `${sign}${whole}${frac ? `.${frac}` : ""}`;
}

/** A USD threshold (at most 6 decimals) in pico-USD. */
export function picoOfUsd(usd: number): number {
  return Math.round(usd * 1e6) * 1e6;
}
