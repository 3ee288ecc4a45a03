/**
 * Tool-call arguments under the output guard (issue 20 §2). A call whose
 * arguments carry hidden-layer text is never run and its arguments are never
 * stored: the engine records a placeholder (what was withheld and the SHA-256
 * of the original text) in their place, so events, run views, bundles and the
 * audit log show only the placeholder, and the gate answers the call with a
 * `policy.denied` tool error the model can read.
 */
import { sha256Hex } from "./hash";
import { hiddenIndex } from "./leak-guard/hidden-index";
import { DisclosureLedger } from "./leak-guard/ledger";
import { checkToolArguments } from "./output-guard";

/** The key that marks stored arguments as withheld. */
export const WITHHELD_KEY = "$withheld";

/** The tool error a withheld call is answered with (S3 error envelope). */
export const WITHHELD_ERROR = {
  code: "policy.denied",
  message:
    "the call's arguments carry text of the hidden instructions (system prompt or operator policies); it was not run and its arguments were not recorded",
} as const;

/**
 * Arguments as the engine stores them: the original text, or a placeholder when they leak hidden text — judged
 * against the conversation's ledger (issue 33: arguments are released to a tool, so they count like any release),
 * or alone given only the inline layers.
 */
export async function guardArguments(
  args: string,
  ledgerOrHidden: DisclosureLedger | readonly string[],
): Promise<{ args: string; withheld: false } | { args: string; withheld: true; reason: string }> {
  const ledger = ledgerOrHidden instanceof DisclosureLedger ? ledgerOrHidden : new DisclosureLedger(hiddenIndex(ledgerOrHidden));
  const verdict = checkToolArguments(args, [], ledger);
  if (!verdict.blocked) return { args, withheld: false };
  const placeholder = JSON.stringify({ [WITHHELD_KEY]: `hidden-layer text (${verdict.reason})`, sha256: await sha256Hex(args) });
  return { args: placeholder, withheld: true, reason: verdict.reason };
}

/** Whether stored arguments are a withheld placeholder. */
export function isWithheld(args: string): boolean {
  try {
    const parsed = JSON.parse(args) as unknown;
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) && WITHHELD_KEY in parsed;
  } catch {
    return false;
  }
}
