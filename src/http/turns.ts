/**
 * How an HTTP door hands a turn to src/runs/submit.ts: the submit context of a request (its bindings and the
 * configuration in force), the provider readiness a `strict` startup validation demands before a turn is taken,
 * and a session key parsed from its text (400 `invalid.request` when it is not one).
 */
import type { Context } from "hono";
import { defaultModelRef, resolveConfiguredModelRef } from "../config/model-ref";
import { GatewayError } from "../errors";
import type { SubmitContext } from "../runs/submit";
import { deploymentConfig, secretOrigins } from "../security/secret-origins";
import { parseSessionKey, type SessionKey } from "../sessions/keys";
import type { AppEnv } from "./router";

/** The bindings and configuration a turn submitted by this request is accepted under. */
export function submitContext(c: Context<AppEnv>): SubmitContext {
  return { env: c.env, config: c.get("config"), configRef: c.get("configSource") };
}

/**
 * S1 §1.6: with `startupValidation: "strict"` on the default model's provider, a turn is taken only once the
 * default model has validated in this isolate — until then 503 `provider.unavailable` with the one actionable line,
 * and nothing is stored. The isolate's validator checks once (a failure again after 30 s), so only the first turn
 * of an isolate, or one after a failure, waits for the provider's `GET /models`. `warn` and `off` never hold a turn:
 * `warn` is reported by `GET /healthz?deep=1` and `GET /api/admin/status`, which run the same check.
 */
export async function providerReady(c: Context<AppEnv>): Promise<void> {
  const config = c.get("config");
  const provider = config.models.providers[resolveConfiguredModelRef(config, defaultModelRef(config)).providerId];
  if (provider?.startupValidation !== "strict") return;
  const deployment = secretOrigins(deploymentConfig(config, c.get("configSource").source));
  await c.get("startupValidator").require(c.env, config, c.get("logger"), deployment);
}

/** `text` as a session key; 400 `invalid.request` with the parser's reason otherwise. */
export function sessionKeyOrThrow(text: string): SessionKey {
  const parsed = parseSessionKey(text);
  if (!parsed.ok) throw new GatewayError("invalid.request", parsed.error);
  return parsed.key;
}
