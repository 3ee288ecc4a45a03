/**
 * Issue 33 (D-085): usage that escaped, and usage trusted as sent.
 *
 * - A model call cancelled mid-answer is charged, never 0: the provider's usage if it had reported it, else the
 *   prompt estimate plus the tokens of the text streamed so far (a model that does not stream: its whole
 *   reservation) — on the agent's and the caller's token budgets (an API key's settles in the same batch), on the
 *   run, and in the D1 rollups (as an unreported request when the provider reported nothing).
 * - Provider-reported counts are accepted only as non-negative safe integers whose prompt + completion fit the
 *   model's context window (cached tokens at most the prompt's); anything else makes the call unreported — the
 *   rollups get no tokens from it and the budgets get the estimates — with the reason in its `llm_done` trace.
 *
 * Providers are scripted at the network boundary (test/support/outbound.ts). A gated stream lets the test watch the
 * run before any text arrives; a stalled one stays open until the cancel. The test knows every piece has been read
 * when the run has released the text the guard releases only once the last piece is in: no timing is involved.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { estimateMessagesTokens } from "../../src/context/budget";
import { StreamGuard } from "../../src/prompts/stream-guard";
import { runObjectId } from "../../src/runs/ids";
import { openGate, requestsTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { ScriptStep } from "../support/outbound";
import { type App, appFor, call, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

/** $2.50 / $10 per million, cached input at $1.25: 2.5e6, 1e7 and 1.25e6 pico-USD per token. */
const PRICING = { inputPerMillion: 2.5, outputPerMillion: 10, cachedInputPerMillion: 1.25 };
/** Roomy budgets, so that every call is admitted and the rows show exactly what it was charged. */
const BUDGET = { tokensPerDay: 1_000_000, tokensPerCallerPerDay: 500_000 };
const MODEL = "moonshot:kimi-k1-128k";
const CONTEXT_WINDOW = 131_072;
const MAX_OUTPUT = 4096;
const uid = () => crypto.randomUUID().slice(0, 8);
const words = (n: number) => Array.from({ length: n }, (_, i) => `river${String.fromCharCode(97 + (i % 26))}${i}`);
const cut = (text: string, n: number) => text.match(new RegExp(`[\\s\\S]{1,${n}}`, "g")) ?? [];

/**
 * The pieces up to and including the last one whose arrival makes the guard release text, and the text released
 * by then: once a run has released exactly that, it has read every piece.
 */
function releasingPrefix(chunks: string[]): { sent: string[]; released: string } {
  const guard = new StreamGuard((raw) => raw);
  const releases = chunks.map((c) => {
    const step = guard.push(c);
    return step && "release" in step ? step.release : null;
  });
  const last = releases.findLastIndex((r) => r !== null);
  return { sent: chunks.slice(0, last + 1), released: releases.slice(0, last + 1).join("") };
}

const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

/** Watches the run (so its stream is guarded and released as it arrives), opens the gate, waits for `released`. */
async function readEveryPiece(runId: string, host: string, released: string): Promise<void> {
  const stub = stubOf(runId);
  await stub.releasedText(runId, 0, 0);
  await openGate(host);
  await until(async () => (await stub.releasedText(runId, 0, 0)).text === released);
}

/** Cancels a running run and waits for it to end. */
async function cancelRun(app: App, runId: string): Promise<void> {
  const res = await call(app, "POST", `/v1/runs/${runId}/cancel`);
  expect({ status: res.status, body: res.body }).toEqual({ status: 202, body: { id: runId, status: "running" } });
  expect((await waitForRun(app, runId)).status).toBe("cancelled");
}

/** The run's prompt estimate (its `model.requested` event) and its `llm_done` traces. */
function callRecords(detail: any): { promptEstimate: number; llmDone: unknown[] } {
  const requested = detail.events.find((e: { event_type: string }) => e.event_type === "model.requested");
  return {
    promptEstimate: requested.payload.estimated_input_tokens,
    llmDone: detail.trace.filter((t: { kind: string }) => t.kind === "llm_done").map((t: { data: unknown }) => t.data),
  };
}

/** Tokens charged to the agent's and the caller's daily budgets (over every day: the agent is the test's own). */
async function budgetRows(agentId: string): Promise<{ agent: number; caller: number }> {
  const agent = await env.DB.prepare("SELECT SUM(tokens) AS n FROM agent_token_usage WHERE agent_id = ?1")
    .bind(agentId)
    .first<{ n: number }>();
  const caller = await env.DB.prepare("SELECT SUM(tokens) AS n FROM caller_token_usage WHERE agent_id = ?1")
    .bind(agentId)
    .first<{ n: number }>();
  return { agent: agent?.n ?? 0, caller: caller?.n ?? 0 };
}

/** The run's usage columns in its D1 index row, once its SessionDO shipped the row of its ended state. */
async function shippedRun(runId: string, status: string): Promise<Record<string, unknown>> {
  let row: Record<string, unknown> | null = null;
  await until(async () => {
    row = await env.DB.prepare(
      `SELECT status, requests, unreported_requests, uncosted_requests, prompt_tokens, completion_tokens, cached_tokens, cost_pico
       FROM runs WHERE run_id = ?1`,
    )
      .bind(runId)
      .first();
    return row?.status === status;
  }, 15_000);
  return row as unknown as Record<string, unknown>;
}

/** The agent's D1 rollup rows (its runs are the test's own). */
async function rollups(agentId: string): Promise<unknown[]> {
  const rows = await env.DB.prepare(
    `SELECT requests, runs, unreported_requests, uncosted_requests, prompt_tokens, completion_tokens, cached_tokens, cost_pico
     FROM usage_rollups WHERE agent_id = ?1`,
  )
    .bind(agentId)
    .all();
  return rows.results;
}

/** What the stored usage of a run with one unreported call is, everywhere but the budgets. */
const UNREPORTED_RUN_USAGE = {
  model: MODEL,
  requests: 1,
  unreported_requests: 1,
  prompt_tokens: 0,
  completion_tokens: 0,
  cached_tokens: 0,
  total_tokens: 0,
};
const UNREPORTED_ROW = {
  requests: 1,
  unreported_requests: 1,
  uncosted_requests: 1,
  prompt_tokens: 0,
  completion_tokens: 0,
  cached_tokens: 0,
  cost_pico: 0,
};

describe("ISSUE33 usage: a cancelled model call is charged, never 0", () => {
  it("ISSUE33 usage: a cancelled streamed call is charged the prompt estimate plus the tokens of the text streamed so far on the budgets and the run, and is an unreported request in the rollups", async () => {
    const host = uniqueHost("script");
    const { sent, released } = releasingPrefix(cut(`${words(60).join(" ")}.`, 6));
    expect(sent.length).toBeGreaterThan(40);
    await scriptProvider(host, [{ chunks: sent, gate: true, stall: true }]);
    const agentId = `cancel-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { supportsStreaming: true, pricing: PRICING }, agent: { budget: BUDGET } }));
    const id = await startRun(app, "tell me about rivers", agentId);
    await readEveryPiece(id, host, released);
    await cancelRun(app, id);

    const detail = await runDetail(app, id);
    const { promptEstimate, llmDone } = callRecords(detail);
    // The text streamed before the cancel, estimated as the answer of a call with no reported usage is.
    const streamed = estimateMessagesTokens([{ content: sent.join("") }]);
    // The pieces up to the guard's last release (D-090: a benign answer is released as each word completes).
    expect(streamed).toBe(133);
    expect(await budgetRows(agentId)).toEqual({ agent: promptEstimate + streamed, caller: promptEstimate + streamed });
    expect(llmDone).toEqual([
      {
        round: 1,
        ok: false,
        reason: "cancelled",
        usage: { prompt_tokens: promptEstimate, completion_tokens: streamed, reported: false, cost_pico: null },
      },
    ]);
    expect(detail.usage).toEqual(UNREPORTED_RUN_USAGE);
    expect(detail.cost).toBeNull();
    expect(await shippedRun(id, "cancelled")).toEqual({ status: "cancelled", ...UNREPORTED_ROW });
    expect(await rollups(agentId)).toEqual([{ ...UNREPORTED_ROW, runs: 1 }]);
  });

  it("ISSUE33 usage: a cancelled streamed call whose provider had already reported its usage is charged exactly that usage: tokens, cached tokens and cost", async () => {
    const host = uniqueHost("script");
    const { sent, released } = releasingPrefix(cut(`${words(40).join(" ")}.`, 6));
    const usage = { prompt_tokens: 1200, completion_tokens: 300, total_tokens: 1500, prompt_tokens_details: { cached_tokens: 200 } };
    // The usage chunk comes before the last piece (as from providers that report usage as they stream).
    await scriptProvider(host, [{ chunks: sent, gate: true, stall: true, usage, usage_after_chunks: sent.length - 1 }]);
    const agentId = `cancel-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { supportsStreaming: true, pricing: PRICING }, agent: { budget: BUDGET } }));
    const id = await startRun(app, "tell me about rivers", agentId);
    await readEveryPiece(id, host, released);
    await cancelRun(app, id);

    const detail = await runDetail(app, id);
    // 1000 × 2.5e6 + 200 × 1.25e6 + 300 × 1e7 = 5.75e9 pico-USD.
    expect(callRecords(detail).llmDone).toEqual([
      {
        round: 1,
        ok: false,
        reason: "cancelled",
        usage: { prompt_tokens: 1200, completion_tokens: 300, reported: true, cached_tokens: 200, cost_pico: 5_750_000_000 },
      },
    ]);
    expect(await budgetRows(agentId)).toEqual({ agent: 1500, caller: 1500 });
    expect(detail.usage).toEqual({
      model: MODEL,
      requests: 1,
      unreported_requests: 0,
      prompt_tokens: 1200,
      completion_tokens: 300,
      cached_tokens: 200,
      total_tokens: 1500,
    });
    expect(detail.cost).toEqual({ usd: "0.00575" });
    const row = {
      requests: 1,
      unreported_requests: 0,
      uncosted_requests: 0,
      prompt_tokens: 1200,
      completion_tokens: 300,
      cached_tokens: 200,
      cost_pico: 5_750_000_000,
    };
    expect(await shippedRun(id, "cancelled")).toEqual({ status: "cancelled", ...row });
    expect(await rollups(agentId)).toEqual([{ ...row, runs: 1 }]);
  });

  it("ISSUE33 usage: a streamed call cancelled before its first word is charged the prompt estimate plus an empty answer's 4 tokens", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ chunks: ["never", " sent"], gate: true, stall: true }]);
    const agentId = `cancel-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { supportsStreaming: true, pricing: PRICING }, agent: { budget: BUDGET } }));
    const id = await startRun(app, "tell me about rivers", agentId);
    await until(async () => (await requestsTo(host)).length === 1);
    await cancelRun(app, id);

    const detail = await runDetail(app, id);
    const { promptEstimate, llmDone } = callRecords(detail);
    expect(estimateMessagesTokens([{ content: "" }])).toBe(4);
    expect(await budgetRows(agentId)).toEqual({ agent: promptEstimate + 4, caller: promptEstimate + 4 });
    expect(llmDone).toEqual([
      expect.objectContaining({ usage: { prompt_tokens: promptEstimate, completion_tokens: 4, reported: false, cost_pico: null } }),
    ]);
    expect(detail.usage).toEqual(UNREPORTED_RUN_USAGE);
    expect(await shippedRun(id, "cancelled")).toEqual({ status: "cancelled", ...UNREPORTED_ROW });
    expect(await rollups(agentId)).toEqual([{ ...UNREPORTED_ROW, runs: 1 }]);
  });

  it("ISSUE33 usage: a cancelled call that streams nothing (a model without streaming) is charged its whole reservation: the prompt estimate plus maxOutputTokens", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "an answer never read", gate: true }]);
    const agentId = `cancel-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { pricing: PRICING }, agent: { budget: BUDGET } }));
    const id = await startRun(app, "tell me about rivers", agentId);
    // The provider holds the request: the call is in flight when the cancel comes.
    await until(async () => (await requestsTo(host)).length === 1);
    await cancelRun(app, id);
    await openGate(host); // the mock answers now; nobody reads it

    const detail = await runDetail(app, id);
    const { promptEstimate, llmDone } = callRecords(detail);
    expect(llmDone).toEqual([
      {
        round: 1,
        ok: false,
        reason: "cancelled",
        usage: { prompt_tokens: promptEstimate, completion_tokens: MAX_OUTPUT, reported: false, cost_pico: null },
      },
    ]);
    expect(await budgetRows(agentId)).toEqual({ agent: promptEstimate + MAX_OUTPUT, caller: promptEstimate + MAX_OUTPUT });
    expect(detail.usage).toEqual(UNREPORTED_RUN_USAGE);
    expect(detail.cost).toBeNull();
    expect(await shippedRun(id, "cancelled")).toEqual({ status: "cancelled", ...UNREPORTED_ROW });
    expect(await rollups(agentId)).toEqual([{ ...UNREPORTED_ROW, runs: 1 }]);
  });
});

/** A provider usage block that is refused, and the reason its `llm_done` trace gives. */
interface BadUsage {
  name: string;
  raw: string | null;
  refused: string | null;
}

const NOT_SAFE = (field: string) => `${field} is not a non-negative safe integer`;
const BAD_USAGE: BadUsage[] = [
  {
    name: "a negative prompt_tokens (the −948,050 of the report)",
    raw: '{"prompt_tokens":-948050,"completion_tokens":5,"total_tokens":-948045}',
    refused: NOT_SAFE("prompt_tokens"),
  },
  {
    name: "a negative completion_tokens",
    raw: '{"prompt_tokens":10,"completion_tokens":-5,"total_tokens":5}',
    refused: NOT_SAFE("completion_tokens"),
  },
  {
    name: "a fractional prompt_tokens",
    raw: '{"prompt_tokens":10.5,"completion_tokens":5,"total_tokens":15.5}',
    refused: NOT_SAFE("prompt_tokens"),
  },
  {
    name: "a fractional completion_tokens",
    raw: '{"prompt_tokens":10,"completion_tokens":0.25,"total_tokens":10.25}',
    refused: NOT_SAFE("completion_tokens"),
  },
  {
    name: "1e300 prompt_tokens",
    raw: '{"prompt_tokens":1e300,"completion_tokens":5,"total_tokens":1e300}',
    refused: NOT_SAFE("prompt_tokens"),
  },
  {
    name: "2^53+1 completion_tokens",
    raw: '{"prompt_tokens":10,"completion_tokens":9007199254740993,"total_tokens":9007199254741003}',
    refused: NOT_SAFE("completion_tokens"),
  },
  { name: 'the string "NaN"', raw: '{"prompt_tokens":"NaN","completion_tokens":5,"total_tokens":15}', refused: NOT_SAFE("prompt_tokens") },
  {
    name: "numeric strings",
    raw: '{"prompt_tokens":"10","completion_tokens":"5","total_tokens":"15"}',
    refused: NOT_SAFE("prompt_tokens"),
  },
  { name: "an empty string", raw: '{"prompt_tokens":10,"completion_tokens":"","total_tokens":10}', refused: NOT_SAFE("completion_tokens") },
  { name: "null prompt_tokens", raw: '{"prompt_tokens":null,"completion_tokens":5,"total_tokens":15}', refused: NOT_SAFE("prompt_tokens") },
  { name: "a missing prompt_tokens", raw: '{"completion_tokens":5,"total_tokens":15}', refused: NOT_SAFE("prompt_tokens") },
  { name: "a missing completion_tokens", raw: '{"prompt_tokens":10,"total_tokens":15}', refused: NOT_SAFE("completion_tokens") },
  { name: "an empty usage object", raw: "{}", refused: NOT_SAFE("prompt_tokens") },
  { name: "a usage that is not an object", raw: '"lots"', refused: NOT_SAFE("prompt_tokens") },
  {
    name: "prompt + completion one past the context window",
    raw: '{"prompt_tokens":131001,"completion_tokens":72,"total_tokens":131073}',
    refused: `prompt_tokens + completion_tokens exceed the model's context window (${CONTEXT_WINDOW})`,
  },
  {
    name: "a completion alone past the context window",
    raw: '{"prompt_tokens":0,"completion_tokens":131073,"total_tokens":131073}',
    refused: `prompt_tokens + completion_tokens exceed the model's context window (${CONTEXT_WINDOW})`,
  },
  {
    name: "negative cached tokens",
    raw: '{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":-3}}',
    refused: NOT_SAFE("prompt_tokens_details.cached_tokens"),
  },
  {
    name: "more cached tokens than prompt tokens",
    raw: '{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":11}}',
    refused: "prompt_tokens_details.cached_tokens exceed prompt_tokens",
  },
  { name: "no usage block at all (as before)", raw: null, refused: null },
];

/** One run answering "fine" with the scripted usage block; its stored usage everywhere. */
async function runWithUsage(step: Omit<ScriptStep, "content">, stream: boolean) {
  const host = uniqueHost("script");
  await scriptProvider(host, [{ content: "fine", ...step }]);
  const agentId = `bad-${uid()}`;
  const app = appFor(runConfig(host, { agentId, model: { supportsStreaming: stream, pricing: PRICING }, agent: { budget: BUDGET } }));
  const id = await startRun(app, "how are you?", agentId);
  expect((await waitForRun(app, id)).status).toBe("completed");
  const detail = await runDetail(app, id);
  return {
    ...callRecords(detail),
    detail,
    budgets: await budgetRows(agentId),
    shipped: await shippedRun(id, "completed"),
    rollups: await rollups(agentId),
  };
}

describe("ISSUE33 usage: provider-reported counts are accepted only as non-negative safe integers within the model's context window", () => {
  for (const stream of [false, true])
    for (const bad of BAD_USAGE)
      it(`ISSUE33 usage: ${bad.name} (${stream ? "streamed" : "JSON"}) makes the call unreported: no tokens or cost in the run or the rollups, the estimates on the budgets`, async () => {
        const r = await runWithUsage(bad.raw === null ? { usage: null } : { usage_raw: bad.raw }, stream);
        const answer = estimateMessagesTokens([{ content: "fine" }]);
        expect(answer).toBe(6);
        expect(r.llmDone).toEqual([
          {
            round: 1,
            ok: true,
            finish_reason: "stop",
            attempts: 1,
            latency_ms: expect.any(Number),
            usage: {
              prompt_tokens: r.promptEstimate,
              completion_tokens: answer,
              reported: false,
              ...(bad.refused === null ? {} : { refused: bad.refused }),
              cost_pico: null,
            },
            tool_calls: 0,
          },
        ]);
        expect(r.budgets).toEqual({ agent: r.promptEstimate + answer, caller: r.promptEstimate + answer });
        expect(r.detail.usage).toEqual(UNREPORTED_RUN_USAGE);
        expect(r.detail.cost).toBeNull();
        expect(r.shipped).toEqual({ status: "completed", ...UNREPORTED_ROW });
        expect(r.rollups).toEqual([{ ...UNREPORTED_ROW, runs: 1 }]);
      });

  it("ISSUE33 usage: counts exactly at the context window are accepted, priced and charged (prompt + completion = 131,072)", async () => {
    const r = await runWithUsage({ usage_raw: '{"prompt_tokens":131000,"completion_tokens":72,"total_tokens":131072}' }, false);
    // 131000 × 2.5e6 + 72 × 1e7 = 328.22e9 pico-USD.
    expect(r.detail.usage).toEqual({
      model: MODEL,
      requests: 1,
      unreported_requests: 0,
      prompt_tokens: 131_000,
      completion_tokens: 72,
      cached_tokens: 0,
      total_tokens: 131_072,
    });
    expect(r.detail.cost).toEqual({ usd: "0.32822" });
    expect(r.budgets).toEqual({ agent: 131_072, caller: 131_072 });
    const row = {
      requests: 1,
      unreported_requests: 0,
      uncosted_requests: 0,
      prompt_tokens: 131_000,
      completion_tokens: 72,
      cached_tokens: 0,
      cost_pico: 328_220_000_000,
    };
    expect(r.shipped).toEqual({ status: "completed", ...row });
    expect(r.rollups).toEqual([{ ...row, runs: 1 }]);
  });

  it("ISSUE33 usage: the provider's total_tokens is never read — a 1e300 or negative total with sound prompt and completion counts charges prompt + completion", async () => {
    for (const total of ["1e300", "-7", '"many"']) {
      const r = await runWithUsage({ usage_raw: `{"prompt_tokens":40,"completion_tokens":2,"total_tokens":${total}}` }, false);
      expect(r.budgets).toEqual({ agent: 42, caller: 42 });
      expect(r.detail.usage).toMatchObject({
        requests: 1,
        unreported_requests: 0,
        prompt_tokens: 40,
        completion_tokens: 2,
        total_tokens: 42,
      });
      expect(r.rollups).toEqual([
        {
          requests: 1,
          runs: 1,
          unreported_requests: 0,
          uncosted_requests: 0,
          prompt_tokens: 40,
          completion_tokens: 2,
          cached_tokens: 0,
          cost_pico: 120_000_000,
        },
      ]);
    }
  });
});
