/**
 * Outbound credentials are bound to an origin (issue 20 §5 "Secrets stay where they belong").
 *
 * A provider key (`<PROVIDER>_API_KEY`, sent in `Authorization` to the provider's `baseUrl`) and a channel bot
 * token (`TELEGRAM_BOT_TOKEN` in the path of `channels.telegram.apiBaseUrl`, `SLACK_BOT_TOKEN` in
 * `Authorization` to `channels.slack.apiBaseUrl`, `DISCORD_BOT_TOKEN` in `Authorization` to
 * `channels.discord.apiBaseUrl`) may only ever be sent to the origin (scheme, host, port)
 * they are bound to:
 * - a value stored through `POST /api/admin/secrets` with an origin: that origin (recorded with the value);
 * - a Worker secret, or a stored value without an origin: the origin the deployment's own configuration names
 *   for it (the bundled config/gateway.json5 — or the config an app was built with, in tests). An admin token
 *   cannot change either.
 * A config version that would send a secret elsewhere is refused (`unboundDestinations`); and at the moment of
 * sending, a value whose binding does not match the destination is withheld (`boundSecret`) — so a version
 * stored before this rule, or a binding that changed since, still never leaks the key. Moving a provider or a
 * channel therefore takes the secret's value: store it again for the new origin, then post the config.
 */
import type { ConfigIssue } from "../config/issues";
import { bundledConfig } from "../config/load";
import type { GatewayConfig } from "../config/schema";

/** Where the merged env carries the origins of stored secrets (a symbol: never taken for a secret's name). */
export const STORED_SECRET_ORIGINS: unique symbol = Symbol.for("sophie.storedSecretOrigins");

/** Secret name → the origin its value may be sent to. */
export type SecretOrigins = Record<string, string>;

/** One credential a configuration sends to a URL it names. */
export interface SecretDestination {
  /** The secret's env name, e.g. `MOONSHOT_API_KEY`. */
  name: string;
  /** The origin of the URL it is sent to. */
  origin: string;
  /** The config path of that URL (for refusals). */
  path: string;
  /** What is sent there, for messages: `provider "moonshot"`, `channel "telegram"`. */
  what: string;
}

/** The origin (`https://host[:port]`) of an http(s) URL, or null when it is not one. */
export function urlOrigin(url: string): string | null {
  try {
    const u = new URL(url);
    return u.protocol === "https:" || u.protocol === "http:" ? u.origin : null;
  } catch {
    return null;
  }
}

/** Every credential `config` sends somewhere, with the origin it sends it to. */
export function secretDestinations(config: GatewayConfig): SecretDestination[] {
  const out: SecretDestination[] = [];
  for (const [id, provider] of Object.entries(config.models.providers)) {
    const origin = urlOrigin(provider.baseUrl);
    // `<PROVIDERID>_API_KEY`, as providerKeyVariable (src/providers/api-key.ts, which imports this module) spells it.
    if (origin) out.push({ name: `${id.toUpperCase()}_API_KEY`, origin, path: `models.providers.${id}.baseUrl`, what: `provider "${id}"` });
  }
  const channels = [
    ["TELEGRAM_BOT_TOKEN", "telegram", config.channels.telegram.apiBaseUrl],
    ["SLACK_BOT_TOKEN", "slack", config.channels.slack.apiBaseUrl],
    ["DISCORD_BOT_TOKEN", "discord", config.channels.discord.apiBaseUrl],
  ] as const;
  for (const [name, channel, url] of channels) {
    const origin = urlOrigin(url);
    if (origin) out.push({ name, origin, path: `channels.${channel}.apiBaseUrl`, what: `channel "${channel}"` });
  }
  return out;
}

/** Secret name → origin, as `config` places them. */
export function secretOrigins(config: GatewayConfig): SecretOrigins {
  return Object.fromEntries(secretDestinations(config).map((d) => [d.name, d.origin]));
}

/**
 * The deployment's own configuration: the config in force unless it is admin-posted (then the bundled file).
 * `source` is the config in force's `configSource.source`.
 */
export function deploymentConfig(inForce: GatewayConfig, source: "bundled" | "admin" | undefined): GatewayConfig {
  return source === "admin" ? bundledConfig() : inForce;
}

let bundledOrigins: SecretOrigins | undefined;

/** The origins the bundled file binds Worker secrets to (for runs and replies queued before bindings were recorded). */
export function bundledSecretOrigins(): SecretOrigins {
  bundledOrigins ??= secretOrigins(bundledConfig());
  return bundledOrigins;
}

/** The origin `name`'s value in `env` may be sent to: the one it was stored for, else the deployment's. */
export function allowedOrigin(env: object, name: string, deployment: SecretOrigins | undefined): string | undefined {
  const stored = (env as { [STORED_SECRET_ORIGINS]?: Record<string, string | null> })[STORED_SECRET_ORIGINS]?.[name];
  if (typeof stored === "string") return stored;
  return Object.hasOwn(deployment ?? bundledSecretOrigins(), name) ? (deployment ?? bundledSecretOrigins())[name] : undefined;
}

/** The non-empty value of `name` in `env`, if any. */
function secretValue(env: object, name: string): string | undefined {
  const v = (env as Record<string, unknown>)[name];
  return typeof v === "string" && v.trim().length > 0 ? v.trim() : undefined;
}

export type BoundSecret = { ok: true; value: string } | { ok: false; reason: "missing" | "withheld" };

/** `name`'s value when it may be sent to `url`; `withheld` when it is bound to another origin. */
export function boundSecret(env: object, name: string, url: string, deployment: SecretOrigins | undefined): BoundSecret {
  const value = secretValue(env, name);
  if (!value) return { ok: false, reason: "missing" };
  const target = urlOrigin(url);
  return target !== null && allowedOrigin(env, name, deployment) === target ? { ok: true, value } : { ok: false, reason: "withheld" };
}

/** The sentence a caller sees when a credential is withheld: names the secret and the fix, never a URL. */
export function withheldMessage(name: string, what: string): string {
  return `${name} is withheld: ${what} is configured at another origin than the one ${name} was stored for; an admin must store ${name} again for the new origin (POST /api/admin/secrets with "origin")`;
}

/**
 * Why `config` may not be put in force: each place it would send an existing secret to an origin the secret
 * is not bound to (`env` is the merged env: Worker secrets with the stored ones over them).
 */
export function unboundDestinations(config: GatewayConfig, env: object, deployment: SecretOrigins): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  for (const d of secretDestinations(config)) {
    if (!secretValue(env, d.name)) continue;
    const allowed = allowedOrigin(env, d.name, deployment);
    if (allowed === d.origin) continue;
    issues.push({
      path: d.path,
      message: `${d.what} would move to ${d.origin}, but ${d.name} is bound to ${allowed ?? "no origin"}; store ${d.name} again for the new origin (POST /api/admin/secrets with "origin": "${d.origin}") before moving it`,
    });
  }
  return issues;
}
