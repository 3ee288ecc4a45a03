/**
 * The families of disguise the leak guard reads (issue 33), as one list. A text family decodes the raw text into a
 * reading (src/prompts/leak-guard/reading.ts); a word family reads each word of every reading another way (reversed,
 * Atbash, any Caesar shift), and every reading is also walked backwards, so word order reversed — whole or per line —
 * is read too. Confusables, accents, compatibility forms and leetspeak are read by the folding every reading goes
 * through (fold.ts); invisible carriers by invisible.ts. Adding a family is one entry here, with its test vectors in
 * test/security/leak-guard-families.test.ts.
 */
import { selectorPayload, tagPayload } from "./invisible";
import { decodeRuns, nearEnd, type Reading, ReadingBuilder, textLike, utf8 } from "./reading";

export interface TextFamily {
  kind: "text";
  name: string;
  /** The reading of `text`, or null when the family finds nothing to decode in it. */
  read(text: string): Reading | null;
}

export interface WordFamily {
  kind: "word";
  name: string;
  /** The word `w` (lower-case letters) as this family reads it; Caesar reads shapes instead (hidden-index.ts). */
  map: ((w: string) => string) | "caesar";
}

const reverse = (w: string) => {
  let out = "";
  for (let i = w.length - 1; i >= 0; i--) out += w[i];
  return out;
};
/** Each letter written twice ("yyoouu") read once; any other word is left as it is. */
const undoubled = (w: string) => {
  if (w.length < 2 || w.length % 2 === 1) return w;
  let out = "";
  for (let i = 0; i < w.length; i += 2) {
    if (w[i] !== w[i + 1]) return w;
    out += w[i];
  }
  return out;
};
const atbash = (w: string) => {
  let out = "";
  for (let i = 0; i < w.length; i++) {
    const c = w.charCodeAt(i);
    out += c >= 97 && c <= 122 ? String.fromCharCode(219 - c) : w[i];
  }
  return out;
};

// ---- base64 -----------------------------------------------------------------------------------------------------

const B64_TOKEN = /^[A-Za-z0-9+/_-]+={0,2}$/;
/** A token that looks encoded rather than like a word: digits, + / = _, an inner capital, or long. */
const looksEncoded = (t: string) => t.length >= 4 && B64_TOKEN.test(t) && (/[0-9+/=_]/.test(t) || /.[A-Z]/.test(t) || t.length >= 24);

function fromBase64(run: string): string | null {
  const clean = run.replace(/=+$/, "").replaceAll("-", "+").replaceAll("_", "/");
  const usable = clean.slice(0, clean.length - (clean.length % 4 === 1 ? 1 : 0));
  if (usable.length < 2) return null;
  try {
    const binary = atob(usable + "=".repeat((4 - (usable.length % 4)) % 4));
    const text = utf8(Array.from(binary, (c) => c.charCodeAt(0)));
    return textLike(text) ? text : null;
  } catch {
    return null;
  }
}

/** Base64 with any whitespace inside (a space every 4 characters, line breaks): a run starts at an encoded-looking token. */
function base64Runs(text: string): Reading | null {
  const b = new ReadingBuilder();
  const tokens = [...text.matchAll(/\S+/g)];
  let last = 0;
  let found = false;
  let open: number | null = null;
  for (let i = 0; i < tokens.length; i++) {
    const first = tokens[i] as RegExpMatchArray;
    if (!looksEncoded(first[0])) continue;
    let j = i;
    while (
      j + 1 < tokens.length &&
      B64_TOKEN.test((tokens[j + 1] as RegExpMatchArray)[0]) &&
      !/=$/.test((tokens[j] as RegExpMatchArray)[0])
    )
      j++;
    const run = tokens.slice(i, j + 1).map((t) => t[0]);
    const decoded = run.join("").length >= 8 ? fromBase64(run.join("")) : null;
    if (decoded !== null) {
      const start = first.index as number;
      b.keep(text.slice(last, start), last);
      b.put(` ${decoded} `, start);
      const t = tokens[j] as RegExpMatchArray;
      last = (t.index as number) + t[0].length;
      found = true;
      if (nearEnd(text, last)) open = start;
    }
    i = j;
  }
  if (!found) return null;
  b.keep(text.slice(last), last);
  return b.build("base64_runs", open);
}

/** Base32 (RFC 4648, upper case): 5 bits a character, so 8 characters are 5 bytes. */
function fromBase32(run: string): string | null {
  let bits = "";
  for (const c of run.replace(/=+$/, "")) bits += "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".indexOf(c).toString(2).padStart(5, "0");
  const bytes: number[] = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) bytes.push(Number.parseInt(bits.slice(i, i + 8), 2));
  return decodedIfText(utf8(bytes));
}

// ---- hex, char codes, octal, binary -------------------------------------------------------------------------------

const hexBytes = (run: string) => {
  const hex = run.replace(/0x|\\x/gi, "").replace(/[^0-9a-fA-F]/g, "");
  const out: number[] = [];
  for (let i = 0; i + 1 < hex.length; i += 2) out.push(Number.parseInt(hex.slice(i, i + 2), 16));
  return out;
};
const HEX_RUN = /(?:(?:0x|\\x)?[0-9a-fA-F]{2}[\s:,-]?){6,}/gi;
/** Hex pairs at the end that may still grow into a run (HEX_RUN needs six). */
const HEX_GROWING = /(?<![0-9a-zA-Z])(?:(?:0x|\\x)?[0-9a-fA-F]{2}[\s:,-]?){1,5}[0-9a-fA-F]?$/i;
function decodedIfText(text: string): string | null {
  return textLike(text) ? text : null;
}

/** Each whitespace-separated group of a hex run decoded alone (hex per word keeps its word breaks). */
function hexGroups(run: string): string | null {
  const groups = run.trim().split(/\s+/);
  if (groups.length < 2) return null;
  return decodedIfText(groups.map((g) => utf8(hexBytes(g))).join(" "));
}

const codePoints = (numbers: readonly number[]) =>
  numbers.every((n) => n >= 9 && n <= 0x10ffff) ? decodedIfText(String.fromCodePoint(...numbers)) : null;

// ---- spelled alphabets ------------------------------------------------------------------------------------------

// biome-ignore format: one table
const NATO: Record<string, string> = {
  alfa: "a", alpha: "a", bravo: "b", charlie: "c", delta: "d", echo: "e", foxtrot: "f", golf: "g", hotel: "h", india: "i",
  juliet: "j", juliett: "j", kilo: "k", lima: "l", mike: "m", november: "n", oscar: "o", papa: "p", quebec: "q", romeo: "r",
  sierra: "s", tango: "t", uniform: "u", victor: "v", whiskey: "w", whisky: "w", xray: "x", "x-ray": "x", yankee: "y", zulu: "z",
};
// biome-ignore format: one table
const MORSE: Record<string, string> = {
  ".-": "a", "-...": "b", "-.-.": "c", "-..": "d", ".": "e", "..-.": "f", "--.": "g", "....": "h", "..": "i", ".---": "j",
  "-.-": "k", ".-..": "l", "--": "m", "-.": "n", "---": "o", ".--.": "p", "--.-": "q", ".-.": "r", "...": "s", "-": "t",
  "..-": "u", "...-": "v", ".--": "w", "-..-": "x", "-.--": "y", "--..": "z",
};

/**
 * Letters spelled one token each (NATO words, Morse codes, single characters): a run of at least `min` such tokens
 * becomes words; a separator that is not a single space-like character (" / ", a line break, several spaces) ends a word.
 */
function spelled(
  family: string,
  text: string,
  o: { token: RegExp; letter: (t: string) => string | undefined; min: number; sep: RegExp; joins: RegExp },
): Reading | null {
  const { token, letter, min, sep, joins } = o;
  const b = new ReadingBuilder();
  let last = 0;
  let found = false;
  let open: number | null = null;
  const tokens = [...text.matchAll(token)];
  for (let i = 0; i < tokens.length; i++) {
    let j = i;
    let word = "";
    const words: string[] = [];
    while (j < tokens.length) {
      const t = tokens[j] as RegExpMatchArray;
      const l = letter(t[0]);
      if (l === undefined) break;
      if (j > i) {
        const prev = tokens[j - 1] as RegExpMatchArray;
        // Characters no reader sees do not separate spelled letters.
        const between = text.slice((prev.index as number) + prev[0].length, t.index).replace(/[\p{Cf}\p{Mn}]/gu, "");
        if (!sep.test(between)) break;
        if (!joins.test(between)) {
          words.push(word);
          word = "";
        }
      }
      word += l;
      j++;
    }
    // A run that reaches the end may still grow into one (or into a longer one): it is open either way.
    // The last token, when nothing follows it, is still being written ("whis" may become "whiskey").
    const writing = j === tokens.length - 1 && !/\s$/.test(text);
    const ended = tokens[j - 1];
    const atEnd =
      j > i && (writing || (j === tokens.length && ended !== undefined && nearEnd(text, (ended.index as number) + ended[0].length)));
    if (atEnd) open = Math.min(open ?? Number.MAX_SAFE_INTEGER, (tokens[i] as RegExpMatchArray).index as number);
    // A run still too short is read all the same when it reaches the end: its words may continue a run before it.
    if (j - i >= min || (atEnd && found)) {
      words.push(word);
      const start = (tokens[i] as RegExpMatchArray).index as number;
      const lastTok = tokens[j - 1] as RegExpMatchArray;
      b.keep(text.slice(last, start), last);
      b.put(` ${words.join(" ")} `, start);
      last = (lastTok.index as number) + lastTok[0].length;
      found = true;
      i = j - 1;
    }
  }
  if (!found && open === null) return null;
  b.keep(text.slice(last), last);
  return b.build(family, open);
}

/** Between two spelled letters: spaces, or a slash, bar or comma with spaces around (a word break). */
const SPELL_SEP = /^[^\S\n]{0,4}(?:[/|,][^\S\n]{0,4})?$/;

// ---- payloads and whole-text maps ----------------------------------------------------------------------------------

function tagReading(text: string): Reading | null {
  const p = tagPayload(text);
  if (p.text.length < 2) return null;
  const b = new ReadingBuilder();
  for (let i = 0; i < p.text.length; i++) b.put(p.text[i] as string, p.at[i] as number);
  return b.build("unicode_tags");
}

function selectorReading(text: string): Reading | null {
  const p = selectorPayload(text);
  if (p.text === "") return null;
  const b = new ReadingBuilder();
  b.put(p.text, p.at);
  return b.build("variation_selectors");
}

function rot47(text: string): Reading | null {
  // ROT47 turns letters into a mix of letters and symbols: a text without many symbols is not ROT47.
  const symbols = text.match(/[!-/:-@[-`{-~]/g)?.length ?? 0;
  if (symbols < 8 || symbols * 8 < text.replace(/\s/g, "").length) return null;
  const b = new ReadingBuilder();
  b.keep(
    text.replace(/[!-~]/g, (c) => String.fromCharCode(33 + ((c.charCodeAt(0) - 33 + 47) % 94))),
    0,
  );
  return b.build("rot47");
}

function unescapeOne(e: string): string {
  const m = /^\\u\{([0-9a-f]+)\}|^\\u([0-9a-f]{4})|^\\x([0-9a-f]{2})|^&#x([0-9a-f]+);?|^&#(\d+);?|^%([0-9a-f]{2})/i.exec(e);
  if (!m) return e;
  const hex = m[1] ?? m[2] ?? m[3] ?? m[4] ?? m[6];
  const n = hex !== undefined ? Number.parseInt(hex, 16) : Number(m[5]);
  return n > 0 && n <= 0x10ffff ? String.fromCodePoint(n) : " ";
}
const ESCAPE = /\\u\{[0-9a-fA-F]{1,6}\}|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|&#[xX][0-9a-fA-F]{1,6};?|&#[0-9]{1,7};?/g;

function escapes(text: string): Reading | null {
  return decodeRuns(
    "escapes",
    text,
    /(?:\\u\{[0-9a-fA-F]{1,6}\}|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|&#[xX][0-9a-fA-F]{1,6};?|&#[0-9]{1,7};?|\\[nrt])+/g,
    (run) => run.replace(ESCAPE, unescapeOne).replace(/\\[nrt]/g, " "),
    false,
  );
}

function percent(text: string): Reading | null {
  return decodeRuns(
    "url_percent",
    text,
    /(?:%[0-9a-fA-F]{2})+/g,
    (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return utf8(hexBytes(run));
      }
    },
    false,
  );
}

/** The model's text as sent (invisible characters are dropped by the folding, not here). */
const plain = (text: string): Reading => {
  const b = new ReadingBuilder();
  b.keep(text, 0);
  return b.build("plain");
};

/** The text families, in the order their readings are read. The first is the text as sent. */
export const TEXT_FAMILIES: readonly TextFamily[] = [
  { kind: "text", name: "plain", read: plain },
  { kind: "text", name: "escapes", read: escapes },
  { kind: "text", name: "url_percent", read: percent },
  { kind: "text", name: "base64_runs", read: base64Runs },
  {
    kind: "text",
    name: "base64_tokens",
    read: (t) =>
      decodeRuns("base64_tokens", t, /(?<=^|\s)[A-Za-z0-9+/_-]{2,}={0,2}(?=\s|$)/g, (w) => (looksEncoded(w) ? fromBase64(w) : null)),
  },
  { kind: "text", name: "base32", read: (t) => decodeRuns("base32", t, /(?<![A-Za-z0-9])[A-Z2-7]{16,}=*(?![A-Za-z0-9])/g, fromBase32) },
  { kind: "text", name: "hex", read: (t) => decodeRuns("hex", t, HEX_RUN, (run) => decodedIfText(utf8(hexBytes(run))), true, HEX_GROWING) },
  { kind: "text", name: "hex_groups", read: (t) => decodeRuns("hex_groups", t, HEX_RUN, hexGroups) },
  {
    kind: "text",
    name: "decimal_codes",
    read: (t) =>
      decodeRuns(
        "decimal_codes",
        t,
        /(?:\b\d{1,7}\b[\s,;]*){4,}/g,
        (run) => codePoints((run.match(/\d+/g) ?? []).map(Number)),
        true,
        /(?:\b\d{1,7}[\s,;]*){1,3}$/,
      ),
  },
  {
    kind: "text",
    name: "octal_codes",
    read: (t) =>
      decodeRuns("octal_codes", t, /(?:\\[0-7]{3}|\b0?[0-7]{3}\b[\s,]*){4,}/g, (run) =>
        decodedIfText(utf8((run.match(/[0-7]{3}/g) ?? []).map((n) => Number.parseInt(n, 8) & 0xff))),
      ),
  },
  {
    kind: "text",
    name: "binary",
    read: (t) =>
      decodeRuns("binary", t, /(?:\b[01]{8}\b[\s,]*){3,}/g, (run) =>
        decodedIfText(utf8((run.match(/[01]{8}/g) ?? []).map((n) => Number.parseInt(n, 2)))),
      ),
  },
  {
    kind: "text",
    name: "nato",
    read: (t) =>
      spelled("nato", t, { token: /[A-Za-z]+(?:-ray)?/g, letter: (w) => NATO[w.toLowerCase()], min: 3, sep: SPELL_SEP, joins: /^ $/ }),
  },
  {
    kind: "text",
    name: "morse",
    read: (t) =>
      spelled("morse", t, {
        // Morse codes stand between spaces: a full stop at the end of a word is punctuation, not "e".
        token: /(?<=^|\s)[.\-·•−–_]+(?=\s|$)/g,
        letter: (w) => MORSE[w.replace(/[·•]/g, ".").replace(/[−–_]/g, "-")],
        min: 3,
        sep: SPELL_SEP,
        joins: /^ $/,
      }),
  },
  {
    kind: "text",
    name: "spaced_letters",
    read: (t) =>
      spelled("spaced_letters", t, {
        token: /[\p{L}\p{N}@$!|+€#]+/gu,
        letter: (w) => ([...w].length === 1 ? w : undefined),
        min: 4,
        sep: /^[^\p{L}\p{N}\n]{0,4}$/u,
        joins: /^[ .\-_*·]?$/,
      }),
  },
  { kind: "text", name: "rot47", read: rot47 },
  { kind: "text", name: "unicode_tags", read: tagReading },
  { kind: "text", name: "variation_selectors", read: selectorReading },
];

/** The word families: how each word of every reading is read again. */
export const WORD_FAMILIES: readonly WordFamily[] = [
  { kind: "word", name: "as_written", map: (w) => w },
  { kind: "word", name: "reversed", map: reverse },
  { kind: "word", name: "atbash", map: atbash },
  { kind: "word", name: "caesar", map: "caesar" },
  { kind: "word", name: "doubled", map: undoubled },
];

/** Every family, text and word, in one list (docs/security.md lists them). */
export const FAMILIES: readonly (TextFamily | WordFamily)[] = [...TEXT_FAMILIES, ...WORD_FAMILIES];

/** The readings of `text`: one per text family that finds something to decode (the plain reading always). */
export function readingsOf(text: string): Reading[] {
  const out: Reading[] = [];
  for (const f of TEXT_FAMILIES) {
    const r = f.read(text);
    if (r !== null && r.text.trim() !== "") out.push(r);
  }
  return out;
}
