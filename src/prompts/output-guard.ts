/**
 * The output guard (S2 §5, DESIGN "Disclosure"): after the model answers, a
 * reply that reproduces hidden-layer text — a verbatim run of 12 or more words
 * from any hidden layer, or the L1 canary marker — is blocked and replaced by
 * the refusal. Deterministic, and cheap: word 12-grams of the bundled prompt
 * files are indexed once per isolate; an inline L2 is indexed per call.
 */
import { allPrompts } from "./catalog";

/** Length of the verbatim word run that counts as reproduction. */
export const VERBATIM_RUN_WORDS = 12;

/** The canary line of the base prompt, matched ignoring case and separators. */
const CANARY = /sophie\W*l1\W*canary/i;

function words(text: string): string[] {
  return text
    .normalize("NFKC")
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w.length > 0);
}

function addShingles(text: string, into: Set<string>): void {
  const w = words(text);
  for (let i = 0; i + VERBATIM_RUN_WORDS <= w.length; i++) into.add(w.slice(i, i + VERBATIM_RUN_WORDS).join(" "));
}

let bundledIndex: Set<string> | undefined;

/** 12-word shingles of every bundled prompt file (all are hidden layers). */
function bundledShingles(): Set<string> {
  if (!bundledIndex) {
    bundledIndex = new Set();
    for (const p of allPrompts()) addShingles(p.content, bundledIndex);
  }
  return bundledIndex;
}

export type OutputVerdict = { blocked: false } | { blocked: true; reason: "canary" | "verbatim_hidden_text" };

/**
 * Whether `reply` reproduces hidden text. `extraHidden` holds hidden layers
 * that are not bundled files (an inline L2 override).
 */
export function checkOutput(reply: string, extraHidden: readonly string[] = []): OutputVerdict {
  if (CANARY.test(reply)) return { blocked: true, reason: "canary" };
  const index = bundledShingles();
  const extra = new Set<string>();
  for (const text of extraHidden) addShingles(text, extra);
  const w = words(reply);
  for (let i = 0; i + VERBATIM_RUN_WORDS <= w.length; i++) {
    const shingle = w.slice(i, i + VERBATIM_RUN_WORDS).join(" ");
    if (index.has(shingle) || extra.has(shingle)) return { blocked: true, reason: "verbatim_hidden_text" };
  }
  return { blocked: false };
}
