/**
 * The output guard, incrementally (issue 23 D-054, issue 33): a model's text as it streams, released to an API
 * caller at the model's pace while nothing resembles a hidden layer, and held only where the next words could
 * still make it one.
 *
 * Each time a word completes (or `RECHECK_CHARS` more characters arrive) the guard judges the text from
 * `CONTEXT_WORDS` words before the last release to the newest character (src/prompts/leak-guard/assess.ts), after the conversation's
 * last released words. Refused: the stream ends, nothing more is ever released. Otherwise it releases up to the
 * first thing still held: a run of hidden words that the next words may extend, an encoded run (base64, hex,
 * spelled letters …) that reaches the end, a NOTES or tool-call marker block (`<<<` on: the stored answer strips
 * it), and the word still being written. Released text is the visible form (secrets redacted, invisible
 * characters removed), released only when stable: the visible form of the text up to the newest character
 * starts with it (a redaction spanning the cut waits). Pure: no I/O; the ledger is only read (the run engine
 * records the answer when it is final).
 */
import { assess } from "./leak-guard/assess";
import { GAP } from "./leak-guard/chains";
import { hiddenIndex } from "./leak-guard/hidden-index";
import { sanitize } from "./leak-guard/invisible";
import { BLOCK_RUN, DisclosureLedger } from "./leak-guard/ledger";
import type { OutputVerdict } from "./output-guard";

/** Held text is judged again once it has grown by this many characters, even when no word completed. */
export const RECHECK_CHARS = 256;
/**
 * Words before the last release that each judgement reads again: a run that reaches the newest word is held, but one
 * with foreign words after it is released as it goes (filler between hidden words), so up to `BLOCK_RUN - 1` of its
 * words, each followed by up to `GAP` foreign ones, may be out already; the next judgement must still see them.
 * (Encoded and spelled runs are held whole while they grow.)
 */
export const CONTEXT_WORDS = (BLOCK_RUN - 1) * (GAP + 1);

/** What one push of model text gives: text to release now, nothing yet, or a refusal (the stream ends). */
export type StreamStep = { release: string } | { blocked: Exclude<OutputVerdict, { blocked: false }> } | null;

/** The incremental output guard of one model call. */
export class StreamGuard {
  #text = "";
  /** Raw offset up to which the text has been released. */
  #cut = 0;
  #blocked = false;
  /** Raw offsets where whitespace-separated words start. */
  #starts: number[] = [];
  #scanned = 0;
  #released = "";
  /** Raw offset of the end of the last judged text. */
  #checkedTo = 0;
  readonly #visible: (raw: string, atStart: boolean) => string;
  readonly #ledger: DisclosureLedger;

  /**
   * @param visible the visible form of raw text (secrets redacted); `atStart` says the text starts the answer
   * @param extraHidden hidden layers that are not bundled files (an inline L2), as for `checkOutput`
   * @param ledger the conversation's ledger (read, never written: a copy records what this stream releases)
   */
  constructor(visible: (raw: string, atStart: boolean) => string, extraHidden: readonly string[] = [], ledger?: DisclosureLedger) {
    this.#visible = (raw, atStart) => sanitize(visible(raw, atStart));
    this.#ledger = new DisclosureLedger(ledger?.index ?? hiddenIndex(extraHidden), ledger?.state());
  }

  /** Takes the next piece of the model's text; returns what may be released now. */
  push(piece: string): StreamStep {
    if (this.#blocked || piece === "") return null;
    this.#text += piece;
    const completed = this.#scan();
    if (!completed && this.#text.length - this.#checkedTo < RECHECK_CHARS) return null;
    const from = this.#windowStart();
    // The word being written is held whatever it becomes, so a completed word is judged with the words before it
    // alone (a run that reaches the last complete word waits for the next); a long token that grows without a
    // break is judged whole every RECHECK_CHARS, so it is refused while it grows.
    const end = completed ? this.#completeEnd() : this.#text.length;
    const a = assess(this.#text.slice(from, Math.max(from, end)), this.#ledger, from === 0 ? this.#ledger.tail : "");
    this.#checkedTo = this.#text.length;
    if (a.blocked) {
      this.#blocked = true;
      return { blocked: { blocked: true, reason: a.blocked } };
    }
    const step = this.#release(this.#holdFrom(from + a.holdFrom));
    // What this stream released counts from now on (pieces spaced out within one answer are put together).
    for (const c of a.covers) if (from + c.rawEnd <= this.#cut) this.#ledger.add(c.positions);
    return step;
  }

  /** Whether the guard refused the stream (nothing more is released). */
  get blocked(): boolean {
    return this.#blocked;
  }

  /** The visible text released so far. */
  get released(): string {
    return this.#released;
  }

  /** For tests and the bench: words the model has written, words released, and the raw offsets behind them. */
  progress(): { words: number; releasedWords: number; cut: number; checkedTo: number; length: number } {
    const releasedWords = this.#starts.filter((s) => s < this.#cut).length;
    return { words: this.#starts.length, releasedWords, cut: this.#cut, checkedTo: this.#checkedTo, length: this.#text.length };
  }

  /** Records where new words start; whether a word completed (whitespace followed it) since the last scan. */
  #scan(): boolean {
    const text = this.#text;
    let completed = false;
    for (let i = this.#scanned; i < text.length; i++) {
      const space = /\s/.test(text[i] as string);
      const prevSpace = i === 0 || /\s/.test(text[i - 1] as string);
      if (!space && prevSpace) this.#starts.push(i);
      if (space && !prevSpace) completed = true;
    }
    this.#scanned = text.length;
    return completed;
  }

  /** Where the complete words end: the text's end, or the start of the word still being written. */
  #completeEnd(): number {
    return /\s$/.test(this.#text) ? this.#text.length : (this.#starts.at(-1) ?? 0);
  }

  /** The judged text starts `CONTEXT_WORDS` words before the last release. */
  #windowStart(): number {
    let i = this.#starts.findIndex((s) => s >= this.#cut);
    if (i < 0) i = this.#starts.length;
    return i <= CONTEXT_WORDS ? 0 : (this.#starts[i - CONTEXT_WORDS] as number);
  }

  /** Where the release must stop: what the judgement holds, a marker block, and the word still being written. */
  #holdFrom(held: number): number {
    let cut = held;
    const marker = this.#text.indexOf("<<<", this.#cut);
    if (marker >= 0) cut = Math.min(cut, marker);
    if (!/\s$/.test(this.#text)) cut = Math.min(cut, this.#starts.at(-1) ?? 0);
    return cut;
  }

  /** Releases the visible form of the text up to `cut`, when it is stable (else waits for a later step). */
  #release(cut: number): StreamStep {
    if (cut <= this.#cut) return null;
    const atStart = this.#cut === 0;
    const segment = this.#visible(this.#text.slice(this.#cut, cut), atStart);
    const ahead = this.#visible(this.#text.slice(this.#cut), atStart);
    if (!ahead.startsWith(segment)) return null;
    this.#cut = cut;
    this.#released += segment;
    return segment === "" ? null : { release: segment };
  }
}
