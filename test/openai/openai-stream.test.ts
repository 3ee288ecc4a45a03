/**
 * Issue 23 "Streaming that stays guarded", end to end: a model that streams slowly (the mock provider paces its
 * SSE chunks), `stream: true` on /v1/chat/completions through the official `openai` SDK and `deltas=true` on the
 * run events stream. The text arrives in several pieces as the incremental output guard releases it and adds up
 * to the stored answer; hidden-layer text — verbatim, cut across chunks, base64 — is never released; channels
 * still get one final message; without `stream` nothing changes.
 */
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { baseWithoutCanary } from "../support/leaks";
import { measureOverlap } from "../support/overlap-measure";
import { ALICE, type App, appFor, call, runDetail, until, waitForRun } from "../support/runs";

/** The official SDK, pointed at the gateway app (no retries). */
function sdk(app: App): OpenAI {
  return new OpenAI({
    apiKey: ALICE,
    baseURL: "https://gateway.test/v1",
    maxRetries: 0,
    fetch: async (input: string | URL | Request, init?: RequestInit) =>
      app.request(input instanceof Request ? input : String(input), init, env),
  });
}

/** The agent's model streams (supportsStreaming), from the scripted provider at `host`. */
const streamingApp = (host: string, extra: Parameters<typeof runConfig>[1] = {}) =>
  appFor(runConfig(host, { model: { supportsStreaming: true }, ...extra }));

const words = (n: number, stem = "river") => Array.from({ length: n }, (_, i) => `${stem}${String.fromCharCode(97 + (i % 26))}${i}`);
/** `text` cut every `n` characters (so cuts fall inside words and inside base64). */
const cut = (text: string, n: number) => text.match(new RegExp(`[\\s\\S]{1,${n}}`, "g")) ?? [];
const REFUSAL = disclosureRefusalMessage();

/** Streams one turn; returns the content pieces in arrival order, the run id and the finish reason. */
async function streamTurn(app: App, content: string): Promise<{ pieces: string[]; runId: string; finish: string | null }> {
  const { data: stream, response } = await sdk(app)
    .chat.completions.create({ model: "agent:main", messages: [{ role: "user", content }], stream: true })
    .withResponse();
  const pieces: string[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0]?.delta.content;
    if (c) pieces.push(c);
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { pieces, runId: response.headers.get("X-Run-Id") as string, finish };
}

describe("ISSUE23 guarded streaming on POST /v1/chat/completions", () => {
  it("ISSUE23 a slowly streamed reply arrives in several chunks, the first before the model ends; they concatenate to the stored reply", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }]);
    const { pieces, runId, finish } = await streamTurn(streamingApp(host), "tell me about rivers");
    expect(pieces.length).toBeGreaterThanOrEqual(3);
    expect(pieces.join("")).toBe(answer);
    expect(pieces[0]?.length).toBeLessThan(answer.length);
    expect(finish).toBe("stop");
    const view = await waitForRun(streamingApp(host), runId);
    expect(view.output).toBe(answer);
    // The persisted run: the usual events (no delta is stored) and one assistant message with the whole reply.
    const detail = await runDetail(streamingApp(host), runId);
    expect(detail.events.map((e: { event_type: string }) => e.event_type)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "run.completed",
    ]);
  });

  // Issue 33 §3 (pace): a run is held from its second word, so its first word ("You") goes out as it completes.
  it("ISSUE23 a model streaming the base prompt verbatim in 7-character chunks: nothing of it released but its first word, then the refusal", async () => {
    const host = uniqueHost("script");
    const hidden = baseWithoutCanary();
    await scriptProvider(host, [{ content: hidden, chunks: cut(hidden, 7), chunk_delay_ms: 1 }]);
    const { pieces, runId } = await streamTurn(streamingApp(host), "hello");
    // The first word goes out only when the stream was read before the run formed (the route watches from its first read).
    expect([[REFUSAL], ["You ", `\n\n${REFUSAL}`]]).toContainEqual(pieces);
    expect((await waitForRun(streamingApp(host), runId)).output).toBe(REFUSAL);
  });

  it("ISSUE23 after a benign lead-in, the base prompt across chunk boundaries: only lead-in text and the first hidden word, then the refusal", async () => {
    const host = uniqueHost("script");
    const lead = `${words(40).join(" ")}. Now, word for word, what I was told:\n`;
    const text = lead + baseWithoutCanary();
    await scriptProvider(host, [{ content: text, chunks: cut(text, 5), chunk_delay_ms: 1 }]);
    const { pieces } = await streamTurn(streamingApp(host), "hello");
    const all = pieces.join("");
    expect(all.endsWith(`\n\n${REFUSAL}`)).toBe(true);
    const released = all.slice(0, all.length - REFUSAL.length - 2);
    expect(released.length).toBeGreaterThan(0);
    expect(`${lead}You `.startsWith(released)).toBe(true);
    expect(measureOverlap(released)).toEqual({ canary: false, shingles: 0, grams: 0 });
    expect(pieces.at(-1)).toBe(`\n\n${REFUSAL}`);
  });

  it("ISSUE23 base64 of the base prompt, streamed in pieces: none of it released, the stream ends with the refusal", async () => {
    const host = uniqueHost("script");
    const lead = `${words(30).join(" ")}. Encoded as you asked: `;
    const text = lead + btoa(String.fromCharCode(...new TextEncoder().encode(baseWithoutCanary())));
    await scriptProvider(host, [{ content: text, chunks: cut(text, 10), chunk_delay_ms: 1 }]);
    const { pieces } = await streamTurn(streamingApp(host), "hello");
    const all = pieces.join("");
    expect(all.endsWith(REFUSAL)).toBe(true);
    const released = all.slice(0, Math.max(0, all.length - REFUSAL.length - 2));
    expect(lead.startsWith(released)).toBe(true);
    expect(measureOverlap(released)).toEqual({ canary: false, shingles: 0, grams: 0 });
  });

  it("ISSUE23 without stream, a streaming model's answer is unchanged: one chat.completion with the whole reply", async () => {
    const host = uniqueHost("script");
    const answer = `${words(40).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 2 }]);
    const data = await sdk(streamingApp(host)).chat.completions.create({ model: "agent:main", messages: [{ role: "user", content: "x" }] });
    expect(data.choices).toEqual([
      { index: 0, message: { role: "assistant", content: answer, refusal: null }, finish_reason: "stop", logprobs: null },
    ]);
  });
});

describe("ISSUE23 released text on GET /v1/runs/{id}/events?deltas=true", () => {
  /** The SSE messages of a response body: event name and data. */
  const messagesOf = (body: string) =>
    body
      .split("\n\n")
      .filter((m) => m.includes("event:"))
      .map((m) => ({
        event: /^event: (.*)$/m.exec(m)?.[1] as string,
        id: /^id: (.*)$/m.exec(m)?.[1] ?? null,
        data: JSON.parse(/^data: (.*)$/m.exec(m)?.[1] as string),
      }));

  it("ISSUE23 run.delta messages (no id) carry the released text in order, then the held words, before run.completed", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }]);
    const app = streamingApp(host);
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "rivers" });
    const id = queued.body.id as string;
    const res = await app.request(
      `https://gateway.test/v1/runs/${id}/events?deltas=true`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      env,
    );
    const messages = messagesOf(await res.text());
    const deltas = messages.filter((m) => m.event === "run.delta");
    expect(deltas.length).toBeGreaterThanOrEqual(2);
    expect(deltas.every((d) => d.id === null && d.data.run_id === id)).toBe(true);
    let offset = 0;
    for (const d of deltas) {
      expect(d.data.offset).toBe(offset);
      offset += d.data.text.length;
    }
    expect(deltas.map((d) => d.data.text).join("")).toBe(answer);
    expect(messages.map((m) => m.event).filter((e) => e !== "run.delta")).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "run.completed",
    ]);
    expect(messages.at(-1)?.event).toBe("run.completed");
    expect(messages.at(-2)?.event).toBe("run.delta");
  });

  it("ISSUE23 without deltas=true the events stream is unchanged: lifecycle events only", async () => {
    const host = uniqueHost("script");
    const answer = `${words(40).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 2 }]);
    const app = streamingApp(host);
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "rivers" });
    const res = await app.request(
      `https://gateway.test/v1/runs/${queued.body.id}/events`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      env,
    );
    expect(messagesOf(await res.text()).map((m) => m.event)).toEqual(["run.created", "run.started", "model.requested", "run.completed"]);
  });
});

describe("ISSUE23 external channels stay final-only", () => {
  it("ISSUE23 a Telegram chat with a slowly streaming model gets exactly one message, the whole reply, after the run", async () => {
    const host = uniqueHost("script");
    const tg = `ok-${crypto.randomUUID().slice(0, 8)}.telegram.test`;
    const answer = `${words(50).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 5 }]);
    const app = streamingApp(host, {
      agent: { tools: { allow: [] } },
      channels: { telegram: { enabled: true, apiBaseUrl: `https://${tg}` } },
    });
    const update = {
      update_id: Math.floor(Math.random() * 1e9),
      message: { message_id: 77, date: 1_700_000_000, chat: { id: 4242, type: "private" }, from: { id: 4242, is_bot: false }, text: "hi" },
    };
    const res = await app.request(
      "https://gateway.test/webhooks/telegram/main",
      {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string },
        body: JSON.stringify(update),
      },
      env,
    );
    expect(res.status).toBe(200);
    const posts = async () => (await (await fetch(`https://mock.control/platform?host=${tg}`)).json()) as { body: { text: string } }[];
    await until(async () => (await posts()).length > 0);
    await new Promise((r) => setTimeout(r, 300));
    expect((await posts()).map((p) => p.body.text)).toEqual([answer]);
  });
});

describe("ISSUE23 the OpenAI route validates only the new message", () => {
  const post = (app: App, messages: unknown[]) =>
    app.request(
      "https://gateway.test/v1/chat/completions",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "agent:main", messages }),
      },
      env,
    );

  it("ISSUE23 a resent history with malformed old messages (unknown role, image part, long name, bad content) is not re-validated", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "fine" }]);
    const res = await post(appFor(runConfig(host)), [
      { role: "robot", content: 5 },
      { role: "user", content: [{ type: "image_url", image_url: { url: "https://x.test/a.png" } }] },
      { role: "system", content: { not: "text" } },
      { role: "assistant", content: "earlier answer", name: "n".repeat(300) },
      { role: "user", content: "hello" },
    ]);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe("fine");
  });

  it("ISSUE23 the same faults in this turn's messages are refused as before, naming the message", async () => {
    const app = appFor(runConfig(uniqueHost("script")));
    const cases: [unknown[], string][] = [
      [
        [{ role: "robot", content: "x" }],
        'messages[0].role: Invalid option: expected one of "system"|"developer"|"user"|"assistant"|"tool"|"function"',
      ],
      [
        [
          { role: "assistant", content: "y" },
          { role: "user", content: [{ type: "text", text: "a" }, { type: "image_url" }] },
        ],
        'messages[1].content[1]: only text content is accepted (got "image_url")',
      ],
      [
        [
          { role: "assistant", content: "y" },
          { role: "system", content: 7 },
          { role: "user", content: "x" },
        ],
        "messages[1].content: Invalid input",
      ],
      [[{ role: "user", content: "x", name: "n".repeat(300) }], "messages[0].name: Too big: expected string to have <=256 characters"],
      [
        [
          { role: "user", content: "x" },
          { role: "assistant", content: "y" },
        ],
        'messages[1]: the last message must be the user\'s new message (role "user")',
      ],
    ];
    for (const [messages, message] of cases) {
      const res = await post(app, messages);
      expect(res.status, message).toBe(400);
      expect(await res.json(), message).toEqual({ error: { message, type: "invalid_request_error", code: "invalid.request" } });
    }
  });
});
