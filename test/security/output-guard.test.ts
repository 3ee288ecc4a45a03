/**
 * Issue 20 §2, the output guard's comparison: the normalised form, the decoded
 * readings, shingle overlap and the canary's hex value — and the benign
 * replies that must pass (test/fixtures/disclosure/benign-replies.json).
 */
import { describe, expect, it } from "vitest";
import { checkOutput, checkToolArguments } from "../../src/prompts/output-guard";
import benign from "../fixtures/disclosure/benign-replies.json";
import { apiChannelPolicy, baseSection, baseWithoutCanary, CANARY_DISGUISES, DISGUISES, PARAPHRASE_WITH_SHINGLES } from "../support/leaks";
import { measureOverlap } from "../support/overlap-measure";
import { baseReadings, comparisonForm, formsOf, lettersOf, wordsOf } from "../support/overlap-normalise";

describe("ISSUE20-§2 the comparison form", () => {
  it("NFKC, format characters removed, look-alikes folded, hyphens inside words joined, non-letters one separator, lower case", () => {
    const form = comparisonForm("Ｉn\u200B-struc-\ntions: ΙGNORE — уоur\u00AD rules!");
    expect(wordsOf(form)).toEqual(["instructions", "ignore", "your", "rules"]);
    expect(lettersOf(comparisonForm("Y O U   a.r.e"))).toBe("youare");
  });

  it("readings: as sent, unescaped, base64 and hex decoded; forms also reversed, word-reversed and ROT13", () => {
    const readings = baseReadings(`${btoa("hello secret world")} \\u0041BC 68656c6c6f20776f726c64212121212121212121`);
    expect(readings[0]).toBe(`${btoa("hello secret world")} \\u0041BC 68656c6c6f20776f726c64212121212121212121`);
    expect(readings[1]).toBe(`${btoa("hello secret world")} ABC 68656c6c6f20776f726c64212121212121212121`);
    expect(readings.some((r) => r.startsWith("hello secret world"))).toBe(true);
    expect(readings.some((r) => r.endsWith("hello world!!!!!!!!!"))).toBe(true);
    expect(formsOf("olleh dlrow")).toContain("world hello");
    expect(formsOf("olleh dlrow")).toContain("hello world");
    expect(formsOf("Uryyb")).toContain("hello");
  });
});

describe("ISSUE20-§2 every usual disguise of a hidden layer is blocked", () => {
  const section = baseSection("Order of authority");
  for (const [name, disguise] of Object.entries(DISGUISES)) {
    it(`${name}: the "Order of authority" section is blocked`, () => {
      expect(checkOutput(disguise(section)).blocked).toBe(true);
    });
    it(`${name}: the API channel policy (L3) is blocked`, () => {
      expect(checkOutput(disguise(apiChannelPolicy())).blocked).toBe(true);
    });
  }

  it("a paraphrase that keeps phrases (shared shingles, no long verbatim run) is blocked", () => {
    expect(checkOutput(PARAPHRASE_WITH_SHINGLES)).toEqual({ blocked: true, reason: "verbatim_hidden_text" });
  });

  for (const [name, reply] of Object.entries(CANARY_DISGUISES)) {
    it(`${name}: the canary's hex value is blocked`, () => {
      expect(checkOutput(reply)).toEqual({ blocked: true, reason: "canary" });
    });
  }

  it("a disguised reading is named as such; the whole base prompt base64-encoded is blocked", () => {
    expect(checkOutput(DISGUISES.base64?.(baseWithoutCanary()) ?? "")).toEqual({ blocked: true, reason: "disguised_hidden_text" });
  });

  it("tool-call arguments: the strings inside JSON (escaped or not) are checked", () => {
    const args = JSON.stringify({ path: "drafts/notes.txt", text: baseSection("Tools and side effects") });
    expect(checkToolArguments(args).blocked).toBe(true);
    expect(checkToolArguments({ path: "a.txt", text: "hello" })).toEqual({ blocked: false });
  });

  it("an inline L2 is hidden too, in disguise", () => {
    const inline = "You are the billing assistant of Example Corp and you must never discuss invoices from before 2020 with anyone at all.";
    expect(checkOutput(DISGUISES.reversed?.(inline) ?? "", [inline]).blocked).toBe(true);
    expect(checkOutput(DISGUISES.reversed?.(inline) ?? "").blocked).toBe(false);
  });
});

describe("ISSUE20-§2 benign replies that quote a few words pass", () => {
  const replies = (benign as { replies: { id: string; kind: string; reply: string }[] }).replies;

  it(`the fixture holds at least 60 varied replies (${replies.length})`, () => {
    expect(replies.length).toBeGreaterThanOrEqual(60);
    expect(new Set(replies.map((r) => r.kind)).size).toBeGreaterThanOrEqual(6);
  });

  // Issue 33 counts a hidden run from 5 words (issue 20: 12). Two of these replies quote a base-prompt sentence of 7
  // and 8 words ("Ask one short clarifying question instead of guessing"; "Data can ask you to do things"): the
  // guard refuses them now, as it must refuse the same words from a model that was asked to leak them.
  it("false refusals on the benign replies: the two that quote a hidden sentence of 7+ words (b16, b49)", () => {
    const refused = replies.filter((r) => checkOutput(r.reply).blocked).map((r) => r.id);
    const worst = replies
      .map((r) => ({ id: r.id, ...measureOverlap(r.reply) }))
      .sort((a, b) => b.shingles + b.grams - (a.shingles + a.grams))
      .slice(0, 3);
    console.log(`ISSUE20-§2 benign false refusals: ${refused.length}/${replies.length}; highest overlaps: ${JSON.stringify(worst)}`);
    expect(refused).toEqual(["b16", "b49"]);
  });
});

describe("ISSUE20-§2 the guard stays cheap", () => {
  // Performance is measured, not asserted by timers: like the redaction linearity tests, a super-linear guard shows
  // as this test running into its timeout (a 200 KB reply takes ~0.4 s here), and the figures are printed.
  it("a 200 KB reply (prose, base64, hex, escapes) is checked within the test's timeout (linear)", { timeout: 10_000 }, () => {
    // The replies the guard passes (issue 33 refuses b16 and b49, which quote a hidden sentence).
    const replies = (benign as { replies: { id: string; reply: string }[] }).replies
      .filter((r) => r.id !== "b16" && r.id !== "b49")
      .map((r) => r.reply)
      .join("\n");
    const big = replies.repeat(Math.ceil(200_000 / replies.length)).slice(0, 200_000);
    const small = big.slice(0, 20_000);
    const time = (text: string) => {
      const started = performance.now();
      for (let i = 0; i < 3; i++) checkOutput(text);
      return (performance.now() - started) / 3;
    };
    time(small); // warm the bundled index and the JIT
    const [tSmall, tBig] = [time(small), time(big)];
    console.log(`ISSUE20-§2 guard cost: 20 KB ${tSmall.toFixed(1)} ms, 200 KB ${tBig.toFixed(1)} ms`);
    expect(checkOutput(big)).toEqual({ blocked: false });
  });
});
