/**
 * Issue 25 §2 "Usage and cost" (D-078): provider-reported tokens recorded per model call and added up per run, cost
 * from the configured pricing (exact, pico-USD), the admin run view's `usage` and `cost`, the OpenAI `usage` block,
 * the D1 rollups shipped with the run-stop batch and GET /api/admin/usage over them, and budget alerts (once per
 * period under concurrency). Providers are scripted at the network boundary (test/support/outbound.ts).
 */
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { type RunUsageColumns, runIndexStatement } from "../../src/runs/index-d1";
import type { RunSpec } from "../../src/runs/spec";
import { runUsageColumns } from "../../src/usage/ship";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, BOB, call, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

/** $2.50 / $10 per million, cached input at $1.25: 2.5e6, 1e7 and 1.25e6 pico-USD per token. */
const PRICING = { inputPerMillion: 2.5, outputPerMillion: 10, cachedInputPerMillion: 1.25 };
const uid = () => crypto.randomUUID().slice(0, 8);

/** The run's index row in D1 with its usage, once its SessionDO shipped it. */
async function shippedUsage(runId: string, requests = 1): Promise<Record<string, unknown>> {
  let row: Record<string, unknown> | null = null;
  await until(async () => {
    row = await env.DB.prepare("SELECT * FROM runs WHERE run_id = ?1").bind(runId).first();
    return row !== null && (row.requests as number) >= requests;
  }, 15_000);
  return row as unknown as Record<string, unknown>;
}

const usage = (app: ReturnType<typeof appFor>, query: string) => call(app, "GET", `/api/admin/usage?${query}`, undefined, ADMIN);

describe("ISSUE25-2 tokens and cost per run", () => {
  it("ISSUE25-2 records each call's reported tokens (cached included) and prices the run exactly in the admin run view", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      {
        tool_calls: [{ id: "call_a", name: "test__echo", arguments: '{"text":"hi"}' }],
        usage: { prompt_tokens: 1000, completion_tokens: 200, total_tokens: 1200, prompt_tokens_details: { cached_tokens: 400 } },
      },
      { content: "done", usage: { prompt_tokens: 1500, completion_tokens: 300, total_tokens: 1800 } },
    ]);
    const agentId = `use-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { pricing: PRICING } }));
    const id = await startRun(app, "echo hi", agentId);
    expect((await waitForRun(app, id)).status).toBe("completed");
    const detail = await runDetail(app, id);
    expect(detail.usage).toEqual({
      model: "moonshot:kimi-k1-128k",
      requests: 2,
      unreported_requests: 0,
      prompt_tokens: 2500,
      completion_tokens: 500,
      cached_tokens: 400,
      total_tokens: 3000,
    });
    // 600 × 2.5e6 + 400 × 1.25e6 + 200 × 1e7 = 4e9; 1500 × 2.5e6 + 300 × 1e7 = 6.75e9 pico-USD → 0.01075 USD.
    expect(detail.cost).toEqual({ usd: "0.01075" });
    const llmDone = detail.trace
      .filter((t: { kind: string }) => t.kind === "llm_done")
      .map((t: { data: { usage: unknown } }) => t.data.usage);
    expect(llmDone).toEqual([
      { prompt_tokens: 1000, completion_tokens: 200, reported: true, cached_tokens: 400, cost_pico: 4_000_000_000 },
      { prompt_tokens: 1500, completion_tokens: 300, reported: true, cached_tokens: 0, cost_pico: 6_750_000_000 },
    ]);
    const row = await shippedUsage(id, 2);
    expect(row).toMatchObject({
      agent_id: agentId,
      caller: "api:alice",
      job_id: "",
      model: "moonshot:kimi-k1-128k",
      requests: 2,
      unreported_requests: 0,
      uncosted_requests: 0,
      prompt_tokens: 2500,
      completion_tokens: 500,
      cached_tokens: 400,
      cost_pico: 10_750_000_000,
    });
  });

  it("ISSUE25-2 an unpriced model's cost is null, not 0; a provider that reports no usage is recorded as such, with no tokens invented", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { content: "no usage", usage: null },
      { content: "some usage", usage: { prompt_tokens: 70, completion_tokens: 7, total_tokens: 77 } },
    ]);
    const agentId = `use-${uid()}`;
    const unpriced = appFor(runConfig(host, { agentId }));
    const silent = await startRun(unpriced, "first", agentId);
    await waitForRun(unpriced, silent);
    const a = await runDetail(unpriced, silent);
    expect(a.usage).toEqual({
      model: "moonshot:kimi-k1-128k",
      requests: 1,
      unreported_requests: 1,
      prompt_tokens: 0,
      completion_tokens: 0,
      cached_tokens: 0,
      total_tokens: 0,
    });
    expect(a.cost).toBeNull();
    const reported = await startRun(unpriced, "second", agentId);
    await waitForRun(unpriced, reported);
    const b = await runDetail(unpriced, reported);
    expect(b.usage.total_tokens).toBe(77);
    expect(b.cost).toBeNull();
    expect(await shippedUsage(silent)).toMatchObject({
      requests: 1,
      unreported_requests: 1,
      uncosted_requests: 1,
      prompt_tokens: 0,
      cost_pico: 0,
    });
    expect(await shippedUsage(reported)).toMatchObject({ requests: 1, unreported_requests: 0, uncosted_requests: 1, prompt_tokens: 70 });
  });

  it("ISSUE25-2 a priced model whose provider reported no usage has no cost either (the call's cost is unknown)", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "silent", usage: null }]);
    const agentId = `use-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { pricing: PRICING } }));
    const id = await startRun(app, "hi", agentId);
    await waitForRun(app, id);
    const d = await runDetail(app, id);
    expect(d.usage.unreported_requests).toBe(1);
    expect(d.cost).toBeNull();
  });

  it("ISSUE25-2 the OpenAI usage block keeps its standard counts exact and adds cached tokens and cost_usd", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      {
        content: "cached answer",
        usage: { prompt_tokens: 1000, completion_tokens: 200, total_tokens: 1200, prompt_tokens_details: { cached_tokens: 400 } },
      },
      { content: "plain answer", usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } },
    ]);
    const agentId = `use-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { pricing: PRICING } }));
    const res = await call(app, "POST", "/v1/chat/completions", { model: `agent:${agentId}`, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(200);
    expect(res.body.usage).toEqual({
      prompt_tokens: 1000,
      completion_tokens: 200,
      total_tokens: 1200,
      prompt_tokens_details: { cached_tokens: 400 },
      cost_usd: "0.004",
    });
    const unpricedHost = uniqueHost("script");
    await scriptProvider(unpricedHost, [{ content: "plain", usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } }]);
    const plain = appFor(runConfig(unpricedHost, { agentId }));
    const res2 = await call(plain, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      messages: [{ role: "user", content: "hi" }],
    });
    // No pricing, no cache hit: exactly the standard block, as before.
    expect(res2.body.usage).toEqual({ prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 });
  });
});

describe("ISSUE25-2 streamed usage and job keys", () => {
  it("ISSUE25-2 a streamed completion's usage chunk (include_usage) carries the same exact counts, cached tokens and cost", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      {
        content: "streamed",
        usage: { prompt_tokens: 2000, completion_tokens: 100, total_tokens: 2100, prompt_tokens_details: { cached_tokens: 1000 } },
      },
    ]);
    const agentId = `use-${uid()}`;
    const app = appFor(runConfig(host, { agentId, model: { pricing: PRICING, supportsStreaming: true } }));
    const client = new OpenAI({
      apiKey: ALICE,
      baseURL: "https://gateway.test/v1",
      maxRetries: 0,
      fetch: async (input: string | URL | Request, init?: RequestInit) =>
        app.request(input instanceof Request ? input : String(input), init, env),
    });
    const stream = await client.chat.completions.create({
      model: `agent:${agentId}`,
      messages: [{ role: "user", content: "stream" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    // 1000 × 2.5e6 + 1000 × 1.25e6 + 100 × 1e7 = 4.75e9 pico-USD.
    expect(chunks.at(-1)?.usage).toEqual({
      prompt_tokens: 2000,
      completion_tokens: 100,
      total_tokens: 2100,
      prompt_tokens_details: { cached_tokens: 1000 },
      cost_usd: "0.00475",
    });
  });

  it("ISSUE25-2 a job run's usage is keyed by its job and its caller job:<id>; other runs by their caller and no job", () => {
    const spec = (caller?: string) => ({ model: { ref: "p:m" }, ...(caller ? { caller } : {}) }) as unknown as RunSpec;
    const source = {
      agent_id: "main",
      created_at: "2026-11-26T10:00:00.000Z",
      spec: null,
      model_calls: 2,
      unreported_calls: 0,
      uncosted_calls: 0,
      reported_prompt_tokens: 10,
      reported_completion_tokens: 5,
      cached_tokens: 0,
      cost_pico: 7,
    };
    expect(runUsageColumns({ ...source, caller_id: null, source: "job" }, spec("job:nightly"))).toMatchObject({
      caller: "job:nightly",
      job_id: "nightly",
      model: "p:m",
      requests: 2,
    });
    expect(runUsageColumns({ ...source, caller_id: "alice", source: "http" }, spec())).toMatchObject({ caller: "api:alice", job_id: "" });
    expect(runUsageColumns({ ...source, caller_id: null, source: "telegram" }, spec("telegram:bot:42"))).toMatchObject({
      caller: "telegram:bot:42",
      job_id: "",
    });
    expect(runUsageColumns({ ...source, caller_id: null, source: "http" }, spec())).toMatchObject({ caller: "agent:main", job_id: "" });
  });
});

/** A run's index row with its usage, as a SessionDO ships it (at `updatedAt`, default the run's creation). */
function shipped(o: { run: string; day: string; agent: string; updatedAt?: string }, u: RunUsageColumns) {
  const created = `${o.day}T12:00:00.000Z`;
  return runIndexStatement(
    env.DB,
    {
      run_id: o.run,
      agent_id: o.agent,
      session_key: `agent:${o.agent}:http:x:run:${o.run}`,
      session_id: "s",
      caller_id: null,
      source: "http",
      status: "completed",
      created_at: created,
      updated_at: o.updatedAt ?? created,
    },
    u,
  );
}

/** A one-call run's index row. */
function seeded(o: {
  run: string;
  day: string;
  agent: string;
  caller: string;
  model?: string;
  job?: string;
  p: number;
  c: number;
  cost: number;
}) {
  return shipped(o, {
    caller: o.caller,
    job_id: o.job ?? "",
    model: o.model ?? "moonshot:kimi-k1-128k",
    requests: 1,
    unreported_requests: 0,
    uncosted_requests: 0,
    prompt_tokens: o.p,
    completion_tokens: o.c,
    cached_tokens: 0,
    cost_pico: o.cost,
  });
}

describe("ISSUE25-2 GET /api/admin/usage", () => {
  it("ISSUE25-2 totals per caller, agent, model, job and day are exact across runs, agents, callers and days", async () => {
    // A month of its own (the test's D1 is shared with the file's other tests): days 01, 02 and 03.
    const year = 2001 + Math.floor(Math.random() * 900);
    const m = `${year}-03`;
    const a = `ua-${uid()}`;
    const b = `ub-${uid()}`;
    await env.DB.batch([
      seeded({ run: `r1-${a}`, day: `${m}-01`, agent: a, caller: "api:alice", p: 100, c: 10, cost: 1_000_000_000 }),
      seeded({ run: `r2-${a}`, day: `${m}-01`, agent: a, caller: "api:bob", p: 200, c: 20, cost: 2_000_000_000 }),
      seeded({ run: `r3-${a}`, day: `${m}-02`, agent: b, caller: "api:alice", model: "other:m2", p: 300, c: 30, cost: 500_000 }),
      seeded({ run: `r4-${a}`, day: `${m}-02`, agent: b, caller: "job:nightly", job: "nightly", p: 400, c: 40, cost: 3 }),
      seeded({ run: `r5-${a}`, day: `${m}-03`, agent: a, caller: "api:alice", p: 500, c: 50, cost: 0 }),
    ]);
    // A run shipped again with one more call: counted once, moved by its delta (one more request, more tokens).
    await env.DB.batch([
      shipped(
        { run: `r5-${a}`, day: `${m}-03`, agent: a, updatedAt: `${m}-03T13:00:00.000Z` },
        {
          caller: "api:alice",
          job_id: "",
          model: "moonshot:kimi-k1-128k",
          requests: 2,
          unreported_requests: 1,
          uncosted_requests: 1,
          prompt_tokens: 600,
          completion_tokens: 60,
          cached_tokens: 5,
          cost_pico: 0,
        },
      ),
      seeded({ run: `r1-${a}`, day: `${m}-01`, agent: a, caller: "api:alice", p: 100, c: 10, cost: 1_000_000_000 }), // a resend: no change
    ]);
    const app = appFor(runConfig(uniqueHost("script"), { agentId: a }));
    const pick = (groups: { key: string | null }[], keys: (string | null)[]) => groups.filter((g) => keys.includes(g.key));
    const byAgent = await usage(app, `from=${m}-01&to=${m}-03&group_by=agent`);
    expect(byAgent.status).toBe(200);
    expect(pick(byAgent.body.groups, [a, b])).toEqual(
      [
        {
          key: a,
          requests: 4,
          runs: 3,
          unreported_requests: 1,
          uncosted_requests: 1,
          prompt_tokens: 900,
          completion_tokens: 90,
          cached_tokens: 5,
          total_tokens: 990,
          cost_usd: "0.003",
        },
        {
          key: b,
          requests: 2,
          runs: 2,
          unreported_requests: 0,
          uncosted_requests: 0,
          prompt_tokens: 700,
          completion_tokens: 70,
          cached_tokens: 0,
          total_tokens: 770,
          cost_usd: "0.000000500003",
        },
      ].sort((x, y) => (x.key < y.key ? -1 : 1)),
    );
    const byDay = await usage(app, `from=${m}-01&to=${m}-03&group_by=day`);
    expect(
      byDay.body.groups.map((g: { key: string; requests: number; runs: number; total_tokens: number; cost_usd: string }) => [
        g.key,
        g.requests,
        g.runs,
        g.total_tokens,
        g.cost_usd,
      ]),
    ).toEqual([
      [`${m}-01`, 2, 2, 330, "0.003"],
      [`${m}-02`, 2, 2, 770, "0.000000500003"],
      [`${m}-03`, 2, 1, 660, "0"],
    ]);
    expect(byDay.body.total).toMatchObject({ requests: 6, runs: 5, total_tokens: 1760, cost_usd: "0.003000500003" });
    const byModel = await usage(app, `from=${m}-02&to=${m}-02&group_by=model`);
    expect(byModel.body.groups.map((g: { key: string; requests: number }) => [g.key, g.requests])).toEqual([
      ["moonshot:kimi-k1-128k", 1],
      ["other:m2", 1],
    ]);
    const byJob = await usage(app, `from=${m}-01&to=${m}-03&group_by=job`);
    expect(byJob.body.groups.map((g: { key: string | null; requests: number; runs: number }) => [g.key, g.requests, g.runs])).toEqual([
      [null, 5, 4],
      ["nightly", 1, 1],
    ]);
    const byCaller = await usage(app, `from=${m}-01&to=${m}-01&group_by=caller`);
    expect(
      byCaller.body.groups.map((g: { key: string; prompt_tokens: number; cost_usd: string }) => [g.key, g.prompt_tokens, g.cost_usd]),
    ).toEqual([
      ["api:alice", 100, "0.001"],
      ["api:bob", 200, "0.002"],
    ]);
    // A range with nothing in it: no groups, zero totals.
    const empty = await usage(app, `from=${m}-04&to=${m}-30&group_by=agent`);
    expect(empty.body).toEqual({
      from: `${m}-04`,
      to: `${m}-30`,
      group_by: "agent",
      groups: [],
      total: {
        requests: 0,
        runs: 0,
        unreported_requests: 0,
        uncosted_requests: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        total_tokens: 0,
        cost_usd: "0",
      },
    });
  });

  it("ISSUE25-2 runs through the HTTP surface land in the rollups: per agent and per caller, once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { content: "1", usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } },
      { content: "2", usage: { prompt_tokens: 200, completion_tokens: 20, total_tokens: 220 } },
      { content: "3", usage: { prompt_tokens: 300, completion_tokens: 30, total_tokens: 330 } },
    ]);
    const a = `ra-${uid()}`;
    const b = `rb-${uid()}`;
    const app = appFor(runConfig(host, { agentId: a, moreAgents: [b], model: { pricing: PRICING } }));
    const r1 = await startRun(app, "one", a, ALICE);
    await waitForRun(app, r1);
    const r2 = await startRun(app, "two", a, BOB);
    await waitForRun(app, r2, BOB);
    const r3 = await startRun(app, "three", b, ALICE);
    await waitForRun(app, r3);
    for (const r of [r1, r2, r3]) await shippedUsage(r);
    const today = new Date().toISOString().slice(0, 10);
    const byAgent = await usage(app, `from=${today}&to=${today}&group_by=agent`);
    const mine = byAgent.body.groups.filter((g: { key: string }) => g.key === a || g.key === b);
    // a: 300 prompt × 2.5e6 + 30 completion × 1e7 = 1.05e9 pico; b: 300 × 2.5e6 + 30 × 1e7 = 1.05e9.
    expect(
      mine.map((g: { key: string; requests: number; runs: number; total_tokens: number; cost_usd: string }) => [
        g.key,
        g.requests,
        g.runs,
        g.total_tokens,
        g.cost_usd,
      ]),
    ).toEqual(
      [
        [a, 2, 2, 330, "0.00105"],
        [b, 1, 1, 330, "0.00105"],
      ].sort((x, y) => ((x[0] as string) < (y[0] as string) ? -1 : 1)),
    );
    const rows = await env.DB.prepare(
      "SELECT caller, SUM(requests) AS n FROM usage_rollups WHERE agent_id = ?1 GROUP BY caller ORDER BY caller",
    )
      .bind(a)
      .all();
    expect(rows.results).toEqual([
      { caller: "api:alice", n: 1 },
      { caller: "api:bob", n: 1 },
    ]);
  });

  it("ISSUE25-2 bad parameters get 400 naming the parameter", async () => {
    const app = appFor(runConfig(uniqueHost("script")));
    const cases: [string, string][] = [
      ["to=2026-01-31&group_by=agent", "from"],
      ["from=2026-01-01&to=2026-01-31", "group_by"],
      ["from=2026-01-01&to=2026-01-31&group_by=session", "group_by"],
      ["from=2026-1-1&to=2026-01-31&group_by=agent", "from"],
      ["from=2026-01-01&to=2026-02-30&group_by=agent", "to"],
      ["from=2026-02-01&to=2026-01-31&group_by=agent", "to"],
      ["from=2024-01-01&to=2026-01-31&group_by=day", "to"],
    ];
    for (const [query, param] of cases) {
      const res = await usage(app, query);
      expect(res.status, query).toBe(400);
      expect(res.body.error.code, query).toBe("invalid.request");
      expect(res.body.error.message, query).toMatch(new RegExp(`^${param}`));
    }
    // An API caller's token is not an admin's: scopes are disjoint (403), and no token at all is 401.
    expect((await call(app, "GET", "/api/admin/usage?from=2026-01-01&to=2026-01-31&group_by=agent", undefined, ALICE)).status).toBe(403);
    expect((await app.request("/api/admin/usage?from=2026-01-01&to=2026-01-31&group_by=agent", {}, env)).status).toBe(401);
  });
});
