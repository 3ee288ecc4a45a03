/**
 * The hidden layers as the leak guard compares with them (issue 33): every bundled prompt file, then the turn's
 * inline layer if any, as one sequence of words in one position space. Each text starts at a position far from
 * the last one's end, so no run of words can cross from one file into the next. Looked up by word (the identity,
 * reversed and Atbash readings) and by shape (a Caesar shift keeps the differences between consecutive letters, so
 * one lookup finds every shift). Built once per isolate for the bundled files; an inline layer adds a short suffix.
 */
import { allPrompts } from "../catalog";
import { COMMON_WORDS } from "./common-words";
import { candidatesOf, tokenize } from "./fold";

/** Positions between two hidden texts: larger than any gap a run may bridge. */
const TEXT_SPACING = 64;

export interface HiddenIndex {
  /** Identifies the bundled files' position space: a ledger kept for another key starts afresh. */
  key: string;
  /** The word at each position ("" between texts). */
  words: string[];
  /** 1 when the word at that position is not an ordinary English word (common-words.ts). */
  distinctive: Uint8Array;
  /** Each word's positions. */
  positions: Map<string, number[]>;
  /** Each hidden word's id (dense, from 0). */
  ids: Map<string, number>;
  /** Each letter shape's id (dense, from 0). */
  shapeIds: Map<string, number>;
  /** Each pair of consecutive hidden words, keyed `pairKey(id, id)`, and the positions of its first word. */
  pairs: Map<number, number[]>;
  /** The same pairs by shape and the difference of their first letters (what any Caesar shift keeps), keyed `shapePairKey`. */
  shapePairs: Map<number, number[]>;
  /** Which hidden text each position belongs to (index into the texts; -1 between texts). */
  textOf: Int32Array;
  /** How many uncommon words each hidden text holds (what a text's coverage limit is a share of). */
  textUncommon: number[];
}

/** Differences between consecutive letters, mod 26: the same for a word and every Caesar shift of it. */
export function shapeOf(word: string): string | null {
  if (!/^[a-z]+$/.test(word)) return null;
  let out = "";
  for (let i = 1; i < word.length; i++) out += String.fromCharCode(97 + ((word.charCodeAt(i) - word.charCodeAt(i - 1) + 26) % 26));
  return `${word.length}:${out}`;
}

function build(texts: readonly string[], key: string): HiddenIndex {
  const words: string[] = [];
  const owner: number[] = [];
  texts.forEach((text, n) => {
    for (const t of tokenize(text)) {
      const w = candidatesOf(t.folded)[0];
      if (w) {
        words.push(w);
        owner.push(n);
      }
    }
    for (let i = 0; i < TEXT_SPACING; i++) {
      words.push("");
      owner.push(-1);
    }
  });
  const textOf = Int32Array.from(owner);
  const textUncommon = texts.map(() => 0);
  const distinctive = new Uint8Array(words.length);
  const positions = new Map<string, number[]>();
  words.forEach((w, i) => {
    if (w === "") return;
    if (!COMMON_WORDS.has(w) && w.length > 1) {
      distinctive[i] = 1;
      const t = textOf[i] as number;
      textUncommon[t] = (textUncommon[t] ?? 0) + 1;
    }
    let at = positions.get(w);
    if (!at) {
      at = [];
      positions.set(w, at);
    }
    at.push(i);
  });
  const ids = new Map<string, number>();
  const shapeIds = new Map<string, number>();
  for (const w of positions.keys()) {
    ids.set(w, ids.size);
    const shape = shapeOf(w);
    if (shape !== null && !shapeIds.has(shape)) shapeIds.set(shape, shapeIds.size);
  }
  const pairs = new Map<number, number[]>();
  const shapePairs = new Map<number, number[]>();
  for (let i = 0; i + 1 < words.length; i++) {
    const a = words[i] as string;
    const b = words[i + 1] as string;
    if (a === "" || b === "") continue;
    push(pairs, pairKey(ids.get(a) as number, ids.get(b) as number), i);
    const sa = shapeIds.get(shapeOf(a) ?? "");
    const sb = shapeIds.get(shapeOf(b) ?? "");
    if (sa !== undefined && sb !== undefined) push(shapePairs, shapePairKey(sa, sb, a.charCodeAt(0), b.charCodeAt(0)), i);
  }
  return { key, words, distinctive, positions, textOf, textUncommon, ids, shapeIds, pairs, shapePairs };
}

function push(map: Map<number, number[]>, key: number, at: number): void {
  const list = map.get(key);
  if (list) list.push(at);
  else map.set(key, [at]);
}

/** The key of two word ids in order. */
export const pairKey = (a: number, b: number): number => a * 1_048_576 + b;

/** Two shapes' ids and the difference of the words' first letters (char codes): equal for a pair and any Caesar shift of it. */
export function shapePairKey(sa: number, sb: number, a: number, b: number): number {
  return (sa * 1_048_576 + sb) * 26 + ((a - b + 26) % 26);
}

let bundled: HiddenIndex | undefined;
let withInline: { inline: string; index: HiddenIndex } | undefined;

/** The bundled files' index, and the key of their position space (the files' hashes). */
export function bundledIndex(): HiddenIndex {
  if (!bundled) {
    const files = allPrompts();
    bundled = build(
      files.map((p) => p.content),
      files.map((p) => p.sha256.slice(0, 12)).join(""),
    );
  }
  return bundled;
}

/**
 * The index for a turn: the bundled files, then `extraHidden` (an inline L2) after them, so the bundled positions —
 * the ones a conversation's ledger records — are the same with or without it. The last such index is kept.
 */
export function hiddenIndex(extraHidden: readonly string[] = []): HiddenIndex {
  const base = bundledIndex();
  if (extraHidden.length === 0) return base;
  const inline = extraHidden.join("\u0000");
  if (withInline?.inline !== inline) {
    const files = allPrompts().map((p) => p.content);
    withInline = { inline, index: build([...files, ...extraHidden], base.key) };
  }
  return withInline.index;
}
