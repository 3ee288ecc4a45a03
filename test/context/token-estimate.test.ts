/**
 * The token estimator (S1 §1.5 step 1) against a real BPE tokenizer
 * (gpt-tokenizer's o200k_base — a large-vocabulary tiktoken encoding like
 * Kimi's) on a corpus of prose in six languages, CJK, code, JSON, logs, URLs,
 * emoji and random strings: on every sample it undercounts by at most 5% and
 * overcounts by at most 40%.
 */
import { encode } from "gpt-tokenizer/encoding/o200k_base";
import { describe, expect, it } from "vitest";
import { estimateTokens } from "../../src/context/tokens";
import corpus from "../fixtures/tokens/corpus.json";

describe("estimateTokens vs o200k_base", () => {
  const rows = Object.entries(corpus as Record<string, string>).map(([sample, text]) => {
    const real = encode(text).length;
    const est = estimateTokens(text);
    return { sample, real, est, ratio: est / real };
  });

  it("the corpus covers at least 25 samples", () => {
    expect(rows.length).toBeGreaterThanOrEqual(25);
  });

  it("undercount ≤ 5% on every sample (Chinese, code and mixed text included)", () => {
    const worst = Math.min(...rows.map((r) => r.ratio));
    console.log(`worst undercount: ${((1 - worst) * 100).toFixed(1)}% (ratio ${worst.toFixed(3)})`);
    expect(rows.filter((r) => r.ratio < 0.95).map((r) => r.sample)).toEqual([]);
  });

  it("overcount ≤ 40% on every sample", () => {
    const worst = Math.max(...rows.map((r) => r.ratio));
    console.log(`worst overcount: ${((worst - 1) * 100).toFixed(1)}% (ratio ${worst.toFixed(3)})`);
    expect(rows.filter((r) => r.ratio > 1.4).map((r) => r.sample)).toEqual([]);
  });

  it("is 0 for empty text and grows with the text", () => {
    expect(estimateTokens("")).toBe(0);
    expect(estimateTokens("hello world hello world")).toBeGreaterThan(estimateTokens("hello world"));
  });
});
