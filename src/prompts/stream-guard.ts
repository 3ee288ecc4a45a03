/**
 * The output guard, incrementally (issue 23 "Streaming that stays guarded", D-054): a model's text as it
 * streams, released to an API caller only once it has been checked, a bounded number of words behind the model.
 *
 * The rule (docs/security.md "Streamed answers"): the last `HOLDBACK_WORDS` words (and at least
 * `HOLDBACK_LETTERS` letters) are always held; text before them is released as soon as a first word clears them,
 * then in steps of at least `STEP_WORDS` words, each step only after `checkOutput` passed over a sliding window that reaches from well before the
 * previous release (`SHINGLE_WINDOW_WORDS` words and `LETTER_WINDOW` letters, the guard's own density windows)
 * to the newest character. A leak the whole-answer guard detects within the held words is thus detected
 * before any of it is released; once a window trips, nothing more is ever released. Also held: a possible
 * NOTES or tool-call marker block (`<<<` onwards: the stored answer strips it), and a hex run still growing
 * into the held words (hex pairs may be spaced, so one run spans many words). Released text is the visible
 * form (`visible`: secrets redacted), and a step is released only when that form is stable, i.e. when the
 * visible form of the text up to the newest character starts with it (a redaction spanning the cut waits).
 * Pure: no I/O.
 */
import { checkOutput, LETTER_WINDOW, type OutputVerdict, SHINGLE_WINDOW_WORDS } from "./output-guard";

/** Words always held behind the model: a verbatim leak trips the guard within 10 words, a letter-level one within ~60 letters. */
export const HOLDBACK_WORDS = 16;
/** Letters always held behind the model (spaced letters "y o u a r e" are one word each). */
export const HOLDBACK_LETTERS = 64;
/** The least a release step advances: the guard runs once per step, not once per provider chunk. */
export const STEP_WORDS = 8;
/** Held text is checked again once it has grown by this many characters, even when nothing can be released. */
export const RECHECK_CHARS = 512;
/** While the model streams plain text, released text is at most this many words behind it (the partial word aside). */
export const MAX_LAG_WORDS = HOLDBACK_WORDS + STEP_WORDS;

/** A whitespace-separated word of the raw text: where it starts and ends, and its letters. */
interface Word {
  start: number;
  end: number;
  letters: number;
}

const WORD = /\S+/g;
const LETTERS = /\p{L}/gu;
/** A hex run as decodeHexRuns reads it (pairs may be separated by a space, colon, comma or dash). */
const HEX_RUN = /(?:[0-9a-fA-F]{2}[\s:,-]?){16,}/g;

/** What one push of model text gives: text to release now, nothing yet, or a refusal (the stream ends). */
export type StreamStep = { release: string } | { blocked: Exclude<OutputVerdict, { blocked: false }> } | null;

/** The incremental output guard of one model call. */
export class StreamGuard {
  #text = "";
  /** Raw offset up to which the text has been released. */
  #cut = 0;
  #blocked = false;
  #words: Word[] = [];
  /** Raw offset up to which `#words` holds complete words (the last one may still grow). */
  #scanned = 0;
  /** Visible text released so far. */
  #released = "";
  /** Raw offset of the end of the last window that passed the guard. */
  #checkedTo = 0;
  readonly #visible: (raw: string, atStart: boolean) => string;
  readonly #extraHidden: readonly string[];

  /**
   * @param visible the visible form of raw text (secrets redacted); `atStart` says the text starts the answer
   * @param extraHidden hidden layers that are not bundled files (an inline L2), as for `checkOutput`
   */
  constructor(visible: (raw: string, atStart: boolean) => string, extraHidden: readonly string[] = []) {
    this.#visible = visible;
    this.#extraHidden = extraHidden;
  }

  /** Takes the next piece of the model's text; returns what may be released now. */
  push(piece: string): StreamStep {
    if (this.#blocked || piece === "") return null;
    this.#text += piece;
    this.#scan();
    const cut = this.#candidateCut();
    // Checked per release step, and also per RECHECK_CHARS of held text (a long base64 run trips while it grows).
    if (cut === null && this.#text.length - this.#checkedTo < RECHECK_CHARS) return null;
    const verdict = checkOutput(this.#text.slice(this.#windowStart()), this.#extraHidden);
    if (verdict.blocked) {
      this.#blocked = true;
      return { blocked: verdict };
    }
    this.#checkedTo = this.#text.length;
    return cut === null ? null : this.#release(cut);
  }

  /** Whether a window tripped the guard (nothing more is released). */
  get blocked(): boolean {
    return this.#blocked;
  }

  /** The visible text released so far. */
  get released(): string {
    return this.#released;
  }

  /** For tests and the bench: words the model has written, words released, and the raw offsets behind them. */
  progress(): { words: number; releasedWords: number; cut: number; checkedTo: number; length: number } {
    const releasedWords = this.#words.filter((w) => w.end <= this.#cut).length;
    return { words: this.#words.length, releasedWords, cut: this.#cut, checkedTo: this.#checkedTo, length: this.#text.length };
  }

  /** Indexes the words of the new text (the last word is re-read: it may have grown). */
  #scan(): void {
    const last = this.#words.at(-1);
    if (last && last.end === this.#scanned) {
      this.#words.pop();
      this.#scanned = last.start;
    }
    WORD.lastIndex = this.#scanned;
    for (let m = WORD.exec(this.#text); m; m = WORD.exec(this.#text)) {
      this.#words.push({ start: m.index, end: m.index + m[0].length, letters: m[0].match(LETTERS)?.length ?? 0 });
    }
    this.#scanned = this.#text.length;
  }

  /** Where the next release may end (a word start), or null when it would advance less than a step. */
  #candidateCut(): number | null {
    const words = this.#words;
    let held = 0;
    let letters = 0;
    let i = words.length;
    while (i > 0 && (held < HOLDBACK_WORDS || letters < HOLDBACK_LETTERS)) {
      i--;
      held++;
      letters += (words[i] as Word).letters;
    }
    let cut = i > 0 ? (words[i] as Word).start : 0;
    const marker = this.#text.indexOf("<<<", this.#cut);
    if (marker >= 0 && marker < cut) cut = marker;
    cut = Math.min(cut, this.#growingHexRun(cut));
    const fresh = words.filter((w) => w.start >= this.#cut && w.end <= cut).length;
    // The first release goes as soon as one word clears the held ones (time to first token); later ones per step.
    return cut > this.#cut && fresh >= (this.#cut === 0 ? 1 : STEP_WORDS) ? cut : null;
  }

  /** The start of a hex run that reaches past `cut` (it may go on growing), else `cut`. */
  #growingHexRun(cut: number): number {
    HEX_RUN.lastIndex = this.#cut;
    for (let m = HEX_RUN.exec(this.#text); m; m = HEX_RUN.exec(this.#text)) {
      if (m.index + m[0].length >= cut) return m.index;
    }
    return cut;
  }

  /** The window the guard reads: from its density windows' width before the last release to the newest character. */
  #windowStart(): number {
    let words = 0;
    let letters = 0;
    let i = this.#words.findIndex((w) => w.start >= this.#cut);
    if (i < 0) i = this.#words.length;
    while (i > 0 && (words < SHINGLE_WINDOW_WORDS + HOLDBACK_WORDS || letters < LETTER_WINDOW + HOLDBACK_LETTERS)) {
      i--;
      words++;
      letters += (this.#words[i] as Word).letters;
    }
    return i > 0 ? (this.#words[i] as Word).start : 0;
  }

  /** Releases the visible form of the text up to `cut`, when it is stable (else waits for a later step). */
  #release(cut: number): StreamStep {
    const atStart = this.#cut === 0;
    const segment = this.#visible(this.#text.slice(this.#cut, cut), atStart);
    const ahead = this.#visible(this.#text.slice(this.#cut), atStart);
    if (!ahead.startsWith(segment)) return null;
    this.#cut = cut;
    this.#released += segment;
    return segment === "" ? null : { release: segment };
  }
}
