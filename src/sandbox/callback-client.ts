// A module of its own, with no imports, so Node-side tests (test/build/) load exactly the text a sandbox runs.

/** The environment names S5 §6.4 requires in the sandbox runtime. */
export const SANDBOX_ENV = {
  gatewayUrl: "PROLIFERATE_GATEWAY_URL",
  sessionId: "PROLIFERATE_SESSION_ID",
  token: "SANDBOX_MCP_AUTH_TOKEN",
} as const;

/**
 * The callback client every tool file embeds (S5 "Snapshot Boundary Retry Semantics", §Reliability): POSTs
 * `{tool_call_id, args}` to `/proliferate/{session}/tools/{tool}` with the sandbox token; transport failures,
 * timeouts and 5xx answers are retried with exponential backoff, at most MAX_RETRIES times, always with the
 * SAME tool_call_id — the gateway runs a `(tool, tool_call_id)` once and replays its answer, so a retry never
 * repeats an effect. Every failure becomes `{success: false, result}`; nothing is thrown.
 */
export const CALLBACK_CLIENT = `const MAX_RETRIES = 5;
const ATTEMPT_TIMEOUT_MS = 120_000;
const BASE_DELAY_MS = 500;
const RETRYABLE = /ECONNRESET|ECONNREFUSED|ETIMEDOUT|EPIPE|socket hang up|fetch failed|AbortError|TimeoutError/;

async function callGateway(tool, toolCallId, args) {
  const base = String(process.env.${SANDBOX_ENV.gatewayUrl} ?? "").replace(/\\/+$/, "");
  const session = String(process.env.${SANDBOX_ENV.sessionId} ?? "");
  const token = String(process.env.${SANDBOX_ENV.token} ?? "");
  if (!base || !session || !token) return { success: false, result: "sandbox.unavailable: ${SANDBOX_ENV.gatewayUrl}, ${SANDBOX_ENV.sessionId} and ${SANDBOX_ENV.token} must be set" };
  const url = base + "/proliferate/" + encodeURIComponent(session) + "/tools/" + encodeURIComponent(tool);
  const body = JSON.stringify({ tool_call_id: toolCallId, args });
  for (let attempt = 0; ; attempt++) {
    let retry;
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { authorization: "Bearer " + token, "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      });
      const answer = await res.json().catch(() => null);
      if (res.ok && answer && typeof answer.success === "boolean") return answer;
      if (res.status < 500) return { success: false, result: "gateway " + res.status + ": " + (answer?.error?.message ?? "unexpected answer") };
      retry = "gateway " + res.status;
    } catch (err) {
      retry = [err?.name, err?.message, err?.cause?.code].filter(Boolean).join(" ");
      if (!RETRYABLE.test(retry)) return { success: false, result: "gateway unreachable: " + retry };
    }
    if (attempt >= MAX_RETRIES) return { success: false, result: "gateway unreachable after " + (attempt + 1) + " attempts: " + retry };
    await new Promise((r) => setTimeout(r, BASE_DELAY_MS * 2 ** attempt));
  }
}
`;
