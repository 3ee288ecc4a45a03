/**
 * Issue 25 §2 (D-078): budget alerts fire once per alert and period — one audit event, one signed webhook through the
 * job notifications' outbox — however many runs cross the threshold at once; and usage reaches the rollups exactly
 * once when the run-stop D1 batch fails or its answer is lost (the shipping pass retries; the upserts move forward only).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { outboxSize } from "../../src/audit/outbox";
import { indexBacklog } from "../../src/sessions/index-outbox-store";
import { recordFiredAlerts } from "../../src/sessions/usage-alerts";
import { type AlertSpec, alertSpecs } from "../../src/usage/alerts";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, BOB, call, startRun, until, waitForRun } from "../support/runs";
import { inSession } from "../support/session";

const uid = () => crypto.randomUUID().slice(0, 8);
const today = () => new Date().toISOString().slice(0, 10);

/** Webhooks the mock received at `host`. */
async function hooksAt(host: string): Promise<{ headers: Record<string, string>; body: string }[]> {
  return (await fetch(`https://mock.control/hooks?host=${host}`)).json();
}

/** The agent's audit events of today, of one type (all streams, once shipped to R2). */
async function auditEvents(app: ReturnType<typeof appFor>, agentId: string, type: string): Promise<Record<string, any>[]> {
  const res = await app.request(
    `/api/admin/audit?agent_id=${agentId}&date=${today()}`,
    { headers: { authorization: `Bearer ${ADMIN}` } },
    env,
  );
  return new TextDecoder()
    .decode(await res.arrayBuffer())
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, any>)
    .filter((e) => e.event_type === type);
}

describe("ISSUE25-2 budget alerts", () => {
  it("ISSUE25-2 eight concurrent runs crossing an agent's and a caller's threshold alert once each: one audit event, one signed webhook", {
    timeout: 40_000,
  }, async () => {
    const host = uniqueHost("script");
    const usage = { prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 };
    await scriptProvider(
      host,
      Array.from({ length: 10 }, (_, i) => ({ content: `answer ${i}`, usage })),
    );
    const agentId = `alr-${uid()}`;
    const hook = `ok-${uid()}.hook.test`;
    // A caller threshold of its own (the alert's key names it), crossed by this test's own runs whatever else bob spent.
    const callerTokens = 60 + Math.floor(Math.random() * 50);
    const app = appFor(
      runConfig(host, {
        agentId,
        model: { pricing: { inputPerMillion: 1, outputPerMillion: 2 } },
        usage: {
          alerts: [
            { scope: "agent", id: agentId, period: "day", tokens: 100, webhook: `https://${hook}/usage` },
            { scope: "caller", id: "api:bob", period: "month", tokens: callerTokens },
          ],
        },
      }),
    );
    const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => startRun(app, `go ${i}`, agentId, BOB)));
    for (const id of ids) await waitForRun(app, id, BOB);
    await until(async () => {
      const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM runs WHERE agent_id = ?1 AND requests > 0")
        .bind(agentId)
        .first<{ n: number }>();
      return n?.n === 8;
    }, 20_000);
    const claims = await env.DB.prepare(
      "SELECT alert_key, period, claimant, tokens FROM usage_alerts WHERE alert_key LIKE ?1 OR alert_key = ?2",
    )
      .bind(`agent|${agentId}|%`, `caller|api:bob|month|tokens:${callerTokens}`)
      .all<{ alert_key: string; period: string; claimant: string; tokens: number }>();
    expect(claims.results.map((c) => [c.alert_key, c.period]).sort()).toEqual(
      [
        [`agent|${agentId}|day|tokens:100`, today()],
        [`caller|api:bob|month|tokens:${callerTokens}`, today().slice(0, 7)],
      ].sort(),
    );
    const agentClaim = claims.results.find((c) => c.alert_key.startsWith("agent|"));
    expect(ids).toContain(agentClaim?.claimant);
    expect(agentClaim?.tokens).toBeGreaterThanOrEqual(100);
    expect(agentClaim?.tokens).toBeLessThan(100 + 60 * 8);
    // One webhook, signed, whatever the number of runs and batches.
    await until(async () => (await hooksAt(hook)).length >= 1, 15_000);
    await new Promise((r) => setTimeout(r, 1500)); // a second webhook would have gone by now
    const hooks = await hooksAt(hook);
    expect(hooks).toHaveLength(1);
    expect(hooks[0]?.headers["webhook-id"]).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(hooks[0]?.headers["webhook-signature"]).toMatch(/^v1,/);
    const body = JSON.parse(hooks[0]?.body ?? "{}");
    expect(body).toMatchObject({
      type: "usage.alert",
      data: { alert: { scope: "agent", id: agentId, period: "day", tokens: 100 }, period: today(), run_id: agentClaim?.claimant },
    });
    expect(body.data.tokens).toBe(agentClaim?.tokens);
    // One audit event per alert, in the stream of the run that crossed it; the webhook's delivery audited too.
    await until(
      async () =>
        (await auditEvents(app, agentId, "usage.alert")).length >= 2 &&
        (await auditEvents(app, agentId, "usage.alert.notify.delivered")).length >= 1,
      15_000,
    );
    const events = await auditEvents(app, agentId, "usage.alert");
    expect(events.map((e) => `${e.payload.alert.scope}:${e.payload.period}`).sort()).toEqual([
      `agent:${today()}`,
      `caller:${today().slice(0, 7)}`,
    ]);
    expect((await auditEvents(app, agentId, "usage.alert.notify.delivered")).map((e) => e.run_id)).toEqual([agentClaim?.claimant]);
    // More runs in the same period: nothing more.
    const more = await startRun(app, "again", agentId, BOB);
    await waitForRun(app, more, BOB);
    await until(
      async () => (await env.DB.prepare("SELECT 1 FROM runs WHERE run_id = ?1 AND requests > 0").bind(more).first()) !== null,
      15_000,
    );
    await new Promise((r) => setTimeout(r, 1500));
    expect(await hooksAt(hook)).toHaveLength(1);
    expect(await auditEvents(app, agentId, "usage.alert")).toHaveLength(2);
  });

  it("ISSUE25-2 alerts are validated strictly: unknown keys, both or neither threshold, an unknown agent, a non-https webhook", async () => {
    const host = uniqueHost("script");
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ scope: "agent", id: "main", period: "day", tokens: 1, extra: 1 }, /extra/],
      [{ scope: "agent", id: "main", period: "day" }, /exactly one of costUsd and tokens/],
      [{ scope: "agent", id: "main", period: "day", tokens: 1, costUsd: 1 }, /exactly one of costUsd and tokens/],
      [{ scope: "agent", id: "nobody", period: "day", tokens: 1 }, /unknown agent .*nobody/],
      [{ scope: "caller", id: "api:bob", period: "week", tokens: 1 }, /period/],
      [{ scope: "caller", id: "api:bob", period: "day", costUsd: 0.0000001 }, /6 decimal places/],
      [{ scope: "caller", id: "api:bob", period: "day", tokens: 1, webhook: "http://example.com/x" }, /webhook/],
      [
        { scope: "caller", id: "api:bob", period: "day", tokens: 1, webhook: "https://127.0.0.1/x" },
        /webhook.*not an allowed outbound URL/,
      ],
      [{ scope: "caller", id: "api:bob", period: "day", tokens: 1, webhook: "https://user:pw@example.com/x" }, /alerts\[0\]\.webhook/],
      [
        { scope: "caller", id: "api:bob", period: "day", tokens: 1, webhook: "https://metadata.google.internal/x" },
        /webhook.*not an allowed outbound URL/,
      ],
    ];
    for (const [alert, message] of bad)
      expect(() => runConfig(host, { usage: { alerts: [alert] } }), JSON.stringify(alert)).toThrow(message);
    expect(() => runConfig(host, { model: { pricing: { inputPerMillion: 1 } } })).toThrow(/outputPerMillion/);
    expect(() => runConfig(host, { model: { pricing: { inputPerMillion: 1, outputPerMillion: 2, perRequest: 1 } } })).toThrow(/perRequest/);
    expect(() => runConfig(host, { model: { pricing: { inputPerMillion: -1, outputPerMillion: 2 } } })).toThrow(/inputPerMillion/);
  });
});

/** What an injected D1 binding is told to do, and what it saw. */
interface D1Plan {
  fail: number;
  ackLost: number;
  batches: number;
}

/** The session object's D1 binding with failures injected: refused batches, or batches applied whose answer is lost. */
function inject(stub: DurableObjectStub, p: D1Plan): Promise<void> {
  return runInDurableObject(stub, (instance: unknown) => {
    const e = (instance as { env: Env }).env;
    const real = e.DB;
    e.DB = new Proxy(real, {
      get(target, prop) {
        if (prop === "batch")
          return async (statements: D1PreparedStatement[]) => {
            p.batches++;
            if (p.fail > 0) {
              p.fail--;
              throw new Error("D1_ERROR: injected failure");
            }
            const result = await target.batch(statements);
            if (p.ackLost > 0) {
              p.ackLost--;
              throw new Error("D1_ERROR: injected lost answer");
            }
            return result;
          };
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  });
}

describe("ISSUE25-2 usage survives D1 failures", () => {
  for (const [name, p] of [
    ["refused batches are retried until D1 takes them", { fail: 2, ackLost: 0, batches: 0 }],
    ["a batch applied whose answer was lost is sent again and counts once", { fail: 0, ackLost: 1, batches: 0 }],
  ] as const) {
    it(`ISSUE25-2 ${name}: the rollups hold every call exactly once, and an alert fires once`, { timeout: 30_000 }, async () => {
      const host = uniqueHost("script");
      await scriptProvider(host, [
        { content: "one", usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } },
        { content: "two", usage: { prompt_tokens: 200, completion_tokens: 20, total_tokens: 220 } },
      ]);
      const agentId = `d1f-${uid()}`;
      const config = runConfig(host, {
        agentId,
        model: { pricing: { inputPerMillion: 3, outputPerMillion: 15 } },
        usage: { alerts: [{ scope: "agent", id: agentId, period: "month", costUsd: 0.0005 }] },
      });
      const app = appFor(config);
      const room = `room-${uid()}`;
      const key = `agent:${agentId}:http:alice~${room}:dm:u-usage`;
      const stub = env.SESSIONS.getByName(key);
      const plan: D1Plan = { ...p };
      await inject(stub, plan);
      const send = (message: string) =>
        call(app, "POST", "/v1/chat/messages", { user_id: "u-usage", room_id: room, agent_id: agentId, message });
      const a = await send("one");
      await waitForRun(app, a.body.id);
      const b = await send("two");
      await waitForRun(app, b.body.id);
      const drained = () => inSession(stub, (cx) => indexBacklog(cx.sql) === 0 && outboxSize(cx.sql) === 0);
      await until(async () => (await drained()) || ((await runDurableObjectAlarm(stub)) && false), 25_000);
      expect(plan.fail + plan.ackLost).toBe(0);
      const rollup = await env.DB.prepare(
        "SELECT SUM(requests) AS requests, SUM(runs) AS runs, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS c, SUM(cost_pico) AS cost FROM usage_rollups WHERE agent_id = ?1",
      )
        .bind(agentId)
        .first();
      // 300 × 3e6 + 30 × 1.5e7 = 1.35e9 pico-USD.
      expect(rollup).toEqual({ requests: 2, runs: 2, p: 300, c: 30, cost: 1_350_000_000 });
      const totals = await env.DB.prepare(
        "SELECT scope, period, requests, tokens, cost_pico FROM usage_totals WHERE scope_id = ?1 ORDER BY period",
      )
        .bind(agentId)
        .all();
      expect(totals.results).toEqual([
        { scope: "agent", period: today().slice(0, 7), requests: 2, tokens: 330, cost_pico: 1_350_000_000 },
        { scope: "agent", period: today(), requests: 2, tokens: 330, cost_pico: 1_350_000_000 },
      ]);
      // The month's cost crossed $0.0005 with the first run (4.5e8 ≥ 5e8? no: 100 × 3e6 + 10 × 1.5e7 = 4.5e8) — with the second.
      const claims = await env.DB.prepare("SELECT claimant FROM usage_alerts WHERE alert_key = ?1")
        .bind(`agent|${agentId}|month|usd:0.0005`)
        .all();
      expect(claims.results).toEqual([{ claimant: b.body.id }]);
      await until(async () => (await auditEvents(app, agentId, "usage.alert")).length >= 1, 15_000);
      const events = await auditEvents(app, agentId, "usage.alert");
      expect(events.map((e) => [e.run_id, e.payload.cost_usd, e.payload.tokens])).toEqual([[b.body.id, "0.00135", 330]]);
      // The same claim read back once more (a listing and a pass sending the same rows): recorded once only.
      const [alert] = alertSpecs(config, agentId);
      const again = await inSession(stub, async (cx) => {
        const before = outboxSize(cx.sql);
        const queued = await recordFiredAlerts(cx, [
          { alert: alert as AlertSpec, runId: b.body.id, period: today().slice(0, 7), tokens: 330, costPico: "1350000000" },
        ]);
        return { queued, added: outboxSize(cx.sql) - before };
      });
      expect(again).toEqual({ queued: false, added: 0 });
    });
  }
});
