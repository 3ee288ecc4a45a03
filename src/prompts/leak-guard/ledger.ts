/**
 * The disclosure ledger (issue 33): what a conversation has already given away of the hidden layers, so that
 * spacing, filler and splitting across rounds or turns no longer help. It holds the hidden positions covered so far
 * (runs of at least `COVER_RUN` words with a content word, in any reading) and the last words released while a run
 * was still open in them (so a run can go on from one model call into the next). The guard refuses a release that would give away:
 * - a run of `BLOCK_RUN` hidden words (with a content word, or 16 letters) in any reading;
 * - five of any seven consecutive hidden positions, counting what was covered before (pieces put back together);
 * - of any one hidden text, more than `COVERAGE_SHARE` of its uncommon words (at least `COVERAGE_FLOOR`) over
 *   the conversation.
 * Kept in the SessionDO (src/sessions/disclosure-ledger-store.ts) per conversation; pure here.
 */
import type { HiddenIndex } from "./hidden-index";

/** A run this long is never released. */
export const BLOCK_RUN = 5;
/** Runs this long (with a content word) count as covered. */
export const COVER_RUN = 3;
/** Of any `SPREAD_WINDOW` consecutive hidden positions, at most `SPREAD_LIMIT - 1` may be covered. */
export const SPREAD_WINDOW = 7;
export const SPREAD_LIMIT = 5;
export const SPREAD_UNCOMMON = 4;
/**
 * Of one hidden text's uncommon words, the share a conversation may have released in covered runs before a release
 * that adds to it is refused; a small text gets at least `COVERAGE_FLOOR` words.
 */
export const COVERAGE_SHARE = 0.2;
export const COVERAGE_FLOOR = 12;
/** Words of released text kept so a run can continue into the next model call. */
export const TAIL_WORDS = 12;

/** What is stored per conversation. */
export interface LedgerState {
  /** The hidden index's key: positions from another set of prompt files mean nothing. */
  key: string;
  covered: number[];
  tail: string;
}

/** How many uncommon words of a text with `uncommon` of them a conversation may release. */
export function limitOf(uncommon: number): number {
  return Math.max(COVERAGE_FLOOR, Math.floor(uncommon * COVERAGE_SHARE));
}

export class DisclosureLedger {
  readonly covered: Set<number>;
  tail: string;
  #added = 0;
  readonly index: HiddenIndex;

  constructor(index: HiddenIndex, state?: LedgerState | null) {
    this.index = index;
    const same = state && state.key === index.key;
    this.covered = new Set(same ? state.covered : []);
    this.tail = same ? state.tail : "";
  }

  /** Uncommon hidden words covered, per hidden text (index of the text in the hidden index). */
  coverage(extra: Iterable<number> = []): Map<number, number> {
    const per = new Map<number, number>();
    const seen = new Set<number>();
    for (const p of [...this.covered, ...extra]) {
      if (seen.has(p) || this.index.distinctive[p] !== 1) continue;
      seen.add(p);
      const t = this.index.textOf[p] as number;
      per.set(t, (per.get(t) ?? 0) + 1);
    }
    return per;
  }

  /** Uncommon hidden words covered in all. */
  covers(): number {
    let n = 0;
    for (const v of this.coverage().values()) n += v;
    return n;
  }

  /** Whether covering `fresh` too would pass a hidden text's coverage limit. */
  exceeds(fresh: Iterable<number>): boolean {
    for (const [t, n] of this.coverage(fresh)) if (n > limitOf(this.index.textUncommon[t] ?? 0)) return true;
    return false;
  }

  /**
   * Whether covering `fresh` too would put pieces back together: `BLOCK_RUN` consecutive hidden positions covered
   * with two uncommon words among them (a hidden sequence reassembled from pieces released apart), or five of seven
   * with `SPREAD_UNCOMMON` (pieces with a word skipped between them). Everyday phrases that overlap — "on behalf
   * of" one day, "the organisation" the next — hold too few uncommon words to count. (Pieces released one after the
   * other are one run already: the ledger's last words carry it across.)
   */
  spreads(fresh: ReadonlySet<number>): boolean {
    const has = (p: number) => this.covered.has(p) || fresh.has(p);
    for (const p of fresh) {
      let first = p;
      while (has(first - 1)) first--;
      let last = p;
      while (has(last + 1)) last++;
      if (last - first + 1 >= BLOCK_RUN && this.#uncommon(first, last) >= SPREAD_UNCOMMON - 1) return true;
      for (let s = p - SPREAD_WINDOW + 1; s <= p; s++) {
        let n = 0;
        let uncommon = 0;
        for (let q = s; q < s + SPREAD_WINDOW; q++) {
          if (!has(q)) continue;
          n++;
          uncommon += this.index.distinctive[q] ?? 0;
        }
        if (n >= SPREAD_LIMIT && uncommon >= SPREAD_UNCOMMON) return true;
      }
    }
    return false;
  }

  /** Uncommon words among hidden positions `first`..`last`. */
  #uncommon(first: number, last: number): number {
    let n = 0;
    for (let q = first; q <= last; q++) n += this.index.distinctive[q] ?? 0;
    return n;
  }

  /** Records released coverage. */
  add(positions: Iterable<number>): void {
    for (const p of positions) {
      if (this.covered.has(p)) continue;
      this.covered.add(p);
      this.#added++;
    }
  }

  /**
   * Keeps what the next release may continue: the released text from the first run still open at its end (`open`,
   * null when none is), after the previous last words when that run began in them — at most `TAIL_WORDS` words.
   * A release that leaves nothing open leaves nothing to continue, so a plain conversation stores no tail.
   */
  released(open: string | null, afterPrevious: boolean): void {
    if (open === null) {
      this.tail = "";
      return;
    }
    const words = `${afterPrevious ? this.tail : ""} ${open}`.split(/\s+/).filter((w) => w !== "");
    this.tail = words.slice(-TAIL_WORDS).join(" ");
  }

  /** Positions added since the ledger was loaded. */
  get added(): number {
    return this.#added;
  }

  /** An independent copy (a check that must not record into this one). */
  copy(): DisclosureLedger {
    return new DisclosureLedger(this.index, this.state());
  }

  state(): LedgerState {
    return { key: this.index.key, covered: [...this.covered].sort((a, b) => a - b), tail: this.tail };
  }
}
