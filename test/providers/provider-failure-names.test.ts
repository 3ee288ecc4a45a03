/**
 * Issue 20 §5 "A failed run shows the caller the provider's base URL; name the provider, never its URL":
 * a provider failure reaches API callers (the run view, its event stream, the OpenAI front door's error, the
 * session transcript) naming the provider by its config id and never by its base URL or host.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { resolveConfiguredModelRef } from "../../src/config/model-ref";
import { chat } from "../../src/providers/adapter";
import { runConfig, scriptProvider, testConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, call, waitForRun } from "../support/runs";

/** What must never appear: the host and anything URL-shaped about the provider. */
function expectNoProviderAddress(text: string, host: string): void {
  expect(text).not.toContain(host);
  expect(text).not.toContain("provider.test");
  expect(text).not.toContain(`https://${host}`);
}

describe("ISSUE20-§5.3 a failed run names the provider, never its URL", () => {
  it("ISSUE20-§5.3 provider 500 → GET /v1/runs/{id}, its events, the admin run view and the transcript name moonshot, not the host", async () => {
    const host = uniqueHost("error500");
    const app = appFor(runConfig(host, { runs: { providerAttempts: 1 } }));
    const queued = await call(app, "POST", "/v1/chat/messages", { agent_id: "main", room_id: "r1", user_id: "u1", message: "hi" });
    expect(queued.status).toBe(202);
    const run = await waitForRun(app, queued.body.id);
    expect(run.status).toBe("failed");
    expect(run.output).toBe("the provider failed for moonshot:kimi-k1-128k (HTTP 500)");

    const events = await call(app, "GET", `/v1/runs/${run.id}/events`);
    expect(events.status).toBe(200);
    expect(events.text).toContain("the provider failed for moonshot:kimi-k1-128k (HTTP 500)");
    expectNoProviderAddress(events.text, host);

    const detail = await call(app, "GET", `/api/admin/runs/${run.id}`, undefined, ADMIN);
    expect(detail.status).toBe(200);
    expectNoProviderAddress(detail.text, host);

    const transcript = await call(app, "GET", `/api/admin/chat/sessions/${queued.body.session_id}/transcript`, undefined, ADMIN);
    expect(transcript.status).toBe(200);
    expectNoProviderAddress(transcript.text, host);
    expectNoProviderAddress(JSON.stringify(run), host);
  });

  it("ISSUE20-§5.3 provider 500 → the /v1/chat/completions error names moonshot, not the host", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ status: 500 }]);
    const app = appFor(runConfig(host, { runs: { providerAttempts: 1 } }));
    const res = await app.request(
      "https://gateway.test/v1/chat/completions",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "x" }] }),
      },
      env,
    );
    expect(res.status).toBe(502);
    const runId = res.headers.get("X-Run-Id");
    const body = (await res.json()) as { error: { message: string; type: string; code: string } };
    expect(body.error).toEqual({
      message: `run ${runId} failed: the provider failed for moonshot:kimi-k1-128k (HTTP 500)`,
      type: "server_error",
      code: "provider.unavailable",
    });
    expectNoProviderAddress(JSON.stringify(body), host);
  });

  it("ISSUE20-§5.3 connection refused, timeout and 401 → messages name moonshot, never the base URL", async () => {
    const host = uniqueHost("ok");
    const model = resolveConfiguredModelRef(testConfig(host), "moonshot:kimi-k1-128k");
    const req = { model, apiKey: "mk-test-0123456789abcdef", messages: [{ role: "user" as const, content: "ping" }] };
    const refused: typeof fetch = async () => {
      throw new TypeError("connect ECONNREFUSED");
    };
    const err = await chat(req, { maxAttempts: 1, fetch: refused }).catch((e) => e);
    expect(err.message).toBe("cannot reach moonshot:kimi-k1-128k");
    const slow = await chat(
      { ...req, model: resolveConfiguredModelRef(testConfig(uniqueHost("slow")), "moonshot:kimi-k1-128k") },
      {
        maxAttempts: 1,
        timeoutMs: 100,
      },
    ).catch((e) => e);
    expect(slow.message).toBe("the model moonshot:kimi-k1-128k did not answer in time");
    const denied = await chat(
      { ...req, model: resolveConfiguredModelRef(testConfig(uniqueHost("unauthorized")), "moonshot:kimi-k1-128k") },
      {
        maxAttempts: 1,
      },
    ).catch((e) => e);
    expect(denied.message).toBe("the provider rejected the API key for moonshot:kimi-k1-128k (HTTP 401)");
  });
});
