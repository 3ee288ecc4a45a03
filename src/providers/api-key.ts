/**
 * Provider API keys (S1 §1.3): read from the Worker env as `<PROVIDERID>_API_KEY`
 * and nowhere else. The resolver never logs the key, never falls back to
 * another provider's key, and fails with exactly `Missing <VAR>`.
 */
import { GatewayError } from "../errors";
import { allowedOrigin, type SecretOrigins, urlOrigin, withheldMessage } from "../security/secret-origins";

/** The env var that holds a provider's key: `moonshot` → `MOONSHOT_API_KEY`. */
export function providerKeyVariable(providerId: string): string {
  return `${providerId.toUpperCase()}_API_KEY`;
}

/**
 * The provider's API key from `env`. Remote providers without a key fail with
 * `Missing <VAR>`; local providers (`local: true`) may have none. This only looks
 * the key up: whatever sends it uses `resolveBoundProviderKey`.
 */
export function resolveProviderApiKey(env: object, providerId: string, provider: { local: boolean }): string | undefined {
  const variable = providerKeyVariable(providerId);
  const value = (env as Record<string, unknown>)[variable];
  const key = typeof value === "string" ? value.trim() : "";
  if (key.length > 0) return key;
  if (provider.local) return undefined;
  throw new GatewayError("provider.unavailable", `Missing ${variable}`);
}

/**
 * The provider's API key for a call to `provider.baseUrl`, as `resolveProviderApiKey` — but a key bound to
 * another origin is withheld (issue 20 §5): `provider.unavailable`, and the key is never sent. `deployment`:
 * where the deployment's own config sends each key (src/security/secret-origins.ts).
 */
export function resolveBoundProviderKey(
  env: object,
  providerId: string,
  provider: { local: boolean; baseUrl: string },
  deployment: SecretOrigins | undefined,
): string | undefined {
  const key = resolveProviderApiKey(env, providerId, provider);
  if (key === undefined) return undefined;
  const variable = providerKeyVariable(providerId);
  const target = urlOrigin(provider.baseUrl);
  if (target !== null && allowedOrigin(env, variable, deployment) === target) return key;
  throw new GatewayError("provider.unavailable", withheldMessage(variable, `provider "${providerId}"`));
}
