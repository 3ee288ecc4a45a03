/**
 * Provider API keys (S1 §1.3): read from the Worker env as `<PROVIDERID>_API_KEY`
 * and nowhere else. The resolver never logs the key, never falls back to
 * another provider's key, and fails with exactly `Missing <VAR>`.
 */
import { GatewayError } from "../http/errors";

/** The env var that holds a provider's key: `moonshot` → `MOONSHOT_API_KEY`. */
export function providerKeyVariable(providerId: string): string {
  return `${providerId.toUpperCase()}_API_KEY`;
}

/**
 * The provider's API key from `env`. Remote providers without a key fail with
 * `Missing <VAR>`; local providers (`local: true`) may have none.
 */
export function resolveProviderApiKey(env: object, providerId: string, provider: { local: boolean }): string | undefined {
  const variable = providerKeyVariable(providerId);
  const value = (env as Record<string, unknown>)[variable];
  const key = typeof value === "string" ? value.trim() : "";
  if (key.length > 0) return key;
  if (provider.local) return undefined;
  throw new GatewayError("provider.unavailable", `Missing ${variable}`);
}
