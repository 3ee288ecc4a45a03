/**
 * Runs of hidden words (issue 33): walks every reading's words, read by every word family, forwards and backwards,
 * and finds the runs of consecutive hidden-layer positions they spell, allowing up to `GAP` foreign words between
 * two hidden words of a run (filler every other word does not break it). One dynamic programme per family and
 * direction: for each word, each hidden position it can stand for extends the run that ended at the previous
 * position within the gap. Linear in the words times the positions a word can stand for.
 */
import { FUNCTION_WORDS } from "./common-words";
import { WORD_FAMILIES, type WordFamily } from "./families";
import { candidatesOf, tokenize } from "./fold";
import { type HiddenIndex, pairKey, shapeOf, shapePairKey } from "./hidden-index";
import type { Reading } from "./reading";

/** Foreign words allowed between two hidden words of one run. */
export const GAP = 2;
/** Tokens at least this long that are not hidden words are split into hidden words when they are words run together. */
const SPLIT_FROM = 6;

/** One run: which hidden positions (`from`..`to`), how it was read, and the raw text it came from. */
export interface Run {
  /** The word family that read it, and the reading (text family) it was found in. */
  family: string;
  reading: string;
  backwards: boolean;
  from: number;
  to: number;
  len: number;
  /** Words of the run that are not function words. */
  contentWords: number;
  /** Letters in the run's hidden words. */
  letters: number;
  rawStart: number;
  /** Raw offset of the run's second word (its end, for a run of one word). */
  rawSecond: number;
  rawEnd: number;
  /** The run may still grow: its last word is within `GAP` words of the reading's end. */
  open: boolean;
  /** Its last word is the reading's last word: the next word may extend it without a gap. */
  atEnd: boolean;
}

/** A run as the tracker holds it while it may grow. */
interface Entry {
  len: number;
  first: number;
  content: number;
  letters: number;
  lastW: number;
  raw: number;
  /** Raw offset of the second word. */
  raw2: number;
  rawEnd: number;
}

/** A word of a reading: the words it can be read as and the raw offsets it came from. */
export interface Word {
  cands: string[];
  raw: number;
  rawEnd: number;
  /**
   * Per word family (by index in WORD_FAMILIES), made when first asked: the ids of the hidden words the candidates
   * read as (Caesar: of their letter shapes, with each candidate's first letter in `firsts`).
   */
  forms?: number[][];
  firsts?: number[];
}

const NONE: number[] = [];

/** The word's candidates read by word family `f` that can be hidden words (or, for Caesar, have a hidden shape). */
function formsOf(word: Word, f: number, index: HiddenIndex): number[] {
  word.forms ??= [];
  let forms = word.forms[f];
  if (forms !== undefined) return forms;
  const map = (WORD_FAMILIES[f] as WordFamily).map;
  forms = NONE;
  for (const c of word.cands) {
    const id = map === "caesar" ? index.shapeIds.get(shapeOf(c) ?? "") : index.ids.get(map(c));
    if (id === undefined) continue;
    if (forms === NONE) forms = [];
    forms.push(id);
    if (map === "caesar") {
      word.firsts ??= [];
      word.firsts.push(c.charCodeAt(0));
    }
  }
  word.forms[f] = forms;
  return forms;
}

/** The words of a reading, long run-together tokens split into hidden words where they split completely. */
export function wordsOf(reading: Reading, index: HiddenIndex, seen?: { alnum: string }): Word[] {
  const out: Word[] = [];
  const tokens = tokenize(reading.text);
  tokens.forEach((t, i) => {
    if (seen) seen.alnum += t.folded.replace(/[^a-z0-9]/g, "");
    const raw = reading.rawAt(t.start);
    const rawEnd = reading.rawAt(Math.max(t.start, t.end - 1)) + 1;
    const cands = candidatesOf(t.folded);
    const long = cands[0] ?? "";
    if (long.length >= SPLIT_FROM && !readsAsHiddenWord(long, index)) {
      // The last token may still be growing: a word being written at its end does not count against the split.
      const parts = split(long, index, i === tokens.length - 1);
      if (parts) {
        for (const p of parts) out.push({ cands: [p], raw, rawEnd });
        return;
      }
    }
    if (cands.length > 0) out.push({ cands, raw, rawEnd });
  });
  return out;
}

/** Whether some word family reads `w` as one hidden word (then it is not words run together). */
function readsAsHiddenWord(w: string, index: HiddenIndex): boolean {
  return WORD_FAMILIES.some((f) => f.map !== "caesar" && index.ids.has(f.map(w)));
}

/**
 * `letters` as hidden words run together, or null when less than nine tenths of it splits into hidden words. Fewest
 * unmatched letters first, then fewest words (a dynamic programme over the end of each word, words up to 24 letters).
 */
function split(letters: string, index: HiddenIndex, growing: boolean): string[] | null {
  const n = letters.length;
  const cost: number[] = [0];
  const from: number[] = [0];
  const isWord: boolean[] = [false];
  for (let end = 1; end <= n; end++) {
    cost[end] = (cost[end - 1] as number) + UNMATCHED;
    from[end] = end - 1;
    isWord[end] = false;
    for (let len = 2; len <= Math.min(24, end); len++) {
      const c = (cost[end - len] as number) + 1;
      if (c < (cost[end] as number) && index.positions.has(letters.slice(end - len, end))) {
        cost[end] = c;
        from[end] = end - len;
        isWord[end] = true;
      }
    }
  }
  const parts: string[] = [];
  let unmatched = 0;
  let trailing = true;
  let tail = 0;
  for (let end = n; end > 0; end = from[end] as number) {
    if (isWord[end]) {
      parts.unshift(letters.slice(from[end] as number, end));
      trailing = false;
    } else if (trailing) tail++;
    else unmatched++;
  }
  // A word still being written at the end does not count against the split (up to a long word's length).
  return (unmatched + (growing && tail <= 12 ? 0 : tail)) * 10 <= n ? parts : null;
}

/** What an unmatched letter costs a split, in words (so a split prefers covering letters to fewer words). */
const UNMATCHED = 3;

/**
 * Calls `visit` for every pair of consecutive hidden positions the words `a` then `b` can stand for under a word
 * family, in reading order `dir` (1: `a` is the earlier hidden word; -1: the later). Keys carry a Caesar shift.
 */
function pairs(
  a: Word,
  b: Word,
  f: number,
  dir: 1 | -1,
  index: HiddenIndex,
  visit: (ka: number, kb: number, pa: number, pb: number) => void,
): void {
  const fa = formsOf(a, f, index);
  if (fa.length === 0) return;
  const fb = formsOf(b, f, index);
  const caesar = (WORD_FAMILIES[f] as WordFamily).map === "caesar";
  for (let i = 0; i < fa.length; i++) {
    for (let j = 0; j < fb.length; j++) {
      const ia = fa[i] as number;
      const ib = fb[j] as number;
      if (!caesar) {
        const found = index.pairs.get(dir === 1 ? pairKey(ia, ib) : pairKey(ib, ia));
        if (found === undefined) continue;
        if (dir === 1) for (const p of found) visit(p, p + 1, p, p + 1);
        else for (const p of found) visit(p + 1, p, p + 1, p);
        continue;
      }
      // A Caesar pair: both words' shapes, and the difference of their first letters, in hidden order.
      const la = (a.firsts as number[])[i] as number;
      const lb = (b.firsts as number[])[j] as number;
      const key = dir === 1 ? shapePairKey(ia, ib, la, lb) : shapePairKey(ib, ia, lb, la);
      const first = dir === 1 ? la : lb;
      for (const p of index.shapePairs.get(key) ?? NONE) {
        const shift = (first - (index.words[p] as string).charCodeAt(0) + 26) % 26;
        if (shift === 0) continue;
        if (dir === 1) visit(p * 26 + shift, (p + 1) * 26 + shift, p, p + 1);
        else visit((p + 1) * 26 + shift, p * 26 + shift, p + 1, p);
      }
    }
  }
}

/** 1 when the hidden word at `pos` is not a function word. */
const contentOf = (index: HiddenIndex, pos: number) => (FUNCTION_WORDS.has(index.words[pos] as string) ? 0 : 1);

/** Whether a run is worth reporting: long enough to count as covered, or to be refused. */
const reportable = (e: Entry) => e.len >= 3 && (e.content >= 1 || e.letters >= 16);

/**
 * The runs of one reading, fed a word at a time (a stream feeds words as they complete; a whole text feeds them
 * all): for every word family and both directions, each pair of words within the gap starts or extends a run.
 * Ended runs that matter (three words or more) are kept in `ended`; `open()` gives the runs that may still grow.
 */
export class RunTracker {
  readonly ended: Run[] = [];
  #recent: Word[] = [];
  #n = 0;
  readonly #states: Map<number, Entry>[] = [];
  /** Scratch for one word's updates (kept to spare the allocations). */
  readonly #keys: number[] = [];
  readonly #entries: Entry[] = [];
  readonly index: HiddenIndex;
  readonly reading: string;

  constructor(index: HiddenIndex, reading: string) {
    this.index = index;
    this.reading = reading;
    for (let i = 0; i < WORD_FAMILIES.length * 2; i++) this.#states.push(new Map());
  }

  /** Takes the next word of the reading. */
  feed(word: Word): void {
    const w = this.#n++;
    for (let i = 0; i < this.#states.length; i++) {
      const state = this.#states[i] as Map<number, Entry>;
      const [f, dir] = [i >> 1, i & 1 ? -1 : 1] as const;
      // A word no family reads as a hidden word extends nothing (most words, for most families): skip the pairs.
      if (formsOf(word, f, this.index).length > 0) this.#step(f, dir, state, word, w);
      if (w % 8 === 7) this.#sweep(f, dir, state, w);
    }
    this.#recent.push(word);
    if (this.#recent.length > GAP + 1) this.#recent.shift();
  }

  /** Ends the runs that can no longer grow (their last word is more than the gap behind `w`). */
  #sweep(f: number, dir: 1 | -1, state: Map<number, Entry>, w: number): void {
    for (const [key, e] of state) {
      if (w - e.lastW <= GAP) continue;
      this.#end(e, f, dir);
      state.delete(key);
    }
  }

  /**
   * Runs that may still grow (their last word is within the gap of the last word fed); those that cannot have ended.
   * `partialLast`: the last word fed may be incomplete (a spelled or encoded run still growing), so a run that ends
   * just before it is at the end too.
   */
  open(partialLast = false): Run[] {
    const out: Run[] = [];
    this.#states.forEach((state, i) => {
      const [f, dir] = [i >> 1, i & 1 ? -1 : 1] as const;
      for (const [key, e] of state) {
        if (this.#n - 1 - e.lastW <= GAP) out.push(this.#run(e, f, dir, true, e.lastW >= this.#n - 1 - (partialLast ? 1 : 0)));
        else {
          this.#end(e, f, dir);
          state.delete(key);
        }
      }
    });
    const last = this.#recent.at(-1);
    if (this.reading === "plain" && last) out.push(...this.#startsHere(last));
    return out;
  }

  /** The last word, when it is a hidden word: a prefix of hidden text (a run may start with it), so it waits. */
  #startsHere(word: Word): Run[] {
    const c = word.cands.find((x) => this.index.positions.has(x));
    if (c === undefined) return [];
    const pos = this.index.positions.get(c)?.[0] as number;
    const run = {
      len: 1,
      first: pos,
      content: contentOf(this.index, pos),
      letters: c.length,
      lastW: this.#n - 1,
      raw: word.raw,
      raw2: word.rawEnd,
      rawEnd: word.rawEnd,
    };
    return [this.#run(run, 0, 1, true, true)];
  }

  #step(f: number, dir: 1 | -1, state: Map<number, Entry>, word: Word, w: number): void {
    const index = this.index;
    const keys = this.#keys;
    const entries = this.#entries;
    keys.length = 0;
    entries.length = 0;
    for (let k = this.#recent.length - 1; k >= 0; k--) {
      const earlier = this.#recent[k] as Word;
      const back = w - (this.#recent.length - k);
      pairs(earlier, word, f, dir, index, (ka, kb, pa, pb) => {
        const prev = state.get(ka);
        const letters = (index.words[pb] as string).length;
        keys.push(kb);
        if (prev && prev.lastW === back)
          entries.push({
            ...prev,
            len: prev.len + 1,
            content: prev.content + contentOf(index, pb),
            letters: prev.letters + letters,
            lastW: w,
            rawEnd: word.rawEnd,
          });
        else {
          const l0 = (index.words[pa] as string).length;
          entries.push({
            len: 2,
            first: pa,
            content: contentOf(index, pa) + contentOf(index, pb),
            letters: l0 + letters,
            lastW: w,
            raw: earlier.raw,
            raw2: word.raw,
            rawEnd: word.rawEnd,
          });
        }
      });
    }
    for (let u = 0; u < keys.length; u++) {
      const key = keys[u] as number;
      const e = entries[u] as Entry;
      const old = state.get(key);
      // Two runs end at one position: the longer one is kept (a tie goes to the newer), the other has ended.
      if (old && old.lastW === w && old.len >= e.len) continue;
      if (old && old.lastW < w && w - old.lastW <= GAP + 1 && old.len > e.len) {
        this.#end(e, f, dir);
        continue;
      }
      if (old && old.lastW < w) this.#end(old, f, dir);
      state.set(key, e);
    }
  }

  #end(e: Entry, f: number, dir: 1 | -1): void {
    if (reportable(e)) this.ended.push(this.#run(e, f, dir, false));
  }

  #run(e: Entry, f: number, dir: 1 | -1, open: boolean, atEnd = false): Run {
    const last = e.first + dir * (e.len - 1);
    return {
      family: (WORD_FAMILIES[f] as WordFamily).name,
      reading: this.reading,
      backwards: dir < 0,
      from: Math.min(e.first, last),
      to: Math.max(e.first, last),
      len: e.len,
      contentWords: e.content,
      letters: e.letters,
      rawStart: e.raw,
      rawSecond: e.raw2,
      rawEnd: e.rawEnd,
      open,
      atEnd,
    };
  }
}

/**
 * Every run in every reading, read by every word family in both directions. `alnum` (when given) receives each
 * reading's folded letters and digits, one entry per reading (what the canary is looked for in).
 */
export function findRuns(readings: readonly Reading[], index: HiddenIndex, alnum?: string[]): Run[] {
  const runs: Run[] = [];
  for (const reading of readings) {
    const tracker = new RunTracker(index, reading.family);
    const seen = { alnum: "" };
    for (const word of wordsOf(reading, index, seen)) tracker.feed(word);
    alnum?.push(seen.alnum);
    const open = tracker.open(reading.open !== null);
    runs.push(...tracker.ended, ...open);
  }
  return runs;
}
