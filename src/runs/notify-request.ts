/**
 * The `notify` field of `POST /v1/runs` and `POST /v1/chat/messages` (issue 24 §5, D-073): where the run's completion
 * webhook goes (src/scheduler/run-notify.ts delivers it). Checked before any run is queued, failing closed:
 * - the URL must be `https` and pass the outbound rules `http.get` and job webhooks use (`checkPublicHttpsUrl`: no
 *   credentials, default ports only, no private, loopback, link-local or internal address or name, no special-use
 *   name, at most 2,048 characters; issue 33, D-088); anything else is a 400 naming `notify.url`;
 * - the gateway must be able to sign it (D-089): SCHEDULER_WEBHOOK_SECRET, the master the caller's own endpoint key
 *   (`v1`) is derived from, and a usable GATEWAY_SIGNING_KEY (`v1a`); without either the request is a 400 naming it —
 *   never a run that is accepted and then silently not notified.
 */
import { z } from "@hono/zod-openapi";
import { webhookKey } from "../channels/standard-webhooks";
import type { GatewayConfig } from "../config/schema";
import { GatewayError } from "../errors";
import type { RunNotifySpec } from "../scheduler/run-notify";
import { signingKeyProblem, type WebhookSecretsEnv } from "../scheduler/webhook-keys";
import { checkPublicHttpsUrl, MAX_URL_LENGTH } from "../tools/net-policy";

/** The request field (OpenAPI component `RunNotify`). */
export const RunNotifyRequest = z
  .strictObject({
    url: z.string().openapi({
      description: `https URL (at most ${MAX_URL_LENGTH} characters, no credentials, a public host on the default port) the run view is POSTed to`,
      example: "https://example.com/hooks/gateway",
    }),
  })
  .openapi("RunNotify", {
    description:
      "Completion webhook: when the run completes, fails, is cancelled or waits for an approval, the gateway POSTs its run view " +
      "(as GET /v1/runs/{run_id} answers it) here, signed with Standard Webhooks (docs/api.md, Completion webhooks)",
  });

/** `url` checked with the outbound rules for webhooks (public https only); throws `invalid.request` naming `field`. */
export function checkedWebhookUrl(url: string, field: string): URL {
  const checked = checkPublicHttpsUrl(url);
  if (!checked.ok) throw new GatewayError("invalid.request", `${field}: ${checked.problem}`);
  return checked.url;
}

/**
 * The completion webhook a request asks for, checked (see the module comment); throws `invalid.request` naming
 * `notify.url` or the missing secret. Delivery settings are the job notifications' (`scheduler.notify`).
 */
export async function runNotifySpec(notify: { url: string }, env: WebhookSecretsEnv, config: GatewayConfig): Promise<RunNotifySpec> {
  const url = checkedWebhookUrl(notify.url, "notify.url");
  if (!webhookKey(env.SCHEDULER_WEBHOOK_SECRET)) {
    throw new GatewayError(
      "invalid.request",
      "notify: completion webhooks need the SCHEDULER_WEBHOOK_SECRET secret (whsec_…), which is not set on this gateway",
    );
  }
  const problem = await signingKeyProblem(env);
  if (problem) throw new GatewayError("invalid.request", `notify: completion webhooks cannot be signed: ${problem}`);
  const { maxAttempts, retryBaseMs, timeoutMs } = config.scheduler.notify;
  return { channel: "run", target: url.toString(), maxAttempts, retryBaseMs, timeoutMs };
}
