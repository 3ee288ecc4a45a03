/**
 * How an HTTP door hands a turn to src/runs/submit.ts: the submit context of a request (its bindings and the
 * configuration in force) and a session key parsed from its text (400 `invalid.request` when it is not one).
 */
import type { Context } from "hono";
import { GatewayError } from "../errors";
import type { SubmitContext } from "../runs/submit";
import { parseSessionKey, type SessionKey } from "../sessions/keys";
import type { AppEnv } from "./router";

/** The bindings and configuration a turn submitted by this request is accepted under. */
export function submitContext(c: Context<AppEnv>): SubmitContext {
  return { env: c.env, config: c.get("config"), configRef: c.get("configSource") };
}

/** `text` as a session key; 400 `invalid.request` with the parser's reason otherwise. */
export function sessionKeyOrThrow(text: string): SessionKey {
  const parsed = parseSessionKey(text);
  if (!parsed.ok) throw new GatewayError("invalid.request", parsed.error);
  return parsed.key;
}
