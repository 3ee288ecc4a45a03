// Secrets the Worker reads. `wrangler types` generates the bindings and vars in
// worker-configuration.d.ts; secrets are declared here, each optional, because
// any of them may be missing and the code must fail closed when it is.
// Every name is documented in .dev.vars.example and docs/configuration.md.

interface GatewaySecrets {
  /** Bearer token for the admin scope (/api/admin/*). */
  GATEWAY_ADMIN_TOKEN?: string;
  /** Comma-separated `callerId:token` pairs for the api scope (/v1/*). */
  GATEWAY_API_TOKENS?: string;
  /** API key of the `moonshot` provider; other providers use `<PROVIDERID>_API_KEY`. */
  MOONSHOT_API_KEY?: string;
  /** Telegram: the webhook's secret_token (1–256 of A-Za-z0-9_-), checked on every update. */
  TELEGRAM_WEBHOOK_SECRET?: string;
  /** Telegram: the bot token (`123456:ABC…`), for sendMessage; its numeric id is the session account. */
  TELEGRAM_BOT_TOKEN?: string;
  /** Slack: the app's signing secret (v0 signatures). */
  SLACK_SIGNING_SECRET?: string;
  /** Slack: the bot token (`xoxb-…`), for chat.postMessage. */
  SLACK_BOT_TOKEN?: string;
  /** Discord: the application's public key (64 hex characters), verifying every interaction (Ed25519). */
  DISCORD_PUBLIC_KEY?: string;
  /** Discord: the application id (a snowflake), for follow-up messages; it is also the session account. */
  DISCORD_APPLICATION_ID?: string;
  /** Discord: a bot token, only for scheduled job reports to a channel (POST /channels/{id}/messages); optional. */
  DISCORD_BOT_TOKEN?: string;
  /** Standard Webhooks channel: the `whsec_…` key inbound messages are verified with and replies are signed with. */
  STANDARD_WEBHOOK_SECRET?: string;
  /** AES-256-GCM key (base64 of 32 bytes) that encrypts the admin secrets store in D1. */
  SECRETS_ENCRYPTION_KEY?: string;
  /** HMAC key (≥ 32 characters) that signs sandbox tokens for the tool-callback routes (S5). */
  SANDBOX_TOKEN_SECRET?: string;
  /**
   * Standard Webhooks master secret (`whsec_…`): each webhook endpoint's own `v1` key is derived from it (D-089) —
   * job notifications, budget alerts, completion webhooks.
   */
  SCHEDULER_WEBHOOK_SECRET?: string;
  /** The gateway's Ed25519 private JWK `{kty, crv, kid, x, d}` (`v1a` webhook signatures, the JWKS); Worker secret only. */
  GATEWAY_SIGNING_KEY?: string;
  /** JSON array of retired Ed25519 public JWKs, still published in the JWKS so old signatures verify. */
  GATEWAY_SIGNING_KEYS_RETIRED?: string;
}

// The global `Env` (handlers, the Durable Object) and `Cloudflare.Env` (`env` from cloudflare:workers).
interface Env extends GatewaySecrets {}
declare namespace Cloudflare {
  interface Env extends GatewaySecrets {}
}
