/**
 * The forms a configured secret value can take in text, found in one linear scan (issue 20 §5).
 *
 * A secret is matched on a normalised view of the text, not on the text itself: whitespace and format
 * characters (`\p{Cf}`: zero-width spaces and joiners, the BOM, bidi controls, tag characters) are skipped and
 * every `%XX` is read as the byte it encodes. So one pattern finds the secret verbatim, split by zero-width
 * characters or line breaks, and URL-encoded (any characters, upper- or lower-case hex). Two Aho-Corasick
 * automata run side by side over that view, in one pass whatever the number of secrets:
 *  - `literal`, compared case-insensitively: the secret (so its upper- and lower-cased forms), its
 *    `encodeURIComponent` form (a secret with non-ASCII characters: its UTF-8 bytes), and its hex (UTF-8 bytes);
 *  - `encoded`, compared exactly: its base64, standard and URL-safe, at each of the three alignments it can
 *    have inside a longer base64 string. At alignment `a` (bytes before it mod 3), the base64 characters whose
 *    six bits all come from the secret are the same whatever surrounds it: characters ceil(8a/6) to
 *    floor(8(a+n)/6) of the encoding of `a` zero bytes and the secret. Those substrings are the patterns.
 * A base64 match is widened to the whole run of base64 characters around it: the partial characters at its
 * edges carry bits of the secret too, and a standalone encoding ends in them.
 *
 * The patterns are derived once per isolate for each distinct list of secret values (`secretMatcher`), so a
 * stored-secret rotation (a new list) derives them again and every other call reuses them.
 */

/** Secret values shorter than this are not matched (too many false hits); see docs/sessions.md. */
export const MIN_SECRET_LENGTH = 8;

/** A span of the original text to replace: `[start, end)`, and what was found there. */
export interface SecretSpan {
  start: number;
  end: number;
  kind: "secret" | "encoded_secret";
}

/** `kinds` values: not seen yet, skipped by the scan (whitespace, `\p{Cf}`), kept. */
const UNSEEN = 0;
const SKIP = 1;
const KEEP = 2;
/** Per BMP code unit: UNSEEN, SKIP or KEEP. ASCII is filled at load; any other unit when first met (`learn`). */
const kinds = new Uint8Array(65536);
/** Per BMP code unit: its lower-case form when that is one code unit, else itself (valid once not UNSEEN). */
const folded = new Uint16Array(65536);
for (let c = 0; c < 128; c++) {
  kinds[c] = c === 32 || (c >= 9 && c <= 13) ? SKIP : KEEP;
  folded[c] = c >= 65 && c <= 90 ? c + 32 : c;
}
const SKIPPED_CHARACTER = /^[\s\p{Cf}]$/u;

/** Classifies and folds a code unit met for the first time (once per isolate per unit: no table to build). */
function learn(c: number): number {
  const ch = String.fromCharCode(c);
  const surrogate = c >= 0xd800 && c <= 0xdfff;
  kinds[c] = !surrogate && SKIPPED_CHARACTER.test(ch) ? SKIP : KEEP;
  const lower = surrogate ? ch : ch.toLowerCase();
  folded[c] = lower.length === 1 ? lower.charCodeAt(0) : c;
  return kinds[c] as number;
}

/** SKIP or KEEP for a code unit. */
const kindOf = (c: number): number => (kinds[c] !== UNSEEN ? (kinds[c] as number) : learn(c));

/** A code unit's case-folded form. */
const foldOf = (c: number): number => {
  kindOf(c);
  return folded[c] as number;
};

/** Astral format characters (tag characters U+E0000–E007F, musical and Egyptian format controls…). */
const ASTRAL_CF = /^\p{Cf}$/u;

const hexValue = (c: number): number => (c >= 48 && c <= 57 ? c - 48 : c >= 65 && c <= 70 ? c - 55 : c >= 97 && c <= 102 ? c - 87 : -1);

/** `unitAt`'s code for a character the view skips. */
const SKIPPED = 0x10000;

/**
 * The normalised view's unit at `text[i]`, packed as `code << 2 | width`: whitespace and `\p{Cf}` are
 * `SKIPPED`, `%XX` is the byte it encodes (width 3; one level, not recursive), an astral format character
 * (a surrogate pair) is skipped whole (width 2), anything else is its code unit (width 1).
 */
function unitAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 37 && i + 2 < text.length) {
    const hi = hexValue(text.charCodeAt(i + 1));
    const lo = hexValue(text.charCodeAt(i + 2));
    if (hi >= 0 && lo >= 0) {
      const byte = hi * 16 + lo;
      return ((kindOf(byte) === SKIP ? SKIPPED : byte) << 2) | 3;
    }
  } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && ASTRAL_CF.test(text.slice(i, i + 2))) return (SKIPPED << 2) | 2;
  return ((kindOf(c) === SKIP ? SKIPPED : c) << 2) | 1;
}

/** How many positions `text` has in the normalised view (for bounding a look-back over several messages). */
export function scanLength(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; ) {
    const unit = unitAt(text, i);
    if (unit >> 2 !== SKIPPED) count++;
    i += unit & 3;
  }
  return count;
}

/** The normalised form of a pattern, as the scan reads text. */
function normalise(s: string): string {
  let out = "";
  for (let i = 0; i < s.length; ) {
    const unit = unitAt(s, i);
    if (unit >> 2 !== SKIPPED) out += String.fromCharCode(unit >> 2);
    i += unit & 3;
  }
  return out;
}

/**
 * A multi-pattern automaton: transitions on ASCII in a dense table (one lookup per character), others in a
 * map per state followed through failure links; per state the longest pattern that ends there.
 */
class Automaton {
  readonly #ascii: Int32Array;
  readonly #wide: Map<number, number>[];
  readonly #fail: Int32Array;
  readonly #longest: Int32Array;
  readonly #hasWide: boolean;

  constructor(patterns: readonly string[]) {
    const goto: Map<number, number>[] = [new Map()];
    const own: number[] = [0];
    for (const p of patterns) {
      let s = 0;
      for (let i = 0; i < p.length; i++) {
        const c = p.charCodeAt(i);
        let t = goto[s]?.get(c);
        if (t === undefined) {
          t = goto.length;
          goto.push(new Map());
          own.push(0);
          goto[s]?.set(c, t);
        }
        s = t;
      }
      own[s] = Math.max(own[s] ?? 0, p.length);
    }
    const states = goto.length;
    this.#fail = new Int32Array(states);
    this.#longest = Int32Array.from(own);
    this.#ascii = new Int32Array(states * 128);
    this.#wide = goto.map(() => new Map());
    let hasWide = false;
    // Breadth first: a state's failure target is shallower, so it is complete when the state is reached.
    const queue: number[] = [0];
    for (let q = 0; q < queue.length; q++) {
      const s = queue[q] as number;
      const f = this.#fail[s] as number;
      if (s !== 0) this.#longest[s] = Math.max(this.#longest[s] as number, this.#longest[f] as number);
      for (let c = 0; c < 128; c++) {
        const t = goto[s]?.get(c);
        if (t !== undefined) {
          this.#fail[t] = s === 0 ? 0 : (this.#ascii[f * 128 + c] as number);
          this.#ascii[s * 128 + c] = t;
          queue.push(t);
        } else this.#ascii[s * 128 + c] = s === 0 ? 0 : (this.#ascii[f * 128 + c] as number);
      }
      for (const [c, t] of goto[s] ?? []) {
        if (c < 128) continue;
        hasWide = true;
        this.#wide[s]?.set(c, t);
        this.#fail[t] = s === 0 ? 0 : this.#step(f, c);
        queue.push(t);
      }
    }
    this.#hasWide = hasWide;
  }

  /** The state after reading `c` in state `s`. */
  #step(s: number, c: number): number {
    if (c < 128) return this.#ascii[s * 128 + c] as number;
    if (!this.#hasWide) return 0;
    for (let state = s; ; state = this.#fail[state] as number) {
      const t = this.#wide[state]?.get(c);
      if (t !== undefined) return t;
      if (state === 0) return 0;
    }
  }

  /** Dense ASCII transitions (`state << 7 | code`) and, per state, the longest pattern ending there. */
  get tables(): { ascii: Int32Array; longest: Int32Array } {
    return { ascii: this.#ascii, longest: this.#longest };
  }

  /** The state after reading a non-ASCII `c` in state `s`. */
  stepWide(s: number, c: number): number {
    return this.#step(s, c);
  }
}

/** The UTF-8 bytes of `s` as a binary string (for `btoa`) and as hex. */
function utf8(s: string): { binary: string; hex: string } {
  const bytes = new TextEncoder().encode(s);
  let binary = "";
  let hex = "";
  for (const b of bytes) {
    binary += String.fromCharCode(b);
    hex += b.toString(16).padStart(2, "0");
  }
  return { binary, hex };
}

/** The base64 substrings that stay the same wherever the secret sits in a longer base64 string (see top). */
export function stableBase64Forms(secret: string): string[] {
  const { binary } = utf8(secret);
  const n = binary.length;
  const out = new Set<string>();
  for (let a = 0; a < 3; a++) {
    const standard = btoa("\0".repeat(a) + binary).slice(Math.ceil((8 * a) / 6), Math.floor((8 * (a + n)) / 6));
    out.add(standard);
    out.add(standard.replaceAll("+", "-").replaceAll("/", "_"));
  }
  return [...out];
}

/** Finds every configured secret and its derived forms in a text. */
export interface SecretMatcher {
  /** The longest pattern, in normalised positions: how far back a split secret can start. */
  readonly maxLength: number;
  /** Merged, sorted spans of the original text holding a secret or one of its forms. */
  find(text: string): SecretSpan[];
}

/** Characters of a base64 run (standard and URL-safe alphabets, padding). */
const isBase64Char = (c: number): boolean =>
  (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 43 || c === 47 || c === 61 || c === 45 || c === 95;

/** Matchers derived in this isolate (see `derivedMatcherCount`). */
let derivations = 0;

function buildMatcher(secrets: readonly string[]): SecretMatcher {
  derivations++;
  const foldText = (s: string) => String.fromCharCode(...Array.from(s, (ch) => foldOf(ch.charCodeAt(0))));
  const literal = new Set<string>();
  const encoded = new Set<string>();
  for (const secret of secrets) {
    if (secret.length < MIN_SECRET_LENGTH) continue;
    for (const form of [secret, encodeURIComponent(secret), utf8(secret).hex]) {
      const p = foldText(normalise(form));
      if (p.length >= MIN_SECRET_LENGTH) literal.add(p);
    }
    for (const form of stableBase64Forms(secret)) if (form.length >= MIN_SECRET_LENGTH) encoded.add(form);
  }
  const literalAutomaton = new Automaton([...literal]);
  const encodedAutomaton = new Automaton([...encoded]);
  const maxLength = Math.max(0, ...[...literal, ...encoded].map((p) => p.length));
  // Big enough for the longest match's first position: a power of two, so a mask wraps it.
  const ring = new Int32Array(2 ** Math.ceil(Math.log2(maxLength + 2)));
  return {
    maxLength,
    find(text: string): SecretSpan[] {
      if (maxLength === 0 || text.length === 0) return [];
      return widenAndMerge(text, scan(text, literalAutomaton, encodedAutomaton, ring));
    },
  };
}

/**
 * One pass over `text`, both automata side by side (the literal one on case-folded units), with no copy of
 * the text: `ring` remembers where each of the last positions of the view started, enough to map a match
 * back to the text. Matches arrive by end; one that overlaps earlier ones swallows them (stack merge).
 */
function scan(text: string, literal: Automaton, encoded: Automaton, ring: Int32Array): SecretSpan[] {
  const mask = ring.length - 1;
  const { ascii: litAscii, longest: litLongest } = literal.tables;
  const { ascii: encAscii, longest: encLongest } = encoded.tables;
  const spans: SecretSpan[] = [];
  const add = (start: number, end: number, kind: SecretSpan["kind"]) => {
    const span: SecretSpan = { start, end, kind };
    while (spans.length > 0 && (spans.at(-1) as SecretSpan).end >= span.start) {
      const top = spans.pop() as SecretSpan;
      span.start = Math.min(span.start, top.start);
      span.end = Math.max(span.end, top.end);
      if (top.kind === "encoded_secret") span.kind = "encoded_secret";
    }
    spans.push(span);
  };
  let k = 0;
  let lit = 0;
  let enc = 0;
  const n = text.length;
  for (let i = 0; i < n; ) {
    const start = i;
    let c = text.charCodeAt(i);
    if (c < 128 && c !== 37) {
      i++; // the common case, inline: plain ASCII
      if (kinds[c] === SKIP) continue;
    } else {
      const unit = unitAt(text, i);
      i += unit & 3;
      c = unit >> 2;
      if (c === SKIPPED) continue;
    }
    ring[k & mask] = start;
    k++;
    const f = folded[c] as number; // c was classified (ASCII at load, others by unitAt)
    lit = f < 128 ? (litAscii[(lit << 7) | f] as number) : literal.stepWide(lit, f);
    enc = c < 128 ? (encAscii[(enc << 7) | c] as number) : encoded.stepWide(enc, c);
    const litHit = litLongest[lit] as number;
    if (litHit > 0) add(ring[(k - litHit) & mask] as number, i, "secret");
    const encHit = encLongest[enc] as number;
    if (encHit > 0) add(ring[(k - encHit) & mask] as number, i, "encoded_secret");
  }
  return spans;
}

/**
 * Sorts and merges spans, widening each base64 one to the run of base64 characters around it. Each character
 * is looked at a bounded number of times: a widening never goes back past the previous span's end, and a
 * span that starts inside the previous one is merged into it.
 */
function widenAndMerge(text: string, spans: SecretSpan[]): SecretSpan[] {
  spans.sort((a, b) => a.start - b.start);
  const out: SecretSpan[] = [];
  for (const span of spans) {
    const last = out.at(-1);
    if (span.kind === "encoded_secret") {
      const floor = last ? last.end : 0;
      while (span.start > floor && isBase64Char(text.charCodeAt(span.start - 1))) span.start--;
      let end = Math.max(span.end, last?.end ?? 0);
      while (end < text.length && isBase64Char(text.charCodeAt(end))) end++;
      span.end = end;
    }
    if (last && span.start <= last.end) {
      last.end = Math.max(last.end, span.end);
      if (span.kind === "encoded_secret") last.kind = "encoded_secret";
    } else out.push({ ...span });
  }
  return out;
}

/** Matchers already derived in this isolate, by the list of secret values (newest last; a few lists at most). */
const matchers = new Map<string, SecretMatcher>();
const byList = new WeakMap<readonly string[], SecretMatcher>();
const MATCHER_CACHE = 8;

/**
 * The matcher for this list of secret values, derived once per isolate: a list seen before (the same values,
 * in any array) reuses it, a new list (a stored secret rotated, another env) derives a new one.
 */
export function secretMatcher(secrets: readonly string[]): SecretMatcher {
  const same = byList.get(secrets);
  if (same) return same;
  const key = [...new Set(secrets)].sort().join("\u0000");
  let matcher = matchers.get(key);
  if (matcher) matchers.delete(key);
  else matcher = buildMatcher(secrets);
  matchers.set(key, matcher);
  if (matchers.size > MATCHER_CACHE) matchers.delete(matchers.keys().next().value as string);
  byList.set(secrets, matcher);
  return matcher;
}

/** How many matchers this isolate has derived so far (for the once-per-isolate test). */
export function derivedMatcherCount(): number {
  return derivations;
}
