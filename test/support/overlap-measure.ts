/**
 * The issue-20 output guard's measure, kept as an independent yardstick for tests (issue 33 replaced the guard
 * itself with src/prompts/leak-guard/): distinct shared 5-word shingles and 32-letter grams between a text's
 * readings (test/support/overlap-normalise.ts) and the bundled hidden layers, densest within a window, and the
 * canary. A test that says "what was released shares nothing with the hidden layers" asks this measure, which
 * the new guard does not use.
 */
import { allPrompts } from "../../src/prompts/catalog";
import { alnumOf, comparisonForm, formsOf, tokensOf } from "./overlap-normalise";

/** Words per shingle. */
export const SHINGLE_WORDS = 5;
/** Distinct shared word shingles that count as reproduction (a 10-word verbatim run shares 6). */
export const SHINGLE_THRESHOLD = 6;
/** Shared shingles are counted within any window of this many words. */
export const SHINGLE_WINDOW_WORDS = 150;
/** Letters per gram of the letters-only stream. */
export const LETTER_GRAM = 32;
/** Distinct shared letter grams that count as reproduction (a run of ~60 letters, about 11 words). */
export const LETTER_THRESHOLD = 28;
/** Shared letter grams are counted within any window of this many letters. */
export const LETTER_WINDOW = 800;
/** The L1 canary's value, compared in the letters-and-digits stream. */
const CANARY_VALUES = ["4f9c2e7a61", "sophiel1canary"];

/**
 * The hidden text, indexed: each distinct word gets an id; a shingle is the ids of `SHINGLE_WORDS` consecutive
 * words; a letter gram is a 53-bit rolling hash (two 32-bit polynomial hashes) of `LETTER_GRAM` letters.
 * A reply's words outside the vocabulary cannot be part of a shared shingle, so most of them cost one lookup.
 */
interface HiddenIndex {
  vocab: Map<string, number>;
  shingles: Set<string>;
  grams: Set<number>;
}

/** Calls `visit` with the key of every shingle of `words` whose words are all in `vocab` (ids added when `grow`). */
function eachShingle(words: readonly string[], vocab: Map<string, number>, grow: boolean, visit: (key: string, at: number) => void): void {
  const ids: number[] = [];
  for (let at = 0; at < words.length; at++) {
    const word = words[at] as string;
    let id = vocab.get(word);
    if (id === undefined && grow) {
      id = vocab.size;
      vocab.set(word, id);
    }
    if (id === undefined) {
      ids.length = 0;
      continue;
    }
    ids.push(id);
    if (ids.length > SHINGLE_WORDS) ids.shift();
    if (ids.length === SHINGLE_WORDS) visit(ids.join(","), at);
  }
}

/** Calls `visit` with the rolling hash of every `LETTER_GRAM`-letter window of `letters`. Linear. */
function eachGram(letters: string, visit: (hash: number, at: number) => void): void {
  const n = LETTER_GRAM;
  let p1 = 1;
  let p2 = 1;
  for (let i = 0; i < n - 1; i++) {
    p1 = Math.imul(p1, 31);
    p2 = Math.imul(p2, 131);
  }
  let h1 = 0;
  let h2 = 0;
  for (let i = 0; i < letters.length; i++) {
    if (i >= n) {
      const out = letters.charCodeAt(i - n);
      h1 = (h1 - Math.imul(out, p1)) | 0;
      h2 = (h2 - Math.imul(out, p2)) | 0;
    }
    const c = letters.charCodeAt(i);
    h1 = (Math.imul(h1, 31) + c) | 0;
    h2 = (Math.imul(h2, 131) + c) | 0;
    if (i >= n - 1) visit((h1 >>> 0) * 2 ** 21 + (h2 >>> 11), i);
  }
}

function indexTexts(texts: readonly string[]): HiddenIndex {
  const index: HiddenIndex = { vocab: new Map(), shingles: new Set(), grams: new Set() };
  for (const text of texts) {
    const { words, letters } = tokensOf(comparisonForm(text));
    eachShingle(words, index.vocab, true, (k) => index.shingles.add(k));
    eachGram(letters, (h) => index.grams.add(h));
  }
  return index;
}

let bundledIndex: HiddenIndex | undefined;
let inlineIndex: { key: string; index: HiddenIndex } | undefined;

/**
 * The index of every bundled prompt file (all are hidden layers), built once per isolate, joined with
 * `extraHidden` (an inline L2) when there is one; the last such join is kept.
 */
function hiddenIndex(extraHidden: readonly string[]): HiddenIndex {
  const files = allPrompts().map((p) => p.content);
  bundledIndex ??= indexTexts(files);
  if (extraHidden.length === 0) return bundledIndex;
  const key = extraHidden.join("\u0000");
  if (inlineIndex?.key !== key) inlineIndex = { key, index: indexTexts([...files, ...extraHidden]) };
  return inlineIndex.index;
}

/** How much of the hidden layers a text shares, pooled over its readings. */
export interface Overlap {
  canary: boolean;
  shingles: number;
  grams: number;
}

/**
 * The most distinct keys among `hits` (in position order) that fall in any window of `width` positions: a
 * leak is dense, while a long benign text that quotes a phrase here and another there is not. Linear.
 */
function densest<K>(hits: readonly { key: K; at: number }[], width: number): number {
  const inWindow = new Map<K, number>();
  let best = 0;
  let first = 0;
  for (const hit of hits) {
    inWindow.set(hit.key, (inWindow.get(hit.key) ?? 0) + 1);
    for (; (hits[first] as { at: number }).at <= hit.at - width; first++) {
      const old = (hits[first] as { key: K }).key;
      const left = (inWindow.get(old) ?? 1) - 1;
      if (left === 0) inWindow.delete(old);
      else inWindow.set(old, left);
    }
    best = Math.max(best, inWindow.size);
  }
  return best;
}

/** Densest count of shared shingles among `words`. */
function shingleDensity(words: readonly string[], index: HiddenIndex): number {
  const hits: { key: string; at: number }[] = [];
  eachShingle(words, index.vocab, false, (key, at) => {
    if (index.shingles.has(key)) hits.push({ key, at });
  });
  return densest(hits, SHINGLE_WINDOW_WORDS);
}

/** Densest count of shared letter grams in `letters`. */
function gramDensity(letters: string, index: HiddenIndex): number {
  const hits: { key: number; at: number }[] = [];
  eachGram(letters, (key, at) => {
    if (index.grams.has(key)) hits.push({ key, at });
  });
  return densest(hits, LETTER_WINDOW);
}

/**
 * Measures `text` against the hidden layers (bundled files plus `extraHidden`): whether any form carries the
 * canary, and the densest shared shingles and letter grams over its forms.
 */
export function measureOverlap(text: string, extraHidden: readonly string[] = []): Overlap {
  const index = hiddenIndex(extraHidden);
  const overlap: Overlap = { canary: false, shingles: 0, grams: 0 };
  for (const form of formsOf(text)) {
    if (!overlap.canary) {
      const alnum = alnumOf(form);
      overlap.canary = CANARY_VALUES.some((v) => alnum.includes(v));
    }
    const { words, letters } = tokensOf(form);
    overlap.shingles = Math.max(overlap.shingles, shingleDensity(words, index));
    overlap.grams = Math.max(overlap.grams, gramDensity(letters, index));
  }
  return overlap;
}
