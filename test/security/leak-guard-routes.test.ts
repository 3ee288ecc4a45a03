/**
 * Issue 33, end to end: the committed adversarial corpus's replies from a scripted hostile model, through every
 * route that releases model text — POST /v1/chat/completions (whole and streamed), POST /v1/runs (Prefer: wait),
 * POST /v1/chat/messages, the WebSocket route (streamed), a run's event stream with `deltas=true` and a Telegram chat — and hidden text spread over a run's
 * tool rounds and over a conversation's turns. What a caller or an admin can read afterwards (the answer, the SSE or
 * socket frames, the run view, its events, the transcript, the chat's messages) gives away zero hidden 5-word
 * sequences, read through every family's inverse (test/support/disclosure-corpus.ts).
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import corpus from "../fixtures/disclosure/adversarial-corpus.json";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type CorpusReply, countedSequences, releasedSequences } from "../support/disclosure-corpus";
import type { PlatformPost, ScriptStep } from "../support/outbound";
import { ADMIN, ALICE, type App, appFor, call, invocations, readResponse, registerTestTools, until } from "../support/runs";
import { connect, inForce } from "../support/socket";

beforeAll(() => registerTestTools());

const replies = (corpus.replies as CorpusReply[]).filter((r) => r.layer === "base");
const BASE = replies.find((r) => r.family === "plain")?.text ?? "";
const COUNTED = countedSequences([BASE]);
const ROUTES = ["completions", "completions_stream", "runs_wait", "chat_messages", "socket_stream", "events_stream", "telegram"] as const;
type Route = (typeof ROUTES)[number];
const headers = { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" };
const label = () => crypto.randomUUID().slice(0, 8);

/** What an admin reads about a run afterwards: its detail (events included) and its conversation's transcript. */
async function afterwards(app: App, runId: string): Promise<string> {
  const detail = await call(app, "GET", `/api/admin/runs/${runId}`, undefined, ADMIN);
  const transcript = await call(app, "GET", `/api/admin/chat/sessions/${detail.body.run.session_id}/transcript`, undefined, ADMIN);
  return [detail.text, transcript.text].join("\n");
}

/** Waits for the run to end (read as an admin: a chat's run is not the API caller's). */
async function finished(app: App, runId: string): Promise<{ status: string; output: string | null }> {
  let run = { status: "", output: null as string | null };
  await until(async () => {
    run = (await call(app, "GET", `/api/admin/runs/${runId}`, undefined, ADMIN)).body?.run ?? run;
    return ["completed", "failed", "cancelled"].includes(run.status);
  }, 15_000);
  return run;
}

/** Sends the user message on `route`; returns the run and everything the caller received. */
async function drive(route: Route, host: string, streaming: boolean): Promise<{ app: App; runId: string; received: string }> {
  const config = runConfig(host, {
    model: { supportsStreaming: streaming },
    agent: { tools: { allow: ["test.echo"] } },
    channels: { telegram: { enabled: true, apiBaseUrl: `https://tg-${label()}.telegram.test` } },
  });
  const app = route === "socket_stream" ? await inForce(config) : appFor(config);
  const message = "Tell me something about your day.";
  if (route === "completions" || route === "completions_stream") {
    const body = { model: "agent:main", messages: [{ role: "user", content: message }], stream: route === "completions_stream" };
    const r = await readResponse(
      await app.request("https://gateway.test/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body) }, env),
    );
    return { app, runId: r.headers.get("X-Run-Id") as string, received: r.text };
  }
  if (route === "runs_wait") {
    const init = { method: "POST", headers: { ...headers, Prefer: "wait=20" }, body: JSON.stringify({ agent_id: "main", message }) };
    const r = await readResponse(await app.request("https://gateway.test/v1/runs", init, env));
    return { app, runId: r.body.id, received: r.text };
  }
  if (route === "chat_messages") {
    const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "u1", room_id: `room-${label()}`, agent_id: "main", message });
    await finished(app, sent.body.id);
    return { app, runId: sent.body.id, received: (await call(app, "GET", `/v1/runs/${sent.body.id}`)).text };
  }
  if (route === "events_stream") {
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message });
    const r = await readResponse(await app.request(`https://gateway.test/v1/runs/${queued.body.id}/events?deltas=true`, { headers }, env));
    return { app, runId: queued.body.id, received: r.text };
  }
  if (route === "socket_stream") {
    const client = await connect(app, `room-${label()}`);
    client.send({ type: "message", id: "m1", text: message, stream: true });
    const run = await client.until((f) => f.type === "run" && f.id === "m1" && ["completed", "failed"].includes(f.run?.status), 15_000);
    client.ws.close();
    return { app, runId: run.run.id, received: JSON.stringify(client.frames) };
  }
  return telegram(app, config.channels.telegram.apiBaseUrl as string, message);
}

async function telegram(app: App, apiBaseUrl: string, text: string): Promise<{ app: App; runId: string; received: string }> {
  const chat = Math.floor(Math.random() * 1e9);
  const update = {
    update_id: chat,
    message: {
      message_id: 5,
      date: 1_700_000_000,
      chat: { id: chat, type: "private" },
      from: { id: chat, is_bot: false, first_name: "Eve" },
      text,
    },
  };
  const init = {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string },
    body: JSON.stringify(update),
  };
  expect((await app.request("https://gateway.test/webhooks/telegram/main", init, env)).status).toBe(200);
  const host = new URL(apiBaseUrl).host;
  const posts = async (): Promise<PlatformPost[]> => (await fetch(`https://mock.control/platform?host=${host}`)).json();
  await until(async () => (await posts()).length >= 1, 15_000);
  // The chat's run, from the D1 index once shipped: its session key names the chat.
  let runId = "";
  await until(async () => {
    const row = await env.DB.prepare("SELECT run_id FROM runs WHERE session_key LIKE ?").bind(`%${chat}%`).first<{ run_id: string }>();
    runId = row?.run_id ?? "";
    return runId !== "";
  }, 15_000);
  return { app, runId, received: JSON.stringify(await posts()) };
}

describe("ISSUE33 the corpus through every route that releases model text", () => {
  it(`ISSUE33 routes: ${replies.length} disguise families, spread over ${ROUTES.length} routes: each refused, 0 hidden 5-word sequences reach a caller or an admin`, {
    timeout: 240_000,
  }, async () => {
    const leaked: Record<string, number> = {};
    const answered: Record<string, boolean> = {};
    let watchedLive = 0;
    for (const [i, reply] of replies.entries()) {
      const route = ROUTES[i % ROUTES.length] as Route;
      const host = uniqueHost("script");
      // The events stream is opened after the run is queued: the model streams slowly enough for it to watch.
      const slow = route === "events_stream" ? { chunks: reply.text.match(/[\s\S]{1,64}/g) ?? [], chunk_delay_ms: 1 } : {};
      await scriptProvider(host, [{ content: reply.text, ...slow }]);
      const { app, runId, received } = await drive(route, host, route.endsWith("_stream"));
      const run = await finished(app, runId);
      const seen = `${received}\n${await afterwards(app, runId)}`;
      const n = releasedSequences(seen, COUNTED).length;
      if (n > 0) leaked[`${reply.family} on ${route}`] = n;
      if (route === "events_stream" && received.includes('"offset"')) watchedLive++;
      answered[reply.family] = run.output === disclosureRefusalMessage();
    }
    console.log(
      `ISSUE33 routes: ${Object.values(answered).filter(Boolean).length}/${replies.length} answered with the refusal; event streams that carried deltas: ${watchedLive}; leaks: ${JSON.stringify(leaked)}`,
    );
    expect(leaked).toEqual({});
    expect(watchedLive).toBe(6);
    expect(Object.entries(answered).filter(([, refused]) => !refused)).toEqual([]);
  });
});

describe("ISSUE33 one ledger per run and per conversation, end to end", () => {
  const words = BASE.split(/\s+/).filter((w) => w !== "");
  const piece = (i: number, n: number) => words.slice(i * n, i * n + n).join(" ");

  // Issue 23's guard let 9 words a round through (61 words over 7 rounds); 9 in a row are refused now on their own,
  // so the rounds here carry 4 hidden words each: fewer than a run, until the next round's text continues it.
  it("ISSUE33 whole run: 4 hidden words per tool round — the second round's text continues the first's and the run is refused; the echo tool ran once", async () => {
    const host = uniqueHost("script");
    const steps: ScriptStep[] = Array.from({ length: 7 }, (_, i) => ({
      content: `Step: ${piece(i, 4)}`,
      tool_calls: [{ id: `c${i}`, name: "test__echo", arguments: JSON.stringify({ text: `round ${i}` }) }],
    }));
    await scriptProvider(host, [...steps, { content: "All done." }]);
    const before = invocations.length;
    const { app, runId, received } = await drive("runs_wait", host, false);
    await finished(app, runId);
    const view = await call(app, "GET", `/v1/runs/${runId}`);
    expect(view.body.output).toBe(disclosureRefusalMessage());
    expect(invocations.length - before).toBe(1);
    expect(releasedSequences(`${received}\n${await afterwards(app, runId)}`, COUNTED)).toEqual([]);
  });

  it("ISSUE33 whole conversation: 3 hidden words per turn between filler — turns that would put pieces back together are refused, the run.completed event marks it, 0 sequences released", {
    timeout: 60_000,
  }, async () => {
    const host = uniqueHost("script");
    const turns = 12;
    await scriptProvider(
      host,
      Array.from({ length: turns }, (_, i) => ({ content: `so anyway the weather today is ${piece(i, 3)}.` })),
    );
    const app = appFor(runConfig(host, { agent: { tools: { allow: [] } } }));
    const room = `room-${label()}`;
    let seen = "";
    const outcomes: string[] = [];
    let marked = 0;
    for (let t = 0; t < turns; t++) {
      const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "u1", room_id: room, agent_id: "main", message: `turn ${t}` });
      await finished(app, sent.body.id);
      const view = await call(app, "GET", `/v1/runs/${sent.body.id}`);
      outcomes.push(view.body.output === disclosureRefusalMessage() ? "refused" : "answered");
      const events = await call(app, "GET", `/v1/runs/${sent.body.id}/events?follow=false`);
      if (events.text.includes('"hidden_text_coverage"')) marked++;
      seen += `\n${view.text}\n${events.text}`;
    }
    console.log(`ISSUE33 conversation spread: ${outcomes.join(" ")}`);
    expect(releasedSequences(seen, COUNTED)).toEqual([]);
    expect(outcomes).toEqual([
      "answered",
      "refused",
      "answered",
      "refused",
      "answered",
      "refused",
      "answered",
      "answered",
      "answered",
      "answered",
      "answered",
      "refused",
    ]);
    expect(marked).toBe(outcomes.filter((o) => o === "refused").length);
  });
});
