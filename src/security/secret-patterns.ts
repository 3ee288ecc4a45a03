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
  // The gateway's own API keys (D-077): `sgw_<key_id>_<secret>`.
  { name: "sophie_gateway_key", pattern: /\bsgw_[0-9a-f]{16}_[A-Za-z0-9_-]{43}/ },
  // jwt and url_password: the leading part of the match (`eyJ`, the scheme's first letter) is made of the same
  // characters as the unbounded run after it, so every word boundary inside one run ("eyJ-eyJ-…", "a.a.a.…") is a
  // start whose attempt scans to the end of that run and fails there: quadratic (hours for 1 MiB). Every start in
  // one run shares the run's end, and the attempt's success depends only on what follows that end (and, for jwt,
  // on the run being long enough, which the first start satisfies best), so when the run's first start fails all
  // later ones fail too. The negative lookbehind skips them: it looks back lazily to the nearest earlier start in
  // the same run (constant work per start amortised; it cannot cross a character outside the run, nor the end
  // of a previous match), so each run is scanned once. The matches are exactly those of the plain `\b…` pattern.
  // See "Redaction is linear in its input" in docs/reliability.md.
  {
    name: "jwt",
    pattern: /\beyJ(?<!\beyJ[A-Za-z0-9_-]*?eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/,
  },
  { name: "bearer_credential", pattern: /\bBearer\s+[A-Za-z0-9._~+/=-]{16,}/i },
  { name: "url_password", pattern: /\b[a-z](?<!\b[a-z][a-z0-9+.-]*?[a-z])[a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]+@/i },
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
  return (
    name
      .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
      // `APIKey` → `API Key`: a space before the last capital of a run that a lower-case letter follows. A lookahead,
      // not `([A-Z]+)([A-Z][a-z])`, which rescans the rest of a long capital run from every capital in it (quadratic).
      .replace(/([A-Z])(?=[A-Z][a-z])/g, "$1 ")
      .split(/[^A-Za-z0-9]+/)
      .filter((w) => w.length > 0)
      .map((w) => w.toLowerCase())
  );
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
