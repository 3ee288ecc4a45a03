/**
 * Workspace paths for the `fs.*` tools (S4 §4: "operate under a sandbox root;
 * deny path escapes"). An agent's workspace is the `{agentId}/` prefix of the
 * WORKSPACE bucket; a tool path is resolved against it here, purely, before any
 * storage call.
 *
 * R2 keys are literal strings, so `agent/../x` could never reach another
 * agent's prefix in R2 itself. Escapes are still refused rather than stored
 * literally: keys may later be read as real paths (exports, sandboxes, URLs),
 * and a path must mean the same thing to every reader. For the same reason
 * `%` sequences are kept literally but a segment that would decode (even
 * after repeated decoding or Unicode compatibility folding) to `..` is refused.
 */
import { AGENT_ID } from "../sessions/keys";

/** S4 §4 bound on a tool path, and R2's own bound on a key; both in UTF-8 bytes. */
export const MAX_PATH_BYTES = 1024;

export type PathRefusal =
  | "invalid_agent_id"
  | "too_long"
  | "control_character"
  | "backslash"
  | "absolute"
  | "traversal"
  | "encoded_traversal";

export type ResolvedPath = { ok: true; key: string; relative: string } | { ok: false; reason: PathRefusal };

// C0, DEL and C1 controls (NUL included).
const CONTROL = /\p{Cc}/u;
const DRIVE = /^[A-Za-z]:(\/|$)/;
const PERCENT_RUN = /(?:%[0-9A-Fa-f]{2})+/g;
const MAX_DECODE_ROUNDS = 4;
const utf8 = new TextEncoder();

/**
 * Resolves a tool path against the agent's workspace: `{agentId}/{relative}`,
 * with `.`, empty segments and `a/../b` normalised away; the root is `{agentId}/`.
 */
export function resolveWorkspacePath(agentId: string, path: string): ResolvedPath {
  if (!AGENT_ID.test(agentId)) return { ok: false, reason: "invalid_agent_id" };
  if (utf8.encode(path).length > MAX_PATH_BYTES) return { ok: false, reason: "too_long" };
  if (CONTROL.test(path)) return { ok: false, reason: "control_character" };
  if (path.includes("\\")) return { ok: false, reason: "backslash" };
  if (path.startsWith("/") || DRIVE.test(path)) return { ok: false, reason: "absolute" };

  const segments: string[] = [];
  for (const segment of path.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") {
      if (segments.length === 0) return { ok: false, reason: "traversal" };
      segments.pop();
      continue;
    }
    if (isDisguisedTraversal(segment)) return { ok: false, reason: "encoded_traversal" };
    segments.push(segment);
  }
  const relative = segments.join("/");
  const key = `${agentId}/${relative}`;
  if (utf8.encode(key).length > MAX_PATH_BYTES) return { ok: false, reason: "too_long" };
  return { ok: true, key, relative };
}

/**
 * True when a segment is not literally `..` but means `..` to a reader that
 * percent-decodes (`%2e%2e`, `%252e%252e`, `..%2f..`) or folds Unicode
 * compatibility forms (fullwidth `．．`, `‥`), or decodes to control characters
 * or to bytes that are not UTF-8.
 */
function isDisguisedTraversal(segment: string): boolean {
  let current = segment;
  for (let round = 0; round <= MAX_DECODE_ROUNDS; round++) {
    const folded = current.normalize("NFKC");
    if (CONTROL.test(folded)) return true;
    if (folded.split(/[/\\]/).some((part) => part === "..")) return true;
    const decoded = percentDecode(current);
    if (decoded === null) return true;
    if (decoded === current) return false;
    current = decoded;
  }
  // Still decoding after this many rounds: nothing legitimate is nested this deep.
  return true;
}

/**
 * One round of percent-decoding, or null when an encoded run is not valid
 * UTF-8: overlong forms such as `%c0%ae` were `.` to some decoders.
 */
function percentDecode(s: string): string | null {
  let invalid = false;
  const decoded = s.replace(PERCENT_RUN, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      invalid = true;
      return run;
    }
  });
  return invalid ? null : decoded;
}
