/**
 * Issue 33 (D-085): provider-reported usage is no longer trusted as sent. Counts are accepted only as non-negative
 * safe integers whose prompt + completion fit the model's context window (cached tokens at most the prompt's);
 * anything else makes the call unreported — the rollups get no tokens from it and the budgets get the estimates —
 * with the reason in its `llm_done` trace. Providers are scripted at the network boundary (test/support/outbound.ts),
 * `usage_raw` sending each block exactly as written.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { estimateMessagesTokens } from "../../src/context/budget";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { ScriptStep } from "../support/outbound";
import { appFor, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

/** $2.50 / $10 per million, cached input at $1.25: 2.5e6, 1e7 and 1.25e6 pico-USD per token. */
const PRICING = { inputPerMillion: 2.5, outputPerMillion: 10, cachedInputPerMillion: 1.25 };
/** Roomy budgets, so that every call is admitted and the rows show exactly what it was charged. */
const BUDGET = { tokensPerDay: 1_000_000, tokensPerCallerPerDay: 500_000 };
const MODEL = "moonshot:kimi-k1-128k";
const CONTEXT_WINDOW = 131_072;
const uid = () => crypto.randomUUID().slice(0, 8);

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
