/**
 * Invisible and format characters (issue 33): text a reader cannot see is never released. Unicode tag characters,
 * variation selectors outside an emoji or ideograph sequence, bidi embedding/override/isolate controls, zero-width
 * joiners outside emoji sequences, zero-width non-joiners outside the scripts that need them, zero-width spaces,
 * word joiners, invisible operators, BOMs, soft hyphens and Hangul fillers are removed from what is released —
 * never compared without them and released with them. What they carried (tag characters as ASCII, variation
 * selectors as bytes) is decoded as a reading of its own, so a model that hid a layer in them is refused and marked.
 *
 * Kept, because people write them: an emoji's presentation selector (❤️), emoji ZWJ sequences (👨‍👩‍👧), a
 * subdivision flag's tag sequence (🏴 + tags + cancel tag), one ideographic variation selector after a Han
 * character, ZWNJ between letters of Arabic, Persian and Indic scripts, and LRM/RLM next to right-to-left letters.
 */

const PICTO = /\p{Extended_Pictographic}/u;
const HAN = /\p{Script=Han}/u;
const JOINING_SCRIPT =
  /[\p{Script=Arabic}\p{Script=Syriac}\p{Script=Devanagari}\p{Script=Bengali}\p{Script=Gurmukhi}\p{Script=Gujarati}\p{Script=Oriya}\p{Script=Tamil}\p{Script=Telugu}\p{Script=Kannada}\p{Script=Malayalam}\p{Script=Sinhala}]/u;
const RTL = /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}]/u;
/** Removed wherever they are: bidi embedding/override/isolate controls, zero-width space, word joiner, invisible operators, BOM, soft hyphen, fillers. */
const ALWAYS =
  /[\u202A-\u202E\u2066-\u2069\u200B\u2060-\u2064\uFEFF\u00AD\u180E\uFFF9-\uFFFB\u115F\u1160\u3164\uFFA0]|\u034F|[\u{1D173}-\u{1D17A}]/u;
const SKIN_TONE = /[\u{1F3FB}-\u{1F3FF}]/u;

const isTag = (cp: number) => cp >= 0xe0000 && cp <= 0xe007f;
const isVs = (cp: number) => (cp >= 0xfe00 && cp <= 0xfe0f) || (cp >= 0xe0100 && cp <= 0xe01ef);

/** Whether any character that `sanitize` looks at is present (the common case answers no, cheaply). */
export function hasInvisible(text: string): boolean {
  return /\u034F|[\uFE00-\uFE0F]|[\u{E0100}-\u{E01EF}]|[\u00AD\u115F\u1160\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2069\u3164\uFEFF\uFFA0\uFFF9-\uFFFB\u061C]|[\u{E0000}-\u{E007F}\u{1D173}-\u{1D17A}]/u.test(
    text,
  );
}

/** `text` without the characters no reader sees (see above). */
export function sanitize(text: string): string {
  if (!hasInvisible(text)) return text;
  const cps = Array.from(text);
  let out = "";
  for (let i = 0; i < cps.length; i++) {
    const ch = cps[i] as string;
    if (keep(cps, i, ch)) out += ch;
  }
  return out;
}

function keep(cps: readonly string[], i: number, ch: string): boolean {
  if (ALWAYS.test(ch)) return false;
  const cp = ch.codePointAt(0) as number;
  const prev = cps[i - 1] ?? "";
  const next = cps[i + 1] ?? "";
  if (isTag(cp)) return inFlagSequence(cps, i);
  if (isVs(cp)) {
    if (cp === 0xfe0e || cp === 0xfe0f) return PICTO.test(prev) || /^[#*0-9\u00A9\u00AE\u203C-\u3299]$/u.test(prev);
    return HAN.test(prev) && !isVs(next.codePointAt(0) ?? 0);
  }
  if (ch === "\u200D") return (PICTO.test(prev) || prev === "\uFE0F" || SKIN_TONE.test(prev)) && PICTO.test(next);
  if (ch === "\u200C") return JOINING_SCRIPT.test(prev) && JOINING_SCRIPT.test(next);
  if (ch === "\u200E" || ch === "\u200F" || ch === "\u061C") return RTL.test(prev) || RTL.test(next);
  return true;
}

/** A subdivision flag: U+1F3F4, then 1–7 tag letters or digits, then CANCEL TAG (U+E007F). */
function inFlagSequence(cps: readonly string[], i: number): boolean {
  let start = i;
  while (start > 0 && isTag(cps[start - 1]?.codePointAt(0) ?? 0)) start--;
  if (cps[start - 1] !== "\u{1F3F4}") return false;
  let end = i;
  while (end < cps.length && isTag(cps[end]?.codePointAt(0) ?? 0)) end++;
  const tags = cps.slice(start, end).map((c) => c.codePointAt(0) as number);
  const body = tags.slice(0, -1);
  return (
    tags.at(-1) === 0xe007f &&
    body.length >= 1 &&
    body.length <= 7 &&
    body.every((t) => (t >= 0xe0061 && t <= 0xe007a) || (t >= 0xe0030 && t <= 0xe0039))
  );
}

/** What tag characters carry, read as ASCII (U+E0020–E007E → space…tilde), with each one's raw offset. */
export function tagPayload(text: string): { text: string; at: number[] } {
  let out = "";
  const at: number[] = [];
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i) as number;
    if (cp >= 0xe0020 && cp <= 0xe007e) {
      out += String.fromCharCode(cp - 0xe0000);
      at.push(i);
    }
    i += cp > 0xffff ? 2 : 1;
  }
  return { text: out, at };
}

const UTF8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: false });

/** What variation selectors carry, read as bytes (U+FE00–FE0F → 0–15, U+E0100–E01EF → 16–255) and decoded as UTF-8. */
export function selectorPayload(text: string): { text: string; at: number } {
  const bytes: number[] = [];
  let at = -1;
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i) as number;
    if (cp >= 0xfe00 && cp <= 0xfe0f) bytes.push(cp - 0xfe00);
    else if (cp >= 0xe0100 && cp <= 0xe01ef) bytes.push(cp - 0xe0100 + 16);
    if (at < 0 && bytes.length > 0) at = i;
    i += cp > 0xffff ? 2 : 1;
  }
  // One selector after an emoji is presentation, not a payload.
  return bytes.length < 4 ? { text: "", at: -1 } : { text: UTF8.decode(Uint8Array.from(bytes)), at };
}
