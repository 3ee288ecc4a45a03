/**
 * The output guard (S2 §5, DESIGN "Disclosure", issue 20 §2, issue 33): text a model produced that gives away
 * hidden-layer text — in plain form or in any disguise family the guard reads — or the L1 canary is refused before
 * a caller, a channel or a tool sees it. The judgement is src/prompts/leak-guard/: every reading of the text, runs
 * of hidden words in them, and a ledger of what the conversation already released.
 *
 * `checkOutput` judges one text on its own (a fresh ledger): the last check before a channel reply, a
 * `message.send` or `email.draft` body or an approval prompt leaves. `checkRelease` judges the next release of a
 * conversation against its ledger and records it when it passes: model answers, streamed text and tool-call
 * arguments, in the run engine.
 */
import { assess, type LeakReason } from "./leak-guard/assess";
import { hiddenIndex } from "./leak-guard/hidden-index";
import { DisclosureLedger } from "./leak-guard/ledger";

export type OutputVerdict = { blocked: false } | { blocked: true; reason: LeakReason };

/**
 * Whether `reply` gives away hidden text, on its own. `extraHidden` holds hidden layers that are not bundled
 * files (an inline L2 override).
 */
export function checkOutput(reply: string, extraHidden: readonly string[] = []): OutputVerdict {
  return checkRelease(reply, new DisclosureLedger(hiddenIndex(extraHidden)));
}

/**
 * Whether releasing `text` next in the conversation whose ledger is `ledger` gives away hidden text; when it does
 * not, the ledger records it (coverage and the last words). `continues`: the text follows the ledger's last words
 * (a model call's answer after the previous one's), so runs may go on across the two.
 */
export function checkRelease(text: string, ledger: DisclosureLedger, continues = true): OutputVerdict {
  const a = assess(text, ledger, continues ? ledger.tail : "");
  if (a.blocked) return { blocked: true, reason: a.blocked };
  for (const c of a.covers) ledger.add(c.positions);
  if (continues) ledger.released(a.openFrom < text.length ? text.slice(a.openFrom) : null, a.openFrom === 0);
  return { blocked: false };
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
 * Whether a tool call's arguments (an object, or the raw JSON text a model sent) give away hidden text: both the
 * strings inside and the raw text are judged, against `ledger` when given (recorded when they pass), else alone.
 */
export function checkToolArguments(args: unknown, extraHidden: readonly string[] = [], ledger?: DisclosureLedger): OutputVerdict {
  let parsed = args;
  if (typeof args === "string") {
    try {
      parsed = JSON.parse(args);
    } catch {
      parsed = args;
    }
  }
  const l = ledger ?? new DisclosureLedger(hiddenIndex(extraHidden));
  const inner = checkRelease(argumentText(parsed), l, false);
  if (inner.blocked || typeof args !== "string") return inner;
  return checkRelease(args, l, false);
}
