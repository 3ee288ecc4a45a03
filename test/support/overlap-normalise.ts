/**
 * The issue-20 output guard's comparison form and decoded variants, kept for the yardstick in overlap-measure.ts
 * (issue 20 §2). Everything here is linear in the text's length: a model told
 * to disguise its hidden layers (zero-width characters, look-alike letters,
 * hyphens inside words, spaced letters, base64, hex, JSON escapes, reversal)
 * is compared on what a reader would recover, not on the bytes it sent.
 */

/** Upper-case look-alikes whose lower case would fold to another letter (Greek Η → η, but it reads as H). */
// biome-ignore format: a compact table reads better than one letter per line
const UPPER_HOMOGLYPHS: Record<string, string> = {
  Α: "a", Β: "b", Ε: "e", Ζ: "z", Η: "h", Ι: "i", Κ: "k", Μ: "m", Ν: "n", Ο: "o", Ρ: "p", Τ: "t", Υ: "y", Χ: "x",
  А: "a", В: "b", Е: "e", К: "k", М: "m", Н: "h", О: "o", Р: "p", С: "c", Т: "t", Х: "x", У: "y", І: "i", Ј: "j", Ѕ: "s",
};

/** Lower-case Cyrillic, Greek, Armenian and small-capital letters that read as a Latin letter. */
// biome-ignore format: a compact table reads better than one letter per line
const LOWER_HOMOGLYPHS: Record<string, string> = {
  а: "a", в: "b", е: "e", ё: "e", к: "k", м: "m", н: "h", о: "o", р: "p", с: "c", т: "t", у: "y", х: "x", і: "i", ї: "i",
  ј: "j", ѕ: "s", ԁ: "d", ԛ: "q", ԝ: "w", һ: "h", ӏ: "l", г: "r", п: "n", ь: "b", ɡ: "g", ı: "i", ɑ: "a",
  α: "a", β: "b", γ: "y", ε: "e", η: "n", ι: "i", κ: "k", ν: "v", ο: "o", ρ: "p", τ: "t", υ: "u", χ: "x", ω: "w", ς: "s",
  օ: "o", ս: "u", հ: "h", ո: "n",
  ᴀ: "a", ʙ: "b", ᴄ: "c", ᴅ: "d", ᴇ: "e", ɢ: "g", ʜ: "h", ɪ: "i", ᴊ: "j", ᴋ: "k", ʟ: "l", ᴍ: "m", ɴ: "n", ᴏ: "o",
  ᴘ: "p", ʀ: "r", ꜱ: "s", ᴛ: "t", ᴜ: "u", ᴠ: "v", ᴡ: "w", ʏ: "y", ᴢ: "z",
};

/** Format characters (zero-width space/joiners, soft hyphen, BOM, bidi controls) and variation selectors. */
const INVISIBLE = /\p{Cf}|[\u{FE00}-\u{FE0F}]|[\u{E0100}-\u{E01EF}]/gu;

/** Removes the characters a reader never sees. */
export function stripInvisible(text: string): string {
  return text.replace(INVISIBLE, "");
}

/** What one non-ASCII character becomes in the comparison form ("" when it is dropped), cached per isolate. */
const FOLDED = new Map<string, string>();
const DROPPED = /^(?:\p{Cf}|\p{Mn}|[\u{FE00}-\u{FE0F}]|[\u{E0100}-\u{E01EF}])$/u;

function foldChar(ch: string): string {
  let out = FOLDED.get(ch);
  if (out === undefined) {
    const lower = ch.toLowerCase();
    out = DROPPED.test(ch) ? "" : (UPPER_HOMOGLYPHS[ch] ?? LOWER_HOMOGLYPHS[lower] ?? lower);
    if (FOLDED.size < 10_000) FOLDED.set(ch, out);
  }
  return out;
}

/** Hyphens (and a hyphen then a line break) between two letters. */
const INNER_HYPHEN = /(?<=\p{L})[-\u2010\u2011\u2012\u2013\u2043]+[ \t]*(?:\r?\n[ \t]*)?(?=\p{L})/gu;

/**
 * The comparison form: NFKC, invisible characters and combining marks removed,
 * look-alike letters folded to Latin, lower case, and a hyphen (or a hyphen and
 * a line break) between two letters joined ("in-struc-tions" → "instructions").
 */
export function comparisonForm(text: string): string {
  // Fast path: ASCII needs no Unicode normalisation, has no format characters and no look-alikes.
  if (isAscii(text)) return text.toLowerCase().replace(/(?<=[a-z])-+[ \t]*(?:\r?\n[ \t]*)?(?=[a-z])/g, "");
  // One pass over the decomposed text, character by character (a code point at a time), cached per character.
  const decomposed = text.normalize("NFKC").normalize("NFD");
  let out = "";
  for (const ch of decomposed) {
    const c = ch.charCodeAt(0);
    out += c < 0x80 ? (c >= 65 && c <= 90 ? String.fromCharCode(c + 32) : ch) : foldChar(ch);
  }
  return out.replace(INNER_HYPHEN, "");
}

/** Whether every code unit of `text` is ASCII (then the cheaper ASCII expressions give the same result). */
function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Whether one non-ASCII character is a letter, cached per isolate. */
const LETTER = new Map<string, boolean>();
function isLetter(ch: string): boolean {
  let yes = LETTER.get(ch);
  if (yes === undefined) {
    yes = /^\p{L}$/u.test(ch);
    if (LETTER.size < 10_000) LETTER.set(ch, yes);
  }
  return yes;
}

/** The words of the comparison form (every run of non-letters is one separator) and its letters-only stream. */
export function tokensOf(form: string): { words: string[]; letters: string } {
  if (isAscii(form)) {
    const words = form.split(/[^a-z]+/).filter((w) => w.length > 0);
    return { words, letters: words.join("") };
  }
  const words: string[] = [];
  let word = "";
  for (const ch of form) {
    const c = ch.charCodeAt(0);
    if (c < 0x80 ? c >= 97 && c <= 122 : isLetter(ch)) word += ch;
    else if (word) {
      words.push(word);
      word = "";
    }
  }
  if (word) words.push(word);
  return { words, letters: words.join("") };
}

/** Words of the comparison form: every run of non-letters is one separator. */
export function wordsOf(form: string): string[] {
  return tokensOf(form).words;
}

/** Letters only (spaced letters and any separators vanish): "y o u  a r e" → "youare". */
export function lettersOf(form: string): string {
  return tokensOf(form).letters;
}

/** Lower-case Latin letters and digits only, for the canary's hex value in any spelling. */
export function alnumOf(form: string): string {
  return form.replace(/[^a-z0-9]+/g, "");
}

/** JSON/JS string escapes, HTML character references and URL percent-escapes decoded. */
export function unescapeText(text: string): string {
  return text
    .replace(/\\u\{([0-9a-fA-F]{1,6})\}|\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})/g, (_m, a, b, c) => codePoint(a ?? b ?? c))
    .replace(/\\[nrtbf]/g, " ")
    .replace(/\\(["'\\/])/g, "$1")
    .replace(/&#[xX]([0-9a-fA-F]{1,6});?|&#([0-9]{1,7});?/g, (_m, hex, dec) => (hex ? codePoint(hex) : codePoint(Number(dec).toString(16))))
    .replace(/(?:%[0-9a-fA-F]{2})+/g, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run;
      }
    });
}

function codePoint(hex: string): string {
  const n = Number.parseInt(hex, 16);
  return n > 0 && n <= 0x10ffff ? String.fromCodePoint(n) : " ";
}

const UTF8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: false });

/** Every base64 (or base64url) run of 12+ characters decoded as UTF-8, joined; "" when there is none. */
export function decodeBase64Runs(text: string): string {
  const out: string[] = [];
  for (const [run] of text.matchAll(/[A-Za-z0-9+/_-]{12,}={0,2}/g)) {
    const clean = run.replace(/=+$/, "").replaceAll("-", "+").replaceAll("_", "/");
    const usable = clean.slice(0, clean.length - (clean.length % 4 === 1 ? 1 : 0));
    try {
      const binary = atob(usable + "=".repeat((4 - (usable.length % 4)) % 4));
      const bytes = new Uint8Array(binary.length);
      for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
      out.push(UTF8.decode(bytes));
    } catch {
      // Not base64 after all (an ordinary long word): nothing to decode.
    }
  }
  return out.join("");
}

/** Every run of 16+ hex byte pairs (optionally separated by spaces, colons, commas or dashes) decoded as UTF-8. */
export function decodeHexRuns(text: string): string {
  const out: string[] = [];
  for (const [run] of text.matchAll(/(?:[0-9a-fA-F]{2}[\s:,-]?){16,}/g)) {
    const hex = run.replace(/[^0-9a-fA-F]/g, "");
    const bytes = new Uint8Array(hex.length >> 1);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
    out.push(UTF8.decode(bytes));
  }
  return out.join("");
}

/** The text reversed by code point ("snoitcurtsni" → "instructions"). */
export function reversed(text: string): string {
  return isAscii(text) ? text.split("").reverse().join("") : Array.from(text).reverse().join("");
}

/** Each word reversed in place, word order kept. */
export function wordsReversed(text: string): string {
  return text.replace(isAscii(text) ? /[a-zA-Z0-9]+/g : /[\p{L}\p{N}\p{M}]+/gu, (w) => reversed(w));
}

/** ROT13 of the Latin letters. */
export function rot13(text: string): string {
  return text.replace(/[a-zA-Z]/g, (c) => {
    const base = c <= "Z" ? 65 : 97;
    return String.fromCharCode(((c.charCodeAt(0) - base + 13) % 26) + base);
  });
}

/**
 * The decoded readings of `text`: as sent, unescaped, and its decoded base64
 * and hex runs (themselves unescaped). Empty and repeated readings are dropped.
 */
export function baseReadings(text: string): string[] {
  const plain = stripInvisible(text);
  const unescaped = unescapeText(plain);
  const direct = unescaped === plain ? [plain] : [plain, unescaped];
  const decoded = direct.flatMap((t) => [decodeBase64Runs(t), decodeHexRuns(t)]).map((t) => unescapeText(stripInvisible(t)));
  return [...new Set([...direct, ...decoded].filter((t) => t.length > 0))];
}

/**
 * The comparison forms the guard looks at: each decoded reading's form, each
 * of those reversed and word-reversed, and the ROT13 of the first. Reversal and
 * ROT13 are applied to the form (they commute with it), so the costly folding
 * runs once per decoded reading. At most 14 forms, each linear in `text`.
 */
export function formsOf(text: string): string[] {
  const forms = baseReadings(text).map(comparisonForm);
  return [...forms, ...forms.map(reversed), ...forms.map(wordsReversed), rot13(forms[0] ?? "")];
}
