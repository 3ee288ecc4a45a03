/**
 * The leak guard's judgement of one text against a conversation's ledger (issue 33): every family's reading of the
 * text (after the last words already released, so runs go on across model calls), every run of hidden words in
 * them, and what releasing the text would add to the ledger. Refused: the canary in any reading; a run of
 * `BLOCK_RUN` hidden words; coverage that puts pieces back together or passes the conversation's limit. Also says
 * from where text must still be held while it streams: a run or an encoded run that the next words may extend.
 */
import { findRuns, type Run } from "./chains";
import { readingsOf } from "./families";
import { BLOCK_RUN, COVER_RUN, type DisclosureLedger } from "./ledger";

/** Why a text was refused. */
export type LeakReason = "canary" | "verbatim_hidden_text" | "disguised_hidden_text" | "hidden_text_coverage";

/** The L1 canary's value, in the letters and digits of any reading, forwards or backwards. */
const CANARY_VALUES = ["4f9c2e7a61", "sophiel1canary"].flatMap((v) => [v, [...v].reverse().join("")]);

const carriesCanary = (alnum: string) => CANARY_VALUES.some((v) => alnum.includes(v));

export interface Assessment {
  blocked: LeakReason | null;
  /** The family and reading that tripped (for logs; never text). */
  signal: string | null;
  /** Raw offset from which a stream must still hold the text (the text's length when nothing need be). */
  holdFrom: number;
  /**
   * Raw offset from which runs are still open at the end (a lone hidden word included): what the next model call
   * may continue, so the ledger keeps it as its tail (the text's length when nothing is open).
   */
  openFrom: number;
  /** Hidden positions each run would cover, and the raw offset where that run ends. */
  covers: { rawEnd: number; positions: number[] }[];
}

/** Whether a run is the kind a leak is made of: long enough, with a content word or enough letters. */
const substantial = (r: Run) => r.contentWords >= 1 || r.letters >= 16;

/**
 * Where a stream must hold an open run from: only a run whose last word is the newest complete word waits (the next
 * word extends it or the words are released), and only from its second word. One word of hidden text is every
 * word ("the", "start"): it is released as it completes, so a benign answer flows a word behind the model, and a run
 * that goes on to be refused has given away at most its first word. A run with foreign words after it may still grow
 * (filler between hidden words), but at most four of its words can go out before a fifth is refused — and holding
 * it would stall every answer with an everyday phrase in it.
 */
function holdOf(r: Run): number | null {
  return r.atEnd && r.len >= 2 ? r.rawSecond : null;
}

function reasonOf(r: Run): LeakReason {
  return r.reading === "plain" && r.family === "as_written" && !r.backwards ? "verbatim_hidden_text" : "disguised_hidden_text";
}

/**
 * Assesses `text` as the next release of a conversation whose ledger is `ledger`. Pure: the ledger is only read;
 * the caller adds `covers` once the text is released.
 */
export function assess(text: string, ledger: DisclosureLedger, context = ""): Assessment {
  const shift = context === "" ? 0 : context.length + 1;
  const full = context === "" ? text : `${context} ${text}`;
  const readings = readingsOf(full);
  const result: Assessment = { blocked: null, signal: null, holdFrom: text.length, openFrom: text.length, covers: [] };
  const alnum: string[] = [];
  const runs = findRuns(readings, ledger.index, alnum);
  if (alnum.some(carriesCanary)) return { ...result, blocked: "canary", signal: "canary" };
  const fresh = new Set<number>();
  for (const r of runs) {
    const rawEnd = Math.max(0, r.rawEnd - shift);
    if (r.len >= BLOCK_RUN && substantial(r))
      return { ...result, blocked: reasonOf(r), signal: `${r.reading}/${r.family}${r.backwards ? "/backwards" : ""}` };
    if (r.len >= COVER_RUN && r.contentWords >= 1) {
      const positions: number[] = [];
      for (let p = r.from; p <= r.to; p++) positions.push(p);
      result.covers.push({ rawEnd, positions });
      for (const p of positions) if (!ledger.covered.has(p)) fresh.add(p);
    }
    if (r.atEnd) result.openFrom = Math.min(result.openFrom, Math.max(0, r.rawStart - shift));
    const hold = holdOf(r);
    if (hold !== null) result.holdFrom = Math.min(result.holdFrom, Math.max(0, hold - shift));
  }
  if (fresh.size > 0 && ledger.spreads(fresh)) return { ...result, blocked: "hidden_text_coverage", signal: "coverage/spread" };
  if (fresh.size > 0 && ledger.exceeds(fresh)) return { ...result, blocked: "hidden_text_coverage", signal: "coverage/limit" };
  for (const r of readings) {
    if (r.open === null) continue;
    result.holdFrom = Math.min(result.holdFrom, Math.max(0, r.open - shift));
    result.openFrom = Math.min(result.openFrom, Math.max(0, r.open - shift));
  }
  return result;
}
