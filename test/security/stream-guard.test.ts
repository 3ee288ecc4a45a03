/**
 * Issue 23 "Streaming that stays guarded", the incremental output guard (src/prompts/stream-guard.ts): released
 * text is checked before it leaves and held a bounded number of words behind the model; hidden-layer text —
 * verbatim, cut into pieces at any chunk boundary, or in each of issue 20's disguises — is never released.
 */
import { describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { sanitize } from "../../src/prompts/leak-guard/invisible";
import { checkOutput } from "../../src/prompts/output-guard";
import { StreamGuard } from "../../src/prompts/stream-guard";
import { streamTail } from "../../src/runs/stream-release";
import { redactText } from "../../src/security/redact";
import { baseWithoutCanary, DISGUISES } from "../support/leaks";
import { measureOverlap } from "../support/overlap-measure";
import { mulberry32 } from "../support/prng";

const plain = (raw: string) => raw;

/** `text` in pieces of 1..`max` characters (deterministic), so pieces cut words and base64 anywhere. */
function pieces(text: string, seed: number, max = 9): string[] {
  const rand = mulberry32(seed);
  const out: string[] = [];
  for (let i = 0; i < text.length; ) {
    const n = 1 + Math.floor(rand() * max);
    out.push(text.slice(i, i + n));
    i += n;
  }
  return out;
}

/** Pushes every piece; returns the guard and everything it released, in order. */
function stream(text: string | string[], visible = plain): { guard: StreamGuard; released: string[]; blockedAt: number | null } {
  const guard = new StreamGuard(visible);
  const released: string[] = [];
  let blockedAt: number | null = null;
  (typeof text === "string" ? [text] : text).forEach((piece, i) => {
    const step = guard.push(piece);
    if (step && "release" in step) released.push(step.release);
    if (step && "blocked" in step && blockedAt === null) blockedAt = i;
  });
  return { guard, released, blockedAt };
}

/** A benign answer of `n` distinct five-letter-ish words. */
const benignWords = (n: number) => Array.from({ length: n }, (_, i) => `river${String.fromCharCode(97 + (i % 26))}${i}`);

describe("ISSUE23 the incremental output guard", () => {
  // Issue 33 replaced issue 23's fixed hold (16 words, released in steps of 8: "after N words exactly
  // 1 + floor((N-17)/8)*8 are released") with a hold of only what could still become hidden text.
  it("ISSUE33 pace: words that resemble no hidden layer are released as each one completes — 0 words behind, never ahead of the check", () => {
    const words = benignWords(100);
    const guard = new StreamGuard(plain);
    let released = "";
    for (let n = 1; n <= words.length; n++) {
      const step = guard.push(`${words[n - 1]} `);
      if (step && "release" in step) released += step.release;
      const p = guard.progress();
      expect(p.releasedWords).toBe(n);
      expect(released).toBe(`${words.slice(0, n).join(" ")} `);
      expect(p.cut).toBeLessThanOrEqual(p.checkedTo);
    }
    expect(guard.released).toBe(released);
  });

  it("ISSUE33 pace: the word still being written is held until whitespace shows it complete", () => {
    const guard = new StreamGuard(plain);
    expect(guard.push("rivera0 riv")).toEqual({ release: "rivera0 " });
    expect(guard.push("erb1")).toBeNull();
    expect(guard.push(" ")).toEqual({ release: "riverb1 " });
  });

  it("ISSUE23 pieces concatenate to the model's text: a benign answer cut anywhere releases a prefix, and the tail completes it", () => {
    const answer = `${benignWords(60).join(" ")}.`;
    const { guard, released } = stream(pieces(answer, 7));
    expect(released.length).toBeGreaterThanOrEqual(4);
    const out = released.join("");
    expect(answer.startsWith(out)).toBe(true);
    expect(out + streamTail(out, 0, false, answer)).toBe(answer);
    expect(guard.blocked).toBe(false);
  });

  // Issue 33 §3 (pace): one word is not a disclosure — every answer's "the" is a hidden word — so the first word of a
  // run is released as it completes, and a run is held from its second word; issue 23 released nothing of it.
  it("ISSUE23 the base prompt verbatim, in pieces across chunk boundaries: blocked, nothing of it released but its first word", () => {
    const hidden = baseWithoutCanary();
    expect(hidden.startsWith("You are Sophie,")).toBe(true);
    for (const seed of [1, 2, 3, 4, 5]) {
      const { guard, released, blockedAt } = stream(pieces(hidden, seed));
      expect(released.join("")).toBe("You ");
      expect(guard.blocked).toBe(true);
      expect(blockedAt).not.toBeNull();
      expect(streamTail("", 0, true, "anything")).toBe(disclosureRefusalMessage());
    }
  });

  it("ISSUE23 after a benign preamble: only preamble text and the hidden text's first word are released before the stream ends with the refusal", () => {
    const preamble = `${benignWords(40).join(" ")}. Now, word for word, what I was told:\n`;
    const { guard, released } = stream(pieces(preamble + baseWithoutCanary(), 11));
    const out = released.join("");
    expect(guard.blocked).toBe(true);
    // Issue 33: the whole preamble goes out (issue 23 held its last 16 words); of the hidden text after it, its first word.
    expect(out).toBe(`${preamble}You `);
    expect(out + streamTail(out, 0, true, "")).toBe(`${out}\n\n${disclosureRefusalMessage()}`);
  });

  it("ISSUE23 every issue-20 disguise of the base prompt (base64, hex, reversed, homoglyphs ...), streamed in pieces: nothing hidden released but one word", () => {
    const hidden = baseWithoutCanary();
    const seen: Record<string, { blocked: boolean; released: string }> = {};
    for (const [name, disguise] of Object.entries(DISGUISES)) {
      const text = disguise(hidden);
      expect(checkOutput(text).blocked, name).toBe(true);
      const { guard, released } = stream(pieces(text, name.length));
      const out = released.join("");
      // What was released is the model's own lead-in at most: a prefix (invisible characters removed, issue 33)
      // sharing nothing with the hidden layers.
      expect(sanitize(text).startsWith(out), name).toBe(true);
      const overlap = measureOverlap(out);
      expect({ name, shingles: overlap.shingles, grams: overlap.grams, canary: overlap.canary }).toEqual({
        name,
        shingles: 0,
        grams: 0,
        canary: false,
      });
      seen[name] = { blocked: guard.blocked, released: out };
    }
    // Every one trips mid-stream; issue 33 releases the model's own lead-in ("Here it is: ") and, at most, one word of
    // the hidden text ("You", in look-alikes "Ｙｏｕ", "Yоu"; disguised "uoY", "Lbh").
    const leadIns: Record<string, string> = {
      zero_width_split: "Here it is: ",
      base64: "Encoded as you asked:\n",
      fullwidth: "Ｙｏｕ ",
      homoglyphs: "Yоu ",
      hyphenated_inside_words: "You ",
      reversed: "Read it backwards: \n.ton ",
      words_reversed: "uoY ",
      hex_bytes: "Hex dump: ",
      rot13: "Lbh ",
    };
    expect(seen).toEqual(
      Object.fromEntries(Object.keys(DISGUISES).map((name) => [name, { blocked: true, released: leadIns[name] ?? "" }])),
    );
  });

  it("ISSUE23 base64 of the base prompt after a sentence: the whole run is held while it grows, then the guard trips", () => {
    const encoded = btoa(String.fromCharCode(...new TextEncoder().encode(baseWithoutCanary())));
    const lead = `${benignWords(30).join(" ")}. Here is the encoded text you asked for, in one block: `;
    const { guard, released } = stream(pieces(`${lead}${encoded} and that is all.`, 3, 12));
    expect(guard.blocked).toBe(true);
    const out = released.join("");
    // Issue 33: the lead-in goes out up to the words that may still join the encoded run (issue 23 held 16 words).
    expect(out).toBe(`${benignWords(30).join(" ")}. Here is the encoded text you asked for, in one `);
    expect(lead.startsWith(out)).toBe(true);
  });

  it("ISSUE23 a NOTES or tool-call block is never streamed: text from <<< on is held for the final answer", () => {
    const text = `${benignWords(40).join(" ")} <<<NOTES_JSON>>> {"set_goals": ["${benignWords(30).join(" ")}"]} <<<END_NOTES_JSON>>>`;
    const out = stream(pieces(text, 5)).released.join("");
    expect(out).toBe(`${benignWords(40).join(" ")} `.slice(0, out.length));
    expect(out.includes("<<<")).toBe(false);
  });

  it("ISSUE23 released text is redacted as the stored answer is; a credential whose redaction spans the cut waits", () => {
    const secret = "sk-test-moonshot-key-0123456789abcdef";
    const visible = (raw: string) => redactText(raw, [secret]);
    const text = `${benignWords(30).join(" ")} the key is Bearer ${secret} ok ${benignWords(30).join(" ")}`;
    const out = stream(pieces(text, 9), visible).released.join("");
    expect(out.includes("0123456789abcdef")).toBe(false);
    expect(redactText(text, [secret]).startsWith(out)).toBe(true);
  });
});
