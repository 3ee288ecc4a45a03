/**
 * A reading: one way of decoding a model's text (issue 33), with the way back from each decoded character to the
 * raw offset it came from — so the stream guard can hold the raw text a suspicious decoded word came from.
 */

interface Part {
  /** Offset in the reading where the part starts. */
  at: number;
  /** Raw offset it came from. */
  raw: number;
  /** Copied character for character (offsets map one to one), or decoded (every offset maps to `raw`). */
  exact: boolean;
}

export interface Reading {
  /** The family that produced it. */
  family: string;
  text: string;
  /** The raw offset the reading's offset `i` came from. */
  rawAt(i: number): number;
  /** Raw offset where an encoded run that reaches the end of the text starts (it may still grow), else null. */
  open: number | null;
}

export class ReadingBuilder {
  #text = "";
  readonly #parts: Part[] = [];

  /** Raw text copied as it is. */
  keep(raw: string, rawStart: number): void {
    if (raw === "") return;
    this.#parts.push({ at: this.#text.length, raw: rawStart, exact: true });
    this.#text += raw;
  }

  /** Decoded text standing for the raw text at `rawStart`. */
  put(decoded: string, rawStart: number): void {
    if (decoded === "") return;
    this.#parts.push({ at: this.#text.length, raw: rawStart, exact: false });
    this.#text += decoded;
  }

  get length(): number {
    return this.#text.length;
  }

  build(family: string, open: number | null = null): Reading {
    const parts = this.#parts;
    const text = this.#text;
    return {
      family,
      text,
      open,
      rawAt(i) {
        let lo = 0;
        let hi = parts.length - 1;
        while (lo < hi) {
          const mid = (lo + hi + 1) >> 1;
          if ((parts[mid] as Part).at <= i) lo = mid;
          else hi = mid - 1;
        }
        const p = parts[lo];
        if (!p) return 0;
        return p.exact ? p.raw + (i - p.at) : p.raw;
      },
    };
  }
}

/**
 * A reading that decodes each match of `pattern` (global) and keeps the text between; null when nothing matched
 * or nothing decoded. `pad` puts spaces around a decoded run (it is words of its own, not part of the next word);
 * `partial` (anchored at the end) finds the start of a run still too short to match, which is open.
 */
export function decodeRuns(
  family: string,
  text: string,
  pattern: RegExp,
  decode: (run: string) => string | null,
  pad = true,
  partial?: RegExp,
): Reading | null {
  const b = new ReadingBuilder();
  let last = 0;
  let decodedAny = false;
  let open: number | null = null;
  for (const m of text.matchAll(pattern)) {
    const decoded = decode(m[0]);
    if (decoded === null || decoded === "") continue;
    b.keep(text.slice(last, m.index), last);
    b.put(pad ? ` ${decoded} ` : decoded, m.index);
    last = m.index + m[0].length;
    decodedAny = true;
    if (nearEnd(text, m.index + m[0].length)) open = m.index;
  }
  // The start of a run that is still too short to decode, at the very end, may grow into one: it is open too.
  const growing = partial && open === null ? partial.exec(text.slice(last)) : null;
  if (growing) open = last + growing.index;
  if (!decodedAny && open === null) return null;
  b.keep(text.slice(last), last);
  return b.build(family, open);
}

/** Whether at most one whitespace-separated token (the one still being written) follows `offset`. */
export function nearEnd(text: string, offset: number): boolean {
  return !/\S\s+\S/.test(text.slice(offset).trim());
}

const UTF8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: false });

/** Bytes as UTF-8 text. */
export function utf8(bytes: readonly number[]): string {
  return UTF8.decode(Uint8Array.from(bytes));
}

/** Whether decoded text reads as text (mostly printable, some letters): garbage from a false match is dropped. */
export function textLike(decoded: string): boolean {
  if (decoded.length < 2) return false;
  let printable = 0;
  let letters = 0;
  for (const ch of decoded) {
    const c = ch.codePointAt(0) as number;
    if (c === 0xfffd || (c < 32 && c !== 10 && c !== 13 && c !== 9) || (c >= 0x7f && c < 0xa0)) continue;
    printable++;
    if (/\p{L}/u.test(ch)) letters++;
  }
  const n = [...decoded].length;
  return printable / n >= 0.85 && letters / n >= 0.4;
}
