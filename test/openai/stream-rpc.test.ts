/**
 * Issue 23 "one RPC per streamed turn" (D-060): a guarded stream on /v1/chat/completions reads the released text
 * from ONE Worker→SessionDO RPC that answers a ReadableStream of frames (src/runs/release-stream.ts), instead of
 * long-polling `releasedText` about once per 8 words. The RPCs are counted on SessionDO's prototype
 * (test/support/counters.ts `countCalls`); the pieces are exactly the incremental guard's releases, then the held
 * words; a client that goes away leaves the run to complete, with nothing logged as a failure; an eviction
 * mid-stream ends the stream as before.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { StreamGuard } from "../../src/prompts/stream-guard";
import { runObjectId } from "../../src/runs/ids";
import { SessionDO } from "../../src/sessions/SessionDO";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type CallCounter, countCalls } from "../support/counters";
import { ADMIN, ALICE, type App, call, registerTestTools, runDetail, until, waitForRun } from "../support/runs";

const words = (n: number, stem = "river") => Array.from({ length: n }, (_, i) => `${stem}${String.fromCharCode(97 + (i % 26))}${i}`);
const cut = (text: string, n: number) => text.match(new RegExp(`[\\s\\S]{1,${n}}`, "g")) ?? [];

/** An app on a streaming model at `host`, whose log lines (every level) are kept in `lines`. */
function loggedApp(host: string, lines: string[]): App {
  const config = runConfig(host, { model: { supportsStreaming: true } });
  return createApp({ config, logger: createLogger("debug", (line) => lines.push(line)) });
}

/** POSTs a chat completion (streamed or not) for conversation `user`. */
const complete = (app: App, stream: boolean, user = `u-${crypto.randomUUID().slice(0, 8)}`) =>
  app.request(
    "https://gateway.test/v1/chat/completions",
    {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
      body: JSON.stringify({ model: "agent:main", user, stream, messages: [{ role: "user", content: "tell me about rivers" }] }),
    },
    env,
  );

/** Reads SSE `data:` payloads from a response body; `stopAfter` returns true to stop (and cancel the body) early. */
async function sseData(res: Response, stopAfter: (data: string) => boolean = () => false): Promise<string[]> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const out: string[] = [];
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    buffer += decoder.decode(value, { stream: true });
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1];
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf("\n\n");
      if (data === undefined) continue;
      out.push(data);
      if (stopAfter(data)) {
        await reader.cancel();
        return out;
      }
    }
  }
}

/** A data payload as JSON, or null (`[DONE]`, Hono's own `event: error` message). */
const parsed = (data: string): any => {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
};
const contentOf = (data: string): string | undefined => parsed(data)?.choices?.[0]?.delta?.content || undefined;

/** What the incremental guard releases for these chunks of a benign answer, then the held words (streamTail). */
function guardPieces(answer: string, chunks: string[]): string[] {
  const guard = new StreamGuard((raw) => raw);
  const released: string[] = [];
  for (const chunk of chunks) {
    const step = guard.push(chunk);
    if (step && "release" in step) released.push(step.release);
  }
  return [...released, answer.slice(released.join("").length)];
}

const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

beforeAll(() => registerTestTools());

let counter: CallCounter | null = null;
afterEach(() => {
  counter?.stop();
  counter = null;
});

describe("ISSUE23 one RPC per streamed turn", () => {
  it("ISSUE23 a streamed turn makes exactly one RPC to the SessionDO besides the enqueue a non-streamed turn makes; its pieces are the guard's releases, then the held words", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    const chunks = cut(answer, 6);
    const lines: string[] = [];
    const app = loggedApp(host, lines);

    await scriptProvider(host, [{ content: answer, chunks, chunk_delay_ms: 8 }]);
    counter = countCalls(SessionDO);
    const plain = await complete(app, false);
    expect(((await plain.json()) as any).choices[0].message.content).toBe(answer);
    const plainCalls = { ...counter.calls };
    counter.stop();
    expect(plainCalls).toEqual({ enqueueAndAwait: 1 });

    await scriptProvider(host, [{ content: answer, chunks, chunk_delay_ms: 8 }]);
    counter = countCalls(SessionDO);
    const streamed = await complete(app, true);
    const data = await sseData(streamed);
    const streamedCalls = { ...counter.calls };
    counter.stop();
    expect(streamedCalls).toEqual({ enqueueAndAwait: 1, releaseStream: 1 });

    const pieces = data.map(contentOf).filter((c): c is string => c !== undefined);
    expect(pieces).toEqual(guardPieces(answer, chunks));
    expect(pieces.length).toBeGreaterThanOrEqual(5);
    expect(data.at(-1)).toBe("[DONE]");
    expect(JSON.parse(data.at(-2) as string).choices[0].finish_reason).toBe("stop");
    const runId = streamed.headers.get("X-Run-Id") as string;
    expect((await waitForRun(app, runId)).output).toBe(answer);
    expect(lines.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
  });

  it("ISSUE23 GET /v1/runs/{id}/events?deltas=true reads the released text from one releaseStream RPC, no releasedText poll; the run.delta texts are the guard's releases, then the held words", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    const chunks = cut(answer, 6);
    await scriptProvider(host, [{ content: answer, chunks, chunk_delay_ms: 8 }]);
    const lines: string[] = [];
    const app = loggedApp(host, lines);
    counter = countCalls(SessionDO);
    const queued = await app.request(
      "https://gateway.test/v1/runs",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json" },
        body: JSON.stringify({ agent_id: "main", message: "rivers" }),
      },
      env,
    );
    const id = ((await queued.json()) as { id: string }).id;
    const res = await app.request(
      `https://gateway.test/v1/runs/${id}/events?deltas=true`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      env,
    );
    const data = (await sseData(res)).map((d) => JSON.parse(d));
    expect(counter.calls.releaseStream).toBe(1);
    expect(counter.calls.releasedText).toBeUndefined();
    const deltas = data.filter((d) => d.text !== undefined);
    expect(deltas.map((d) => d.text)).toEqual(guardPieces(answer, chunks));
    expect(deltas.map((d) => d.offset)).toEqual(deltas.map((_, i) => deltas.slice(0, i).reduce((n, d) => n + d.text.length, 0)));
    expect(data.at(-1)).toMatchObject({ event_type: "run.completed" });
    expect(lines.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
  });

  it("ISSUE23 deltas=true across an approval pause: the release stream ends at the pause and is opened again; the resumed answer streams live, in the guard's pieces", async () => {
    const host = uniqueHost("script");
    const answer = `${words(60).join(" ")}.`;
    const chunks = cut(answer, 6);
    await scriptProvider(host, [
      { tool_calls: [{ id: "p1", name: "test__send", arguments: '{"to":"ops","text":"hi"}' }] },
      { content: answer, chunks, chunk_delay_ms: 8 },
    ]);
    const lines: string[] = [];
    const app = loggedApp(host, lines);
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "tell ops, then rivers" });
    const id = queued.body.id as string;
    const requested = async () =>
      (await runDetail(app, id)).events.find((e: { event_type: string }) => e.event_type === "approval.requested");
    await until(async () => (await requested()) !== undefined);
    counter = countCalls(SessionDO);
    const res = await app.request(
      `https://gateway.test/v1/runs/${id}/events?deltas=true`,
      { headers: { Authorization: `Bearer ${ALICE}` } },
      env,
    );
    const reading = sseData(res);
    await until(async () => (counter?.calls.runEvents ?? 0) >= 2);
    const approvalId = (await requested()).payload.approval_id as string;
    expect((await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN)).status).toBe(200);
    const data = (await reading).map((d) => JSON.parse(d));
    const deltas = data.filter((d) => d.text !== undefined);
    expect(deltas.map((d) => d.text)).toEqual(guardPieces(answer, chunks));
    expect(counter.calls.releaseStream).toBeGreaterThanOrEqual(2);
    expect(counter.calls.releasedText).toBeUndefined();
    // Every piece after the decision (none while paused), the last right before run.completed; events as always.
    const kinds: string[] = data.map((d) => d.event_type ?? "run.delta");
    const decided = kinds.indexOf("approval.decided");
    expect(kinds.slice(0, decided).filter((k) => k === "run.delta")).toEqual([]);
    expect(kinds.slice(decided).filter((k) => k !== "run.delta")).toEqual([
      "approval.decided",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    expect(kinds.slice(-2)).toEqual(["run.delta", "run.completed"]);
    expect((await waitForRun(app, id)).output).toBe(answer);
  });

  it("ISSUE23 a client that goes away mid-stream: the run goes on and completes with the whole answer; the stream is cancelled, nothing logged as an error", async () => {
    const host = uniqueHost("script");
    const answer = `${words(80).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }]);
    const lines: string[] = [];
    const app = loggedApp(host, lines);
    counter = countCalls(SessionDO);
    const res = await complete(app, true);
    const runId = res.headers.get("X-Run-Id") as string;
    const data = await sseData(res, (d) => contentOf(d) !== undefined);
    expect(answer.startsWith(contentOf(data.at(-1) as string) as string)).toBe(true);
    const view = await waitForRun(app, runId);
    expect(view.status).toBe("completed");
    expect(view.output).toBe(answer);
    expect(counter.calls.releaseStream).toBe(1);
    expect(lines.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
  });

  it("ISSUE23 the object evicted (gracefully) mid-stream: eviction waits for the run and the stream, which ends as usual with every piece and [DONE]", async () => {
    const host = uniqueHost("script");
    const answer = `${words(80).join(" ")}.`;
    const chunks = cut(answer, 6);
    await scriptProvider(host, [{ content: answer, chunks, chunk_delay_ms: 8 }]);
    const lines: string[] = [];
    const app = loggedApp(host, lines);
    const res = await complete(app, true);
    const runId = res.headers.get("X-Run-Id") as string;
    let evicting: Promise<void> | null = null;
    const data = await sseData(res, (d) => {
      if (!evicting && contentOf(d) !== undefined) evicting = evictDurableObject(stubOf(runId));
      return false;
    });
    await evicting;
    expect(evicting).not.toBeNull();
    expect(data.map(contentOf).filter((c) => c !== undefined)).toEqual(guardPieces(answer, chunks));
    expect(data.at(-1)).toBe("[DONE]");
    expect((await waitForRun(app, runId)).output).toBe(answer);
    expect(lines.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
  });

  it("ISSUE23 the object crashing mid-stream: the stream ends with an OpenAI error object (internal.error), no [DONE]; the watchdog resumes the run, which completes", async () => {
    const host = uniqueHost("script");
    const answer = `${words(80).join(" ")}.`;
    await scriptProvider(host, [{ content: answer, chunks: cut(answer, 6), chunk_delay_ms: 8 }, { content: "after the crash" }]);
    const lines: string[] = [];
    const app = loggedApp(host, lines);
    const res = await complete(app, true);
    const runId = res.headers.get("X-Run-Id") as string;
    let crashing: Promise<unknown> | null = null;
    const data = await sseData(res, (d) => {
      if (!crashing && contentOf(d) !== undefined)
        crashing = runInDurableObject(stubOf(runId), (_i, state: DurableObjectState) => state.abort("simulated crash")).catch(() => {});
      return false;
    });
    await crashing;
    // As before D-060: the route's error handler writes OpenAI's error object (then Hono its own `event: error`).
    const errors = data.map(parsed).filter((d) => d?.error);
    expect(errors).toEqual([{ error: { message: "internal error", type: "server_error", code: "internal.error" } }]);
    expect(data).not.toContain("[DONE]");
    expect(
      lines
        .map((l) => JSON.parse(l))
        .filter((l) => l.level === "error")
        .map((l) => [l.event, l.code]),
    ).toEqual([["http.error", "internal.error"]]);
    await runDurableObjectAlarm(stubOf(runId));
    const view = await waitForRun(app, runId, ALICE, 30_000);
    expect(view).toMatchObject({ status: "completed", output: "after the crash" });
  });
});
