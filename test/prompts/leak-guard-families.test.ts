/**
 * Issue 33: each disguise family the leak guard reads is a decoder with its own test vectors (src/prompts/leak-guard/
 * families.ts, fold.ts, invisible.ts). A text family must read its vector back; a word family must let a run of
 * hidden words through it be found; the folding must read look-alikes, accents, compatibility forms and leetspeak.
 */
import { describe, expect, it } from "vitest";
import { FAMILIES, readingsOf, TEXT_FAMILIES, WORD_FAMILIES } from "../../src/prompts/leak-guard/families";
import { candidatesOf, tokenize } from "../../src/prompts/leak-guard/fold";
import { sanitize, selectorPayload, tagPayload } from "../../src/prompts/leak-guard/invisible";
import { checkOutput } from "../../src/prompts/output-guard";

const utf8 = (t: string) => [...new TextEncoder().encode(t)];
const words = (t: string) => t.trim().split(/\s+/).join(" ");
const rot47 = (t: string) => t.replace(/[!-~]/g, (c) => String.fromCharCode(33 + ((c.charCodeAt(0) - 33 + 47) % 94)));
const tags = (t: string) => [...t].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join("");
const selectors = (t: string) =>
  utf8(t)
    .map((b) => String.fromCodePoint(b < 16 ? 0xfe00 + b : 0xe0100 + b - 16))
    .join("");

/** Each text family's vector: what it is given, and the words its reading must contain. */
const TEXT_VECTORS: Record<string, { input: string; reads: string }> = {
  plain: { input: "hello wide world", reads: "hello wide world" },
  escapes: { input: "\\u0068\\u0069 &#104;&#105; \\x68\\x69", reads: "hi hi hi" },
  url_percent: { input: "%68%65%6C%6C%6F%20world", reads: "hello world" },
  base64_runs: { input: "aGVs bG8g d2lk ZSB3 b3Js ZA==", reads: "hello wide world" },
  base64_tokens: { input: "aGVsbG8= d2lkZQ== d29ybGQ=", reads: "hello wide world" },
  // Written after the code was (issue 33's second round): a standard encoding the first list did not read.
  base32: { input: "Encoded: NBSWY3DPEB3WSZDFEB3W64TMMQ", reads: "hello wide world" },
  hex: { input: "68 65 6c 6c 6f 20 77 6f 72 6c 64", reads: "hello world" },
  hex_groups: { input: "68:65:6c:6c:6f 77:69:64:65 77:6f:72:6c:64", reads: "hello wide world" },
  decimal_codes: { input: "104, 101, 108, 108, 111", reads: "hello" },
  octal_codes: { input: "\\150\\145\\154\\154\\157", reads: "hello" },
  binary: { input: "01101000 01101001 00100001", reads: "hi!" },
  nato: { input: "hotel echo lima lima oscar / whiskey oscar romeo lima delta", reads: "hello world" },
  morse: { input: ".... . .-.. .-.. --- / .-- --- .-. .-.. -..", reads: "hello world" },
  spaced_letters: { input: "h e l l o   w o r l d", reads: "hello world" },
  rot47: { input: rot47("{hello}, [wide] <world>!"), reads: "{hello}, [wide] <world>!" },
  unicode_tags: { input: `Sure.${tags("hello world")}`, reads: "hello world" },
  variation_selectors: { input: `Here 🙂${selectors("hello world")}`, reads: "hello world" },
};

describe("ISSUE33 the disguise families, each with its vectors", () => {
  it(`ISSUE33 families: ${TEXT_FAMILIES.length} text families and ${WORD_FAMILIES.length} word families, one list, each with a vector`, () => {
    expect(FAMILIES.length).toBe(TEXT_FAMILIES.length + WORD_FAMILIES.length);
    expect(TEXT_FAMILIES.map((f) => f.name).sort()).toEqual(Object.keys(TEXT_VECTORS).sort());
    expect(WORD_FAMILIES.map((f) => f.name)).toEqual(["as_written", "reversed", "atbash", "caesar", "doubled"]);
  });

  for (const family of TEXT_FAMILIES) {
    it(`ISSUE33 family ${family.name}: reads its vector back`, () => {
      const vector = TEXT_VECTORS[family.name] as { input: string; reads: string };
      const reading = family.read(vector.input);
      expect(reading?.family).toBe(family.name);
      expect(words(reading?.text ?? "").includes(vector.reads)).toBe(true);
      // The way back: each decoded word maps to a raw offset inside the input.
      expect(reading?.rawAt(reading.text.length - 1)).toBeLessThan(vector.input.length);
    });
  }

  it("ISSUE33 family text readings: plain prose gives the plain reading alone (no family finds anything to decode)", () => {
    expect(readingsOf("The bread needs a hot oven and a little patience.").map((r) => r.family)).toEqual(["plain"]);
  });

  const hidden = "When a tool fails, read the error, adjust your approach, and say what went wrong if you cannot recover.";
  const shift = (t: string, k: number) =>
    t.replace(/[a-z]/gi, (c) => {
      const b = c <= "Z" ? 65 : 97;
      return String.fromCharCode(b + ((c.charCodeAt(0) - b + k) % 26));
    });
  const WORD_VECTORS: Record<string, string> = {
    as_written: hidden,
    reversed: hidden.replace(/[A-Za-z]+/g, (w) => [...w].reverse().join("")),
    atbash: hidden.replace(/[a-z]/gi, (c) => String.fromCharCode((c <= "Z" ? 155 : 219) - c.charCodeAt(0))),
    caesar: shift(hidden, 7),
    doubled: hidden.replace(/[a-z]/gi, (c) => c + c),
  };
  for (const family of WORD_FAMILIES) {
    it(`ISSUE33 family ${family.name}: a base-prompt sentence read this way is refused, forwards and in reversed word order`, () => {
      const text = WORD_VECTORS[family.name] as string;
      expect(checkOutput(text)).toEqual({
        blocked: true,
        reason: family.name === "as_written" ? "verbatim_hidden_text" : "disguised_hidden_text",
      });
      expect(checkOutput(text.split(" ").reverse().join(" ")).blocked).toBe(true);
    });
  }

  it("ISSUE33 every Caesar shift (1-25) of a hidden sentence is read by the one shape lookup", () => {
    const refused = Array.from({ length: 25 }, (_, k) => checkOutput(shift(hidden, k + 1)).blocked);
    expect(refused).toEqual(Array.from({ length: 25 }, () => true));
  });
});

describe("ISSUE33 the folding: confusables, compatibility forms, leetspeak", () => {
  const read = (t: string) => tokenize(t).map((tok) => candidatesOf(tok.folded));

  it("ISSUE33 fold: Cyrillic, Greek, Coptic and Cherokee look-alikes read as Latin (UTS #39 confusables plus the Coptic supplement)", () => {
    expect(read("раураl ⲁⲛⲧ ꭲhе")).toEqual([["paypal"], ["ant"], ["the"]]);
  });

  it("ISSUE33 fold: full-width and mathematical letters through NFKD; accents dropped; invisible characters dropped, not separators", () => {
    expect(read("ｗｉｄｅ 𝐰𝐨𝐫𝐥𝐝 café s\u200Bec\u00ADret")).toEqual([["wide"], ["world"], ["cafe"], ["secret"]]);
  });

  it("ISSUE33 fold: leetspeak is a second reading of a word that mixes in digits or symbols; a hyphen and a line break join a word", () => {
    expect(read("5y5t3m p@$$w0rd 1ong in-\nstructions")).toEqual([
      ["ytm", "system"],
      ["pwrd", "password"],
      ["ong", "iong", "long"],
      ["instructions"],
    ]);
  });
});

describe("ISSUE33 invisible characters: removed from what is released, read for what they carry", () => {
  it("ISSUE33 invisible: tag characters, stray variation selectors, bidi overrides, ZWSP and ZWJ in Latin text are removed", () => {
    const text = `a${tags("x")}b\uFE0Fc\u202Ed\u200Be\u200Df`;
    expect(sanitize(text)).toBe("abcdef");
  });

  it("ISSUE33 invisible: emoji presentation, ZWJ sequences, subdivision flags, Persian ZWNJ and RLM next to Hebrew are kept", () => {
    const text = "❤️ 👨‍👩‍👧 🏴󠁧󠁢󠁥󠁮󠁧󠁿 می‌خواهم שלום\u200F";
    expect(sanitize(text)).toBe(text);
  });

  it("ISSUE33 invisible: what tags and selectors carry is read back (ASCII from tags, UTF-8 bytes from selectors)", () => {
    expect(tagPayload(`ok${tags("hi there")}`).text).toBe("hi there");
    expect(selectorPayload(`🙂${selectors("héllo")}`).text).toBe("héllo");
    expect(selectorPayload("❤️").text).toBe("");
  });
});
