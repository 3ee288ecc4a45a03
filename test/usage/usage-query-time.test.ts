/**
 * Issue 25 "Done means" figure: usage query time with 100,000 runs recorded. Seeds the rollups as 100,000 runs spread
 * over 90 days × 5 agents × 20 callers × 3 models would leave them (27,000 rollup rows, 3–4 runs each), then times
 * GET /api/admin/usage inside workerd (local D1) for each group_by over the whole 90 days. Prints the figure; asserts
 * the exact totals and only a generous bound (catastrophic regressions, e.g. a scan of something per run).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, appFor, call } from "../support/runs";

const ROWS = 90 * 5 * 20 * 3;
const RUNS = 100_000;

describe("ISSUE25-2 usage query time", () => {
  it("ISSUE25-2 GET /api/admin/usage over rollups of 100,000 runs (90 days × 5 agents × 20 callers × 3 models)", {
    timeout: 120_000,
  }, async () => {
    // A year no other test uses; one statement seeds every row (runs: 3 each, 4 for the first RUNS - 3 × ROWS rows).
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1)
       INSERT INTO usage_rollups (day, agent_id, caller, model, job_id, requests, runs, unreported_requests, uncosted_requests,
                                  prompt_tokens, completion_tokens, cached_tokens, cost_pico)
       SELECT date('2999-01-01', '+' || (i % 90) || ' days'), 'qt-' || ((i / 90) % 5), 'api:c' || ((i / 450) % 20),
              'p:m' || (i / 9000), CASE WHEN (i / 450) % 20 = 0 THEN 'nightly' ELSE '' END,
              2 * (3 + (i < ?2)), 3 + (i < ?2), 0, 0, 1000 * (3 + (i < ?2)), 100 * (3 + (i < ?2)), 0, 7000000 * (3 + (i < ?2))
       FROM n`,
    )
      .bind(ROWS, RUNS - 3 * ROWS)
      .run();
    const app = appFor(runConfig(uniqueHost("script")));
    const figures: Record<string, number> = {};
    for (const group of ["day", "agent", "caller", "model", "job"]) {
      const times: number[] = [];
      let body: { groups: unknown[]; total: { runs: number; requests: number; prompt_tokens: number; cost_usd: string } } | null = null;
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        const res = await call(app, "GET", `/api/admin/usage?from=2999-01-01&to=2999-03-31&group_by=${group}`, undefined, ADMIN);
        times.push(performance.now() - t0);
        expect(res.status).toBe(200);
        body = res.body;
      }
      expect(body?.total).toMatchObject({ runs: RUNS, requests: 2 * RUNS, prompt_tokens: 1000 * RUNS, cost_usd: "0.7" });
      expect(body?.groups).toHaveLength({ day: 90, agent: 5, caller: 20, model: 3, job: 2 }[group] as number);
      times.sort((a, b) => a - b);
      figures[group] = Math.round((times[2] as number) * 10) / 10;
    }
    console.log(`usage query time, 100,000 runs (${ROWS} rollup rows), median of 5, ms: ${JSON.stringify(figures)}`);
    for (const ms of Object.values(figures)) expect(ms).toBeLessThan(5_000);
  });
});
