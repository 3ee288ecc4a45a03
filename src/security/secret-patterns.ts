/**
 * What a credential looks like: by the name of the field that holds it and by
 * the shape of the value itself.
 *
 * Pure and shared: the config loader refuses configs that contain credentials,
 * and the redaction module (write path of transcripts, logs and audit) uses the
 * same value patterns so that both agree on what counts as a secret.
 */

/** A value pattern with a stable name, reported instead of the value itself. */
export interface SecretPattern {
  readonly name: string;
  readonly pattern: RegExp;
}

/**
 * Credential formats with a recognisable shape. Each pattern is anchored on
 * token boundaries so that it matches inside longer text as well.
 */
export const SECRET_VALUE_PATTERNS: readonly SecretPattern[] = [
  { name: "private_key", pattern: /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/ },
  { name: "openai_style_key", pattern: /\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}/ },
  { name: "aws_access_key_id", pattern: /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/ },
  { name: "github_token", pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})/ },
  { name: "slack_token", pattern: /\bxox[abposr]-[0-9A-Za-z-]{10,}/ },
  { name: "standard_webhook_secret", pattern: /\bwhsec_[A-Za-z0-9+/=]{16,}/ },
  { name: "telegram_bot_token", pattern: /\b\d{6,12}:[A-Za-z0-9_-]{30,}\b/ },
  { name: "google_api_key", pattern: /\bAIza[0-9A-Za-z_-]{35}\b/ },
  { name: "stripe_key", pattern: /\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}/ },
  // Lookbehinds instead of \b: a match may start only where a run of its characters starts, so a long run
  // ("eyJ-eyJ-…", "a.a.a.…") is scanned once, not once per word boundary inside it (quadratic before; see
  // bench/redaction.bench.ts).
  { name: "jwt", pattern: /(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/ },
  { name: "bearer_credential", pattern: /\bBearer\s+[A-Za-z0-9._~+/=-]{16,}/i },
  { name: "url_password", pattern: /(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]+@/i },
];

/** Field-name words that always name a credential. */
const SECRET_WORDS = new Set([
  "token",
  "secret",
  "secrets",
  "password",
  "passwd",
  "passphrase",
  "credential",
  "credentials",
  "apikey",
  "authorization",
  "cookie",
]);

/** Words that make a following `key` a credential (`apiKey`, `signing_key`, …). */
const KEY_QUALIFIERS = new Set(["api", "access", "private", "secret", "signing", "auth", "encryption", "client"]);

/** Splits `maxOutputTokens`, `bot_token`, `API-KEY` into lower-case words. */
function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .split(/[^A-Za-z0-9]+/)
    .filter((w) => w.length > 0)
    .map((w) => w.toLowerCase());
}

/**
 * True when a field name says it holds a credential: `apiKey`, `botToken`,
 * `client_secret`, `password`. Plural counters such as `maxOutputTokens` are not.
 */
export function isSecretFieldName(name: string): boolean {
  const parts = words(name);
  // The credential word must be what the field *is*: the last word, or followed only by words that still name
  // the value itself (`apiKeyValue`). `sandboxTokenTtlSeconds` or `tokenUrl` are settings about a credential.
  let end = parts.length;
  while (end > 0 && VALUE_SUFFIXES.has(parts[end - 1] as string)) end--;
  const last = parts[end - 1];
  if (last === undefined) return false;
  if (SECRET_WORDS.has(last)) return true;
  return last === "key" && end > 1 && KEY_QUALIFIERS.has(parts[end - 2] as string);
}

/** Trailing words after which a field still holds the credential itself. */
const VALUE_SUFFIXES = new Set(["value", "raw", "plain", "text", "string", "b64", "base64", "hex"]);

/** Shannon entropy in bits per character. */
function entropy(value: string): number {
  const counts = new Map<string, number>();
  for (const ch of value) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) {
    const p = n / value.length;
    bits -= p * Math.log2(p);
  }
  return bits;
}

/**
 * A long, random-looking token (mixed case and digits, high entropy), the shape
 * of most generated credentials that have no recognisable prefix.
 */
function looksLikeRandomToken(value: string): boolean {
  if (value.length < 32 || value.length > 512) return false;
  if (!/^[A-Za-z0-9+/=_.-]+$/.test(value)) return false;
  if (!/[a-z]/.test(value) || !/[A-Z]/.test(value) || !/[0-9]/.test(value)) return false;
  return entropy(value) >= 4.5;
}

/**
 * The name of the credential format a string value contains, or null.
 * Used where a whole value must not be a secret (configuration).
 */
export function detectSecretValue(value: string): string | null {
  for (const { name, pattern } of SECRET_VALUE_PATTERNS) {
    if (pattern.test(value)) return name;
  }
  if (looksLikeRandomToken(value)) return "high_entropy_token";
  return null;
}
