/**
 * Redaction of free text on the write path: every credential-shaped run and
 * every literal secret value is replaced by a placeholder naming its kind.
 * The session/audit redaction work builds on this (JSON paths, emails, phones).
 */
import { MIN_SECRET_LENGTH, type SecretSpan, secretMatcher } from "./secret-forms";
import { SECRET_VALUE_PATTERNS } from "./secret-patterns";
import { privateKeyParts } from "./signing-key";

const GLOBAL_PATTERNS = SECRET_VALUE_PATTERNS.map(({ name, pattern }) => ({
  name,
  pattern: new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : `${pattern.flags}g`),
}));

/** Secret values shorter than this are not matched literally (too many false hits). */
const MIN_LITERAL_SECRET = MIN_SECRET_LENGTH;

/** `text` with each span replaced by its placeholder (`[REDACTED:secret]`, `[REDACTED:encoded_secret]`). */
function replaceSpans(text: string, spans: readonly SecretSpan[], placeholder?: string): string {
  if (spans.length === 0) return text;
  let out = "";
  let copied = 0;
  for (const span of spans) {
    out += `${text.slice(copied, span.start)}${placeholder ?? `[REDACTED:${span.kind}]`}`;
    copied = span.end;
  }
  return out + text.slice(copied);
}

/**
 * `text` with credential patterns and the given literal secret values replaced by `[REDACTED:<kind>]`. A
 * secret is found in every form src/security/secret-forms.ts derives: verbatim, in any letter case, split by
 * whitespace or zero-width characters, URL-encoded, hex, and base64 (`[REDACTED:encoded_secret]`).
 */
export function redactText(text: string, literalSecrets: readonly string[] = []): string {
  let out = literalSecrets.length > 0 ? replaceSpans(text, secretMatcher(literalSecrets).find(text)) : text;
  for (const { name, pattern } of GLOBAL_PATTERNS) out = out.replace(pattern, `[REDACTED:${name}]`);
  return out;
}

/** Env var names that hold secrets: their literal values are redacted wherever they appear. */
const SECRET_ENV_NAME = /(?:_API_KEY|_TOKEN|_TOKENS|_SECRET|_KEY|_PASSWORD)$/;

/** Every secret value the Worker was given (for literal redaction). Token lists are split into their tokens. */
export function secretValuesFromEnv(env: object): string[] {
  const values: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (typeof value !== "string" || !SECRET_ENV_NAME.test(name)) continue;
    values.push(value);
    if (name === "GATEWAY_API_TOKENS") for (const entry of value.split(",")) values.push(entry.slice(entry.indexOf(":") + 1).trim());
    // The signing key is JSON holding a public x beside the private d: the d alone must be redacted too (D-089).
    if (name === "GATEWAY_SIGNING_KEY") values.push(...privateKeyParts(value));
  }
  // Inbound secrets replaced through the admin API, still accepted during the rotation overlap (stored-secrets.ts).
  const previous = (env as Record<symbol, Record<string, { value: string }> | undefined>)[Symbol.for("sophie.previousSecrets")];
  for (const p of Object.values(previous ?? {})) values.push(p.value);
  return values.filter((v) => v.length >= MIN_LITERAL_SECRET);
}

/** The placeholder redaction leaves behind: `[REDACTED:<kind>]`. */
export const REDACTION_PLACEHOLDER = /\[REDACTED:[a-z0-9_]+\]/g;

/**
 * Text for the model: redaction placeholders become a plain note, so that the
 * model never treats `[REDACTED:…]` as if it were the value (and copies it into
 * a tool call or a reply).
 */
export function placeholdersForModel(text: string): string {
  return text.replace(REDACTION_PLACEHOLDER, "(a credential was removed here by the gateway)");
}

/**
 * A secret split across two consecutive messages ("my key is sk-abc" + "def…"):
 * finds credential patterns and literal secrets in `previous + current` that
 * cross the boundary, and redacts both halves. Returns the texts to store.
 */
export function redactAcrossBoundary(
  previous: string,
  current: string,
  literalSecrets: readonly string[] = [],
): { previous: string; current: string; changed: boolean } {
  const literal = redactAcrossMessages([previous], current, literalSecrets);
  const before = literal.previous[0] as string;
  const after = literal.current;
  const joined = before + after;
  const cut = before.length;
  const spans: [number, number][] = [];
  for (const { pattern } of GLOBAL_PATTERNS) {
    for (const m of joined.matchAll(pattern)) {
      const start = m.index ?? 0;
      if (start < cut && start + m[0].length > cut) spans.push([start, start + m[0].length]);
    }
  }
  if (spans.length === 0) return { previous: before, current: after, changed: literal.changed.length > 0 };
  const start = Math.min(...spans.map(([s]) => s));
  const end = Math.max(...spans.map(([, e]) => e));
  return {
    previous: `${before.slice(0, start)}[REDACTED:split_secret]`,
    current: `[REDACTED:split_secret]${after.slice(end - cut)}`,
    changed: true,
  };
}

/**
 * A configured secret (in any form `redactText` finds) spread over several consecutive messages, pasted in
 * chunks or emitted piece by piece: `previous` (oldest first) and `current` are read as one text, a
 * separator between messages, and every match that crosses a message boundary is replaced by
 * `[REDACTED:split_secret]` in each message it touches. `changed` lists the indexes of `previous` that
 * changed; after this, no concatenation of the stored messages holds the secret.
 */
export function redactAcrossMessages(
  previous: readonly string[],
  current: string,
  literalSecrets: readonly string[],
): { previous: string[]; current: string; changed: number[]; currentChanged: boolean } {
  const parts = [...previous, current];
  const unchanged = { previous: [...previous], current, changed: [], currentChanged: false };
  if (previous.length === 0 || literalSecrets.length === 0) return unchanged;
  const offsets: number[] = [];
  let at = 0;
  for (const part of parts) {
    offsets.push(at);
    at += part.length + 1;
  }
  // Which part a position of the joined text falls in (positions are never on a separator: it is skipped).
  const partAt = (pos: number) => {
    let lo = 0;
    let hi = parts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((offsets[mid] as number) <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const local: SecretSpan[][] = parts.map(() => []);
  for (const span of secretMatcher(literalSecrets).find(parts.join("\n"))) {
    const first = partAt(span.start);
    const last = partAt(span.end - 1);
    if (first === last) continue; // inside one message: its own redaction handles it
    for (let i = first; i <= last; i++) {
      const base = offsets[i] as number;
      const start = Math.max(span.start, base) - base;
      const end = Math.min(span.end, base + (parts[i] as string).length) - base;
      if (end > start) local[i]?.push({ start, end, kind: "secret" });
    }
  }
  const out = parts.map((part, i) => replaceSpans(part, local[i] as SecretSpan[], "[REDACTED:split_secret]"));
  return {
    previous: out.slice(0, -1),
    current: out.at(-1) as string,
    changed: previous.map((_, i) => i).filter((i) => (local[i] as SecretSpan[]).length > 0),
    currentChanged: (local.at(-1) as SecretSpan[]).length > 0,
  };
}

/**
 * Redacts every string inside a JSON value (object keys are kept), returning the new value and the
 * JSON paths whose values changed (`payload.input.token`, `payload.items[2]`), for S3 §3 `redactions`.
 */
export function redactJson(value: unknown, literalSecrets: readonly string[], root = "$"): { value: unknown; paths: string[] } {
  const paths: string[] = [];
  const walk = (v: unknown, path: string): unknown => {
    if (typeof v === "string") {
      const r = redactText(v, literalSecrets);
      if (r !== v) paths.push(path);
      return r;
    }
    if (Array.isArray(v)) return v.map((item, i) => walk(item, `${path}[${i}]`));
    if (v && typeof v === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, item] of Object.entries(v))
        out[k] = walk(item, /^[A-Za-z_$][\w$]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`);
      return out;
    }
    return v;
  };
  return { value: walk(value, root), paths };
}

/** Which personal data `redactPersonalData` replaces (S1 §4.5: "if configured"). */
export interface PersonalDataOptions {
  emails: boolean;
  phones: boolean;
}

/**
 * An email address. Starts only where a local-part run starts (the lookbehind),
 * so a long run without `@` is scanned once, not once per position; `logo@2x.png`
 * style asset names are not addresses.
 */
const EMAIL =
  /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@(?!\d+x\.)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9-])/g;

/**
 * A run of digit groups that might be a phone number: an optional `+`, an
 * optional `(area)`, then up to eight groups joined by one space, `-` or `.`.
 * Bounded, and starting only after a character that cannot continue a number,
 * a word, a path or a version, so each start does constant work. Whether a
 * candidate (or a space-separated part of it) is a phone is `isPhoneNumber`'s call.
 */
const PHONE_CANDIDATE = /(?<![\w.+/:@#$€£=-])(?:\+\d{1,4}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,15}(?:[ .-]\(?\d{1,15}\)?){0,7}(?![\w@/:])/g;

/** The personal-data patterns, for the structural linearity test (test/security/redaction.test.ts). */
export const PERSONAL_DATA_PATTERNS: Readonly<Record<"email" | "phone", RegExp>> = { email: EMAIL, phone: PHONE_CANDIDATE };

/** NANP without a `+`: `555-123-4567`, `1 555 123 4567`; one separator throughout, area code not starting 0/1. */
const NANP = /^(?:1([ .-]))?[2-9]\d\d([ .-])\d{3}\2\d{4}$/;
/** A calendar date inside a candidate: 2024-01-15, 15.01.2024, 01/15/2024. */
const DATE_IN_NUMBER = /(?:^|[^\d])(?:(?:19|20)\d\d([-/.])\d{1,2}\1\d{1,2}|\d{1,2}([-/.])\d{1,2}\2(?:19|20)\d\d)(?![\d])/;
/** Dotted quads (IPv4) are never phones. */
const DOTTED_QUAD = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/**
 * True for an E.164-ish number (`+` then 9–15 digits, country code not 0) or a
 * common national format with at least 9 digits: a trunk `0` then groups of ≥ 2
 * digits (`020 7946 0958`, `06 12 34 56 78`, bare `0612345678`), a `(area)`
 * (`(555) 123-4567`), or NANP (`555-123-4567`). Never a bare run not starting
 * with 0 (timestamps, ids), a date, a dotted quad or a version number.
 */
export function isPhoneNumber(candidate: string): boolean {
  const digits = candidate.replace(/\D/g, "");
  if (digits.length < 9 || digits.length > 15) return false;
  if (candidate.startsWith("+")) return digits[0] !== "0";
  if (DATE_IN_NUMBER.test(candidate) || DOTTED_QUAD.test(candidate)) return false;
  const groups = candidate.match(/\d+/g) ?? [];
  if (groups.length === 1) return /^0[1-9]\d{8,9}$/.test(candidate);
  if (candidate.startsWith("(")) return groups.slice(1).every((g) => g.length >= 2);
  if (candidate.startsWith("0") && !candidate.startsWith("00")) return groups.every((g) => g.length >= 2);
  if (candidate.startsWith("00")) return /^00[1-9]/.test(candidate) && groups.slice(1).every((g) => g.length >= 2);
  return NANP.test(candidate);
}

/**
 * Redacts the phone numbers in one candidate run: the whole run if it is one,
 * else the longest phone-shaped spans that start at the run's start or after a space.
 */
function redactPhoneCandidate(candidate: string): string {
  let digitCount = 0;
  for (let i = 0; i < candidate.length; i++) if (candidate.charCodeAt(i) >= 48 && candidate.charCodeAt(i) <= 57) digitCount++;
  if (digitCount < 9) return candidate;
  if (isPhoneNumber(candidate)) return "[REDACTED:phone]";
  if (!candidate.includes(" ")) return candidate;
  const parts = candidate.split(" ");
  // digitsBefore[k]: digits in parts[0..k-1]; offset[k]: where parts[k] starts.
  const digitsBefore = [0];
  const offset = [0];
  for (const part of parts) {
    digitsBefore.push((digitsBefore.at(-1) as number) + part.replace(/\D/g, "").length);
    offset.push((offset.at(-1) as number) + part.length + 1);
  }
  let out = "";
  let copied = 0;
  for (let i = 0; i < parts.length; i++) {
    const start = offset[i] as number;
    if (start < copied) continue;
    for (let j = parts.length; j > i; j--) {
      const digits = (digitsBefore[j] as number) - (digitsBefore[i] as number);
      if (digits < 9) break;
      const end = (offset[j] as number) - 1;
      if (digits <= 15 && isPhoneNumber(candidate.slice(start, end))) {
        out += `${candidate.slice(copied, start)}[REDACTED:phone]`;
        copied = end;
        break;
      }
    }
  }
  return out + candidate.slice(copied);
}

/**
 * `text` with email addresses (`[REDACTED:email]`) and phone numbers
 * (`[REDACTED:phone]`) replaced, each only when enabled (S1 §4.5 "if
 * configured"). Emails go first, so digits inside an address are not a phone.
 */
export function redactPersonalData(text: string, options: PersonalDataOptions): string {
  let out = text;
  if (options.emails) out = out.replace(EMAIL, "[REDACTED:email]");
  if (options.phones) out = out.replace(PHONE_CANDIDATE, redactPhoneCandidate);
  return out;
}
