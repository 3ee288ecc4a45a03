/**
 * Issue 21 §6: the callback client the sandbox bootstrap ships (src/sandbox/callback-client.ts), run
 * as the sandbox runs it (plain JavaScript in Node), against a scripted fetch: transport failures and 5xx are
 * retried with the SAME tool_call_id, at most 5 times (6 attempts), with exponential backoff; a 4xx is not retried.
 */
import { describe, expect, it } from "vitest";
import { CALLBACK_CLIENT } from "../../src/sandbox/callback-client.ts";

type Step = Response | Error;

/** The client's `callGateway`, with `fetch` scripted by `steps` and the backoff delays recorded instead of waited. */
function client(steps: Step[]) {
  const calls: { url: string; auth: string; body: { tool_call_id: string; args: unknown } }[] = [];
  const delays: number[] = [];
  const fetch = async (url: string, init: RequestInit) => {
    calls.push({ url, auth: String((init.headers as Record<string, string>).authorization), body: JSON.parse(String(init.body)) });
    const step = steps.shift() ?? new Error("no more steps");
    if (step instanceof Error) throw step;
    return step;
  };
  const setTimeout = (fn: () => void, ms: number) => {
    delays.push(ms);
    fn();
  };
  const env = { PROLIFERATE_GATEWAY_URL: "https://gw.example/", PROLIFERATE_SESSION_ID: "ses_1", SANDBOX_MCP_AUTH_TOKEN: "sbx1.t.s" };
  const make = new Function("process", "fetch", "setTimeout", `${CALLBACK_CLIENT}\nreturn callGateway;`);
  const callGateway = make({ env }, fetch, setTimeout) as (
    tool: string,
    id: string,
    args: unknown,
  ) => Promise<{ success: boolean; result: string }>;
  return { callGateway, calls, delays };
}

const fetchFailed = () => Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNRESET" } });
const ok = () => new Response(JSON.stringify({ success: true, result: "snapshot saved" }), { status: 200 });

describe("ISSUE21-6 the sandbox callback client", () => {
  it("ISSUE21-6 retries transport failures and 5xx with the same tool_call_id, then returns the gateway's answer", async () => {
    const c = client([fetchFailed(), new Response("{}", { status: 503 }), ok()]);
    const answer = await c.callGateway("save_snapshot", "call-7", { message: "m" });
    expect(answer).toEqual({ success: true, result: "snapshot saved" });
    expect(c.calls.length).toBe(3);
    for (const call of c.calls) {
      expect(call.url).toBe("https://gw.example/proliferate/ses_1/tools/save_snapshot");
      expect(call.auth).toBe("Bearer sbx1.t.s");
      expect(call.body).toEqual({ tool_call_id: "call-7", args: { message: "m" } });
    }
    expect(c.delays).toEqual([500, 1000]);
  });

  it("ISSUE21-6 gives up after 5 retries (6 attempts) with success false, and never retries a 4xx", async () => {
    const down = client(Array.from({ length: 10 }, fetchFailed));
    const answer = await down.callGateway("verify", "call-8", {});
    expect(answer.success).toBe(false);
    expect(answer.result).toBe("gateway unreachable after 6 attempts: TypeError fetch failed ECONNRESET");
    expect(down.calls.length).toBe(6);
    expect(down.delays).toEqual([500, 1000, 2000, 4000, 8000]);
    const forbidden = client([new Response(JSON.stringify({ error: { code: "auth.forbidden", message: "revoked" } }), { status: 403 })]);
    expect(await forbidden.callGateway("verify", "call-9", {})).toEqual({ success: false, result: "gateway 403: revoked" });
    expect(forbidden.calls.length).toBe(1);
  });
});
