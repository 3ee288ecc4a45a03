/**
 * S4 §7 backend interface over the real `openai` SDK, provider mocked at the
 * network boundary: plain and streamed replies, native tool calls mapped back
 * from wire names, bounded retries with backoff on 429/5xx, no retry on 401,
 * timeouts — and never a fallback to another provider or model.
 */
import { describe, expect, it } from "vitest";
import { resolveConfiguredModelRef } from "../../src/config/model-ref";
import { type ChatRequest, chat, ProviderError, streamChat } from "../../src/providers/adapter";
import { requestsTo, runConfig, scriptProvider, testConfig, uniqueHost } from "../support/config";
import { appFor, runDetail, startRun, waitForRun } from "../support/runs";

const noWait = { backoffMs: () => 0, sleep: async () => {} };

function request(scenario: string, over: Partial<ChatRequest> = {}) {
  const host = uniqueHost(scenario);
  const model = resolveConfiguredModelRef(testConfig(host), "moonshot:kimi-k1-128k");
  const req: ChatRequest = { model, apiKey: "mk-test-0123456789abcdef", messages: [{ role: "user", content: "ping" }], ...over };
  return { host, req };
}

const fsTool = {
  name: "fs.list_dir",
  description: "List a directory",
  parameters: { type: "object", properties: { path: { type: "string" } } },
};

describe("chat()", () => {
  it("a plain reply, with usage and one request", async () => {
    const { host, req } = request("ok");
    expect(await chat(req, noWait)).toEqual({
      content: "pong",
      toolCalls: [],
      finishReason: "stop",
      usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15 },
      attempts: 1,
    });
    expect(await requestsTo(host)).toEqual([{ method: "POST", host, path: "/v1/chat/completions", authorized: true }]);
  });

  it("native tool calls use a legal wire name and come back as the gateway's tool name", async () => {
    const { req } = request("toolcall", { tools: [fsTool] });
    const r = await chat(req, noWait);
    expect(r.finishReason).toBe("tool_calls");
    expect(r.toolCalls).toEqual([{ id: "call_1", name: "fs.list_dir", arguments: { path: "." } }]);
  });

  it("a 5xx is retried with backoff and then succeeds", async () => {
    const waits: number[] = [];
    const { host, req } = request("flaky");
    const r = await chat(req, { backoffMs: (n) => n * 100, sleep: async (ms) => void waits.push(ms) });
    expect(r.attempts).toBe(2);
    expect(waits).toEqual([100]);
    expect(await requestsTo(host)).toHaveLength(2);
  });

  it("429 is retried a bounded number of times, then fails as rate_limited — no other provider is tried", async () => {
    const { host, req } = request("ratelimit");
    const err = await chat(req, { ...noWait, maxAttempts: 3 }).catch((e) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect(err).toMatchObject({ reason: "rate_limited", code: "provider.unavailable" });
    expect(await requestsTo(host)).toHaveLength(3);
  });

  it("401 is not retried, and the provider's text (which echoes the key) is not copied", async () => {
    const { host, req } = request("unauthorized");
    const err = await chat(req, noWait).catch((e) => e);
    expect(err).toMatchObject({ reason: "auth", retryable: false });
    expect(err.message).toBe(`the provider rejected the API key for moonshot:kimi-k1-128k (HTTP 401)`);
    expect(err.message).not.toContain("mk-test");
    expect(await requestsTo(host)).toHaveLength(1);
  });

  it("a timeout is reported as timeout after the bounded attempts", async () => {
    const { host, req } = request("slow");
    const err = await chat(req, { ...noWait, timeoutMs: 100, maxAttempts: 2 }).catch((e) => e);
    expect(err).toMatchObject({ reason: "timeout", status: 504 });
    expect(await requestsTo(host)).toHaveLength(2);
  });
});

describe("streamChat()", () => {
  it("yields deltas then the whole result", async () => {
    const { req } = request("ok");
    const events = [];
    for await (const e of streamChat(req, new AbortController().signal, noWait)) events.push(e);
    expect(
      events
        .filter((e) => e.type === "delta")
        .map((e) => (e.type === "delta" ? e.content : ""))
        .join(""),
    ).toBe("pong");
    expect(events.at(-1)).toEqual({
      type: "done",
      result: {
        content: "pong",
        toolCalls: [],
        finishReason: "stop",
        usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15 },
        attempts: 1,
      },
    });
  });

  it("streamed tool calls are assembled and mapped back", async () => {
    const { req } = request("toolcall", { tools: [fsTool] });
    let done: unknown;
    for await (const e of streamChat(req, new AbortController().signal, noWait)) if (e.type === "done") done = e.result;
    expect(done).toMatchObject({
      finishReason: "tool_calls",
      toolCalls: [{ id: "call_1", name: "fs.list_dir", arguments: { path: "." } }],
    });
  });

  it("a model configured without streaming refuses to stream", async () => {
    const { req } = request("ok");
    const noStream = { ...req, model: { ...req.model, supportsStreaming: false } };
    const gen = streamChat(noStream, new AbortController().signal, noWait);
    await expect(gen.next()).rejects.toMatchObject({ reason: "bad_request" });
  });
});

describe("a provider that answers 200 without a completion (a misbehaving model server)", () => {
  it("chat(): a completion with no choice is a failed call (server_error, not retried), not an empty reply", async () => {
    const { host, req } = request("script");
    await scriptProvider(host, [{ misbehave: "no_choices" }]);
    await expect(chat(req, noWait)).rejects.toMatchObject({
      name: "ProviderError",
      reason: "server_error",
      retryable: false,
      message: "the model moonshot:kimi-k1-128k answered without a completion",
    });
  });

  it("streamChat(): a plain JSON body to a streaming request is a failed call, not an empty stream", async () => {
    const { host, req } = request("script");
    await scriptProvider(host, [{ misbehave: "json_to_stream", content: "hello" }]);
    const events: unknown[] = [];
    await expect(
      (async () => {
        for await (const e of streamChat(req, new AbortController().signal, noWait)) events.push(e);
      })(),
    ).rejects.toMatchObject({ reason: "server_error", message: "the model moonshot:kimi-k1-128k answered without a completion" });
    expect(events).toEqual([]);
  });

  it("through POST /v1/runs: the run fails with provider.unavailable instead of completing with an empty answer", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ misbehave: "no_choices" }]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "hello");
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "failed", output: "the model moonshot:kimi-k1-128k answered without a completion" });
    const last = (await runDetail(app, id)).events.at(-1);
    expect([last.event_type, last.payload.code]).toEqual(["run.failed", "provider.unavailable"]);
  });
});
