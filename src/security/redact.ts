/**
 * Redaction of free text on the write path: every credential-shaped run and
 * every literal secret value is replaced by a placeholder naming its kind.
 * The session/audit redaction work builds on this (JSON paths, emails, phones).
 */
import { SECRET_VALUE_PATTERNS } from "./secret-patterns";

const GLOBAL_PATTERNS = SECRET_VALUE_PATTERNS.map(({ name, pattern }) => ({
  name,
  pattern: new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : `${pattern.flags}g`),
}));

/** Secret values shorter than this are not matched literally (too many false hits). */
const MIN_LITERAL_SECRET = 8;

/**
 * `text` with credential patterns and the given literal secret values replaced
 * by `[REDACTED:<kind>]`.
 */
export function redactText(text: string, literalSecrets: readonly string[] = []): string {
  let out = text;
  for (const secret of literalSecrets) {
    if (secret.length >= MIN_LITERAL_SECRET) out = out.split(secret).join("[REDACTED:secret]");
  }
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
  }
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
  const joined = previous + current;
  const cut = previous.length;
  const spans: [number, number][] = [];
  for (const secret of literalSecrets) {
    if (secret.length < MIN_LITERAL_SECRET) continue;
    for (let at = joined.indexOf(secret); at >= 0; at = joined.indexOf(secret, at + 1)) {
      if (at < cut && at + secret.length > cut) spans.push([at, at + secret.length]);
    }
  }
  for (const { pattern } of GLOBAL_PATTERNS) {
    for (const m of joined.matchAll(pattern)) {
      const start = m.index ?? 0;
      if (start < cut && start + m[0].length > cut) spans.push([start, start + m[0].length]);
    }
  }
  if (spans.length === 0) return { previous, current, changed: false };
  const start = Math.min(...spans.map(([s]) => s));
  const end = Math.max(...spans.map(([, e]) => e));
  return {
    previous: `${previous.slice(0, start)}[REDACTED:split_secret]`,
    current: `[REDACTED:split_secret]${current.slice(end - cut)}`,
    changed: true,
  };
}
