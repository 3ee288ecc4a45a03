/**
 * The output guard (S2 §5, DESIGN "Disclosure", issue 20 §2): text a model
 * produced that reproduces hidden-layer text — in plain form or in a usual
 * disguise — or the L1 canary is blocked before a caller or a channel sees it.
 *
 * Every reading of the text (as sent, unescaped, base64/hex decoded, reversed,
 * word-reversed, ROT13; see leak-normalise.ts) is put in the comparison form
 * and compared with the hidden layers two ways:
 * - distinct shared word shingles (`SHINGLE_WORDS` words): a verbatim run, or
 *   a paraphrase that keeps phrases, shares many;
 * - distinct shared letter grams (`LETTER_GRAM` letters of the letters-only
 *   stream): spaced letters, words run together and odd separators still share them.
 * Shared items are pooled over all readings, so a leak split across disguises
 * adds up. The canary is its hex value (or "sophie l1 canary") in the
 * letters-and-digits stream of any reading. Deterministic and linear: the
 * bundled prompt files are indexed once per isolate; an inline L2 per call.
 */
import { allPrompts } from "./catalog";
import { alnumOf, comparisonForm, lettersOf, readingsOf, wordsOf } from "./leak-normalise";

/** A verbatim run this long always shares at least `SHINGLE_THRESHOLD` shingles (kept for the S2 wording). */
export const VERBATIM_RUN_WORDS = 12;
/** Words per shingle. */
export const SHINGLE_WORDS = 5;
/** Distinct shared word shingles that count as reproduction (a 10-word verbatim run shares 6). */
export const SHINGLE_THRESHOLD = 6;
/** Letters per gram of the letters-only stream. */
export const LETTER_GRAM = 32;
/** Distinct shared letter grams that count as reproduction (a run of ~60 letters, about 11 words). */
export const LETTER_THRESHOLD = 28;
/** The L1 canary's value, compared in the letters-and-digits stream. */
const CANARY_VALUES = ["4f9c2e7a61", "sophiel1canary"];

interface HiddenIndex {
  shingles: Set<string>;
  grams: Set<string>;
}

function shinglesOf(words: readonly string[], into: Set<string>): void {
  for (let i = 0; i + SHINGLE_WORDS <= words.length; i++) into.add(words.slice(i, i + SHINGLE_WORDS).join(" "));
}

function gramsOf(letters: string, into: Set<string>): void {
  for (let i = 0; i + LETTER_GRAM <= letters.length; i++) into.add(letters.slice(i, i + LETTER_GRAM));
}

function indexTexts(texts: readonly string[]): HiddenIndex {
  const index: HiddenIndex = { shingles: new Set(), grams: new Set() };
  for (const text of texts) {
    const form = comparisonForm(text);
    shinglesOf(wordsOf(form), index.shingles);
    gramsOf(lettersOf(form), index.grams);
  }
  return index;
}

let bundledIndex: HiddenIndex | undefined;

/** Shingles and grams of every bundled prompt file (all are hidden layers), built once per isolate. */
function bundled(): HiddenIndex {
  bundledIndex ??= indexTexts(allPrompts().map((p) => p.content));
  return bundledIndex;
}

export type OutputVerdict = { blocked: false } | { blocked: true; reason: "canary" | "verbatim_hidden_text" | "disguised_hidden_text" };

/** How much of the hidden layers a text shares, pooled over its readings. */
export interface Overlap {
  canary: boolean;
  shingles: number;
  grams: number;
}

/** Measures `text` against the hidden layers (bundled files plus `extraHidden`). */
export function measureOverlap(text: string, extraHidden: readonly string[] = []): Overlap {
  const indexes = [bundled(), ...(extraHidden.length ? [indexTexts(extraHidden)] : [])];
  const shingles = new Set<string>();
  const grams = new Set<string>();
  let canary = false;
  for (const reading of readingsOf(text)) {
    const form = comparisonForm(reading);
    const alnum = alnumOf(form);
    if (CANARY_VALUES.some((v) => alnum.includes(v))) canary = true;
    const words = wordsOf(form);
    for (let i = 0; i + SHINGLE_WORDS <= words.length; i++) {
      const s = words.slice(i, i + SHINGLE_WORDS).join(" ");
      if (indexes.some((x) => x.shingles.has(s))) shingles.add(s);
    }
    const letters = lettersOf(form);
    for (let i = 0; i + LETTER_GRAM <= letters.length; i++) {
      const g = letters.slice(i, i + LETTER_GRAM);
      if (indexes.some((x) => x.grams.has(g))) grams.add(g);
    }
  }
  return { canary, shingles: shingles.size, grams: grams.size };
}

/** Whether an overlap counts as reproducing hidden text. */
function reproduces(o: Overlap): boolean {
  return o.shingles >= SHINGLE_THRESHOLD || o.grams >= LETTER_THRESHOLD;
}

/**
 * Whether `reply` reproduces hidden text. `extraHidden` holds hidden layers
 * that are not bundled files (an inline L2 override).
 */
export function checkOutput(reply: string, extraHidden: readonly string[] = []): OutputVerdict {
  const overlap = measureOverlap(reply, extraHidden);
  if (overlap.canary) return { blocked: true, reason: "canary" };
  if (!reproduces(overlap)) return { blocked: false };
  // Plain reading alone enough → verbatim; otherwise it took a decoded or disguised reading.
  return { blocked: true, reason: plainReproduces(reply, extraHidden) ? "verbatim_hidden_text" : "disguised_hidden_text" };
}

function plainReproduces(reply: string, extraHidden: readonly string[]): boolean {
  const indexes = [bundled(), ...(extraHidden.length ? [indexTexts(extraHidden)] : [])];
  const words = wordsOf(comparisonForm(reply));
  let shared = 0;
  const seen = new Set<string>();
  for (let i = 0; i + SHINGLE_WORDS <= words.length; i++) {
    const s = words.slice(i, i + SHINGLE_WORDS).join(" ");
    if (!seen.has(s) && indexes.some((x) => x.shingles.has(s))) {
      seen.add(s);
      shared++;
    }
  }
  return shared >= SHINGLE_THRESHOLD;
}

/** Every string (keys and values) inside a tool call's arguments, one per line. */
export function argumentText(args: unknown): string {
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === "string") out.push(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === "object")
      for (const [k, x] of Object.entries(v)) {
        out.push(k);
        walk(x);
      }
    else if (v !== null && v !== undefined) out.push(String(v));
  };
  walk(args);
  return out.join("\n");
}

/**
 * Whether a tool call's arguments (an object, or the raw JSON text a model sent)
 * carry hidden-layer text: both the strings inside and the raw text are checked.
 */
export function checkToolArguments(args: unknown, extraHidden: readonly string[] = []): OutputVerdict {
  let parsed = args;
  if (typeof args === "string") {
    try {
      parsed = JSON.parse(args);
    } catch {
      parsed = args;
    }
  }
  const inner = checkOutput(argumentText(parsed), extraHidden);
  if (inner.blocked || typeof args !== "string") return inner;
  return checkOutput(args, extraHidden);
}
