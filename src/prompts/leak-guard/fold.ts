/**
 * How the leak guard reads characters (issue 33): every character of a model's text is folded to what a reader
 * sees — Unicode's confusables (UTS #39, generated at build time from confusables.txt) to their Latin prototype,
 * compatibility forms (full-width, mathematical letters) through NFKD, accents and invisible characters dropped,
 * lower case — and the text is cut into tokens: runs of letters, digits and the symbols leetspeak uses inside words.
 * A token's candidates are its letters, and the same token read as leetspeak ("5y5t3m" → "system").
 * Per-character results are cached per isolate; everything is linear in the text.
 */
import { CONFUSABLES } from "../../generated/confusables";

/**
 * Look-alikes the Unicode 10 confusables table lacks: Greek and Coptic small letters read by their shape (the
 * table maps Coptic ⲟ but not ⲁ, ⲉ, ⲛ …). A supplement for whole scripts, not for particular words.
 */
// biome-ignore format: a compact table reads better than one letter per line
const SUPPLEMENT: Record<string, string> = {
  β: "b", ε: "e", κ: "k", τ: "t", χ: "x", ω: "w", μ: "u", ς: "s", ϲ: "c", ϳ: "j",
  ⲁ: "a", ⲃ: "b", ⲉ: "e", ⲏ: "h", ⲓ: "i", ⲕ: "k", ⲙ: "m", ⲛ: "n", ⲟ: "o", ⲣ: "p", ⲥ: "c", ⲧ: "t", ⲩ: "y",
  ⲭ: "x", ⲱ: "w", ɑ: "a", ɡ: "g", ı: "i", ȷ: "j",
};

/** Leetspeak: digits and symbols written for letters inside a word. */
// biome-ignore format: one table
export const LEET: Readonly<Record<string, string>> = {
  "0": "o", "1": "i", "2": "z", "3": "e", "4": "a", "5": "s", "6": "g", "7": "t", "8": "b", "9": "g",
  "@": "a", $: "s", "!": "i", "|": "l", "+": "t", "€": "e", "#": "h", "¢": "c", "°": "o", "£": "l", "§": "s",
};

const PROTOTYPE = new Map<string, string>(CONFUSABLES);
for (const [ch, to] of Object.entries(SUPPLEMENT)) if (!PROTOTYPE.has(ch)) PROTOTYPE.set(ch, to);

/** Characters a reader never sees (format characters, variation selectors, combining marks): dropped, not separators. */
const DROPPED = /^(?:\p{Cf}|\p{Mn}|\p{Me}|[\u{FE00}-\u{FE0F}]|[\u{E0100}-\u{E01EF}]|[\u115F\u1160\u3164\uFFA0])$/u;
const LETTER = /^\p{L}$/u;

/** What one character folds to: letters (lower case), a digit, a leet symbol, "" (dropped) or " " (a separator). */
const FOLDED = new Map<string, string>();

export function foldChar(ch: string): string {
  const c = ch.charCodeAt(0);
  if (c < 0x80) {
    if (c >= 97 && c <= 122) return ch;
    if (c >= 65 && c <= 90) return String.fromCharCode(c + 32);
    if (c >= 48 && c <= 57) return ch;
    return LEET[ch] !== undefined ? ch : " ";
  }
  let out = FOLDED.get(ch);
  if (out === undefined) {
    out = foldRare(ch);
    if (FOLDED.size < 20_000) FOLDED.set(ch, out);
  }
  return out;
}

function foldRare(ch: string): string {
  if (DROPPED.test(ch)) return "";
  // Compatibility forms first (full-width, mathematical, ligatures): UTS #39 maps some capitals to another
  // prototype ("I" to "l"), while NFKD gives the letter itself.
  const decomposed = ch.normalize("NFKD").replace(/\p{M}/gu, "");
  if (decomposed !== ch && decomposed.length > 0) return [...decomposed].map(foldChar).join("");
  // The small letter's prototype first, for the same reason (Ukrainian "І" reads as "i", not as "l").
  const direct = PROTOTYPE.get(ch.toLowerCase()) ?? PROTOTYPE.get(ch) ?? PROTOTYPE.get(ch.toUpperCase());
  if (direct !== undefined) return direct;
  if (LEET[ch] !== undefined) return ch;
  return LETTER.test(ch) ? ch.toLowerCase() : /^\p{N}$/u.test(ch) ? ch : " ";
}

/** A token of folded text: its raw offsets in the reading and its folded characters (letters, digits, leet symbols). */
export interface Token {
  start: number;
  end: number;
  folded: string;
}

/** Hyphens that join a word broken across "in-struc-\ntions". */
const HYPHENS = new Set(["-", "\u2010", "\u2011", "\u2012", "\u2013", "\u2043"]);

/**
 * The tokens of `text`. A hyphen (with an optional line break after it) between two word characters joins them,
 * so "in-struc-tions" and "role-play" read as one word on both sides of the comparison.
 */
export function tokenize(text: string): Token[] {
  const out: Token[] = [];
  let folded = "";
  let start = -1;
  let i = 0;
  const flush = (end: number) => {
    if (folded !== "") out.push({ start, end, folded });
    folded = "";
    start = -1;
  };
  while (i < text.length) {
    const cp = text.codePointAt(i) as number;
    const ch = String.fromCodePoint(cp);
    const f = foldChar(ch);
    if (f === " " && folded !== "" && HYPHENS.has(ch)) {
      const next = afterHyphen(text, i + 1);
      if (next !== null) {
        i = next;
        continue;
      }
    }
    if (f === " ") flush(i);
    else if (f !== "") {
      if (start < 0) start = i;
      folded += f;
    }
    i += ch.length;
  }
  flush(text.length);
  return out;
}

/**
 * Where a word goes on after a hyphen at `from - 1` — past spaces, one line break and characters no reader sees — or
 * null when no word character follows there.
 */
function afterHyphen(text: string, from: number): number | null {
  let i = from;
  let breaks = 0;
  while (i < text.length && i - from < 24) {
    const cp = text.codePointAt(i) as number;
    const ch = String.fromCodePoint(cp);
    if (ch === "\n") breaks++;
    else if (ch !== " " && ch !== "\t" && ch !== "\r" && foldChar(ch) !== "") return isWordChar(ch) && breaks <= 1 ? i : null;
    if (breaks > 1) return null;
    i += ch.length;
  }
  return null;
}

function isWordChar(ch: string): boolean {
  const f = foldChar(ch);
  return f !== " " && f !== "";
}

/** The letters of a folded token (digits and leet symbols left out). */
export function lettersOf(folded: string): string {
  let out = "";
  for (const ch of folded) if (LEET[ch] === undefined) out += ch;
  return out;
}

/** The token read as leetspeak, or null when it has no leet character ("1" as "i"; `alt` reads it as "l"). */
export function leetOf(folded: string, alt = false): string | null {
  let out = "";
  let changed = false;
  for (const ch of folded) {
    const l = LEET[ch];
    if (l === undefined) out += ch;
    else {
      changed = true;
      out += alt && ch === "1" ? "l" : l;
    }
  }
  return changed ? out : null;
}

/** Every reading of a token as a word: its letters, and as leetspeak when it mixes in digits or symbols. */
export function candidatesOf(folded: string): string[] {
  const letters = lettersOf(folded);
  const leet = leetOf(folded);
  if (leet === null) return letters === "" ? [] : [letters];
  const out = new Set<string>();
  if (letters !== "") out.add(letters);
  out.add(leet);
  if (folded.includes("1")) out.add(leetOf(folded, true) as string);
  return [...out];
}
