/**
 * Who made a request and what the auth middleware reads to say so: the types the auth middleware (auth.ts) and the
 * API key checks (api-keys.ts) share, apart from both so neither imports the other's module for them.
 */
import type { KeyGrant } from "../../keys/lookup";

/** Who made the request, once authenticated (`sandbox`: a sandbox token on a tool-callback route, S5 §6.3). */
export type Principal =
  | { scope: "admin" }
  | { scope: "api"; callerId: string; key?: KeyGrant }
  | { scope: "sandbox"; sessionId: string; tokenId: string };

/** The env vars authentication reads. */
export interface AuthEnv {
  GATEWAY_ADMIN_TOKEN?: string;
  GATEWAY_API_TOKENS?: string;
  /** Where API key records live (absent: only the env tokens are known). */
  DB?: D1Database;
  /** The request ceiling of API key records (Cloudflare Rate Limiting; absent: only their exact D1 limits). */
  API_KEY_RATE_LIMITER?: RateLimit;
}
