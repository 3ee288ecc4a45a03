/**
 * Issue 25 §3 (D-079): what GET /api/admin/runs answers for the dashboard's runs list — each run's message and
 * answer previews, duration, rounds and tool calls, written by the run's index row in the SessionDO's existing D1
 * batch — and its `from`/`to` time filter. Against the real local D1 and SessionDOs through the app; the provider is
 * the scripted mock (test/support/outbound.ts); D1 failures are injected at the session object's binding.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { indexRun, PREVIEW_CHARS, preview, type RunFilters, runListQuery } from "../../src/runs/index-d1";
import { indexBacklog } from "../../src/sessions/index-outbox-store";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, type App, appFor, call, registerTestTools, until, waitForRun } from "../support/runs";
import { inSession } from "../support/session";

registerTestTools();

const suffix = () => crypto.randomUUID().slice(0, 8);
const get = (app: App, path: string) => call(app, "GET", path, undefined, ADMIN);

/** A fresh chat session of alice under `agentId`, its object, and how to send a message to it. */
function chatSession(agentId: string, app: App) {
  const room = `room-${suffix()}`;
  const key = `agent:${agentId}:http:alice~${room}:dm:u-runs`;
  return {
    key,
    stub: env.SESSIONS.getByName(key),
    send: (message: string) => call(app, "POST", "/v1/chat/messages", { user_id: "u-runs", room_id: room, agent_id: agentId, message }),
  };
}

/** The runs GET /api/admin/runs lists for `query`, once `ready` holds of them (the index ships within a second). */
async function listedWhen(app: App, query: string, ready: (runs: any[]) => boolean): Promise<any[]> {
  let runs: any[] = [];
  await until(async () => {
    const res = await get(app, `/api/admin/runs?${query}`);
    expect(res.status, res.text).toBe(200);
    runs = res.body.runs;
    return ready(runs);
  });
  return runs;
}

/** The run's D1 row as stored, every column. */
const d1Row = (runId: string) => env.DB.prepare("SELECT * FROM runs WHERE run_id = ?1").bind(runId).first<Record<string, unknown>>();

describe("ISSUE25-3 runs list: previews, duration, rounds and tool calls in the run index", () => {
  it("ISSUE25-3 a run with a tool round is listed with exactly its message and answer previews, duration, rounds and tool calls", async () => {
    const host = uniqueHost("script");
    const answer = `The echo came back fine.\n\nHere is a long answer that goes on well past the eighty characters of a preview line.`;
    await scriptProvider(host, [{ tool_calls: [{ id: "e1", name: "test__echo", arguments: '{"text":"hi"}' }] }, { content: answer }]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const message = "Please   echo this\nand then tell me, in a long answer, what came back from the echo tool today";
    const queued = await call(app, "POST", "/v1/runs", { agent_id: agentId, message });
    expect(queued.status, queued.text).toBe(202);
    const run = await waitForRun(app, queued.body.id);
    expect(run).toMatchObject({ status: "completed", output: answer, tool_calls: 1 });

    const [listed] = await listedWhen(app, `agent_id=${agentId}`, (runs) => runs[0]?.status === "completed");
    expect(listed).toStrictEqual({
      run_id: queued.body.id,
      agent_id: agentId,
      session_key: listed.session_key,
      session_id: run.session_id ?? listed.session_id,
      caller_id: "alice",
      source: "http",
      status: "completed",
      created_at: listed.created_at,
      updated_at: listed.updated_at,
      message_preview: "Please echo this and then tell me, in a long answer, what came back from the ec…",
      output_preview: "The echo came back fine. Here is a long answer that goes on well past the eight…",
      duration_ms: run.duration_ms,
      rounds: 1,
      tool_calls: 1,
      // D-082: two calls at the mock's default usage (10 prompt, 5 completion); the model has no pricing.
      tokens: { prompt: 20, completion: 10, cached: 0, total: 30 },
      cost: null,
    });
    expect([...listed.message_preview]).toHaveLength(PREVIEW_CHARS);
    expect(listed.duration_ms).toBeGreaterThanOrEqual(0);
    expect(Object.keys(listed)).toEqual([
      "run_id",
      "agent_id",
      "session_key",
      "session_id",
      "caller_id",
      "source",
      "status",
      "created_at",
      "updated_at",
      "message_preview",
      "output_preview",
      "duration_ms",
      "rounds",
      "tool_calls",
      "tokens",
      "cost",
    ]);
  });

  it("ISSUE25-3 a short answer is its own preview; a failed run's preview is its error message; a row written before 0021 lists nulls", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "ok" }, { status: 400 }]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const a = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "hi" });
    await waitForRun(app, a.body.id);
    const b = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "and now fail" });
    const failed = await waitForRun(app, b.body.id);
    expect(failed.status).toBe("failed");
    const runs = await listedWhen(app, `agent_id=${agentId}`, (r) => r.length === 2 && r.every((x) => x.status !== "running"));
    const byId = new Map(runs.map((r) => [r.run_id, r]));
    expect(byId.get(a.body.id)).toMatchObject({ message_preview: "hi", output_preview: "ok", rounds: 0, tool_calls: 0 });
    expect(byId.get(b.body.id)).toMatchObject({
      status: "failed",
      message_preview: "and now fail",
      output_preview: preview(failed.output),
    });
    expect(failed.output).not.toBe("");

    const old = `run-old-${suffix()}`;
    await indexRun(env.DB, {
      run_id: old,
      agent_id: `old-${suffix()}`,
      session_key: "agent:old:main",
      session_id: "sess_old",
      caller_id: null,
      source: "http",
      status: "completed",
      created_at: "2020-01-01T00:00:00.000Z",
      updated_at: "2020-01-01T00:00:00.000Z",
    });
    expect(await d1Row(old)).toMatchObject({
      message_preview: null,
      output_preview: null,
      duration_ms: null,
      rounds: null,
      tool_calls: null,
    });
  });

  it("ISSUE25-3 a run waiting for approval is listed with its message and no answer or duration yet; once approved and done, the same row carries them", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "s1", name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: "deploy finished" }) }] },
      { content: "sent it" },
    ]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const queued = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "tell ops" });
    const [waiting] = await listedWhen(app, `agent_id=${agentId}`, (r) => r[0]?.status === "awaiting_approval");
    expect(waiting).toMatchObject({
      run_id: queued.body.id,
      message_preview: "tell ops",
      output_preview: null,
      duration_ms: null,
      rounds: 1,
      tool_calls: 1,
    });
    const approvals = await get(app, `/api/admin/approvals?status=pending&agent_id=${agentId}`);
    const [approval] = approvals.body.approvals;
    expect(approval.run_id).toBe(queued.body.id);
    const decided = await call(app, "POST", `/api/admin/approvals/${approval.approval_id}`, { decision: "approve" }, ADMIN);
    expect(decided.status, decided.text).toBe(200);
    const run = await waitForRun(app, queued.body.id);
    expect(run.status).toBe("completed");
    const [done] = await listedWhen(app, `agent_id=${agentId}`, (r) => r[0]?.status === "completed");
    expect(done).toMatchObject({ message_preview: "tell ops", output_preview: "sent it", rounds: 1, tool_calls: 1 });
    expect(done.duration_ms).toBe(run.duration_ms);
    expect(await get(app, `/api/admin/runs?agent_id=${agentId}&status=awaiting_approval`)).toMatchObject({ body: { runs: [] } });
  });

  it("ISSUE25-3 a secret in the message never reaches D1: the preview carries the transcript's redaction", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "noted" }]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const key = `sk-proj-${"A1b2C3d4".repeat(4)}`;
    const literal = "test-api-token-bob-0123456789ab"; // a configured caller's token: a literal secret of the env
    const res = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: `use ${key} and ${literal}` });
    await waitForRun(app, res.body.id);
    const [listed] = await listedWhen(app, `agent_id=${agentId}`, (r) => r[0]?.status === "completed");
    expect(listed.message_preview).toBe("use [REDACTED:openai_style_key] and [REDACTED:secret]");
    const row = JSON.stringify(await d1Row(res.body.id));
    expect(row).not.toContain(key);
    expect(row).not.toContain("A1b2C3d4");
    expect(row).not.toContain(literal);
  });

  it("ISSUE25-3 a secret split over two messages: the first run's listed preview is redacted again once the second completes it", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "one" }, { content: "two" }]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const first = await chat.send("my key is sk-abcdefghij");
    await waitForRun(app, first.body.id);
    // Alone, the first half is no credential: it is listed as it was stored.
    await listedWhen(app, `agent_id=${agentId}`, (r) => r[0]?.message_preview === "my key is sk-abcdefghij");
    const second = await chat.send("klmnopqrstuvwxyz123456 thanks");
    await waitForRun(app, second.body.id);
    const runs = await listedWhen(app, `agent_id=${agentId}`, (r) => r.length === 2 && r.every((x) => x.status === "completed"));
    await until(async () => (await d1Row(first.body.id))?.message_preview === "my key is [REDACTED:split_secret]");
    const previews = Object.fromEntries(
      (await listedWhen(app, `agent_id=${agentId}`, (r) => r.length === 2)).map((r) => [r.run_id, r.message_preview]),
    );
    expect(previews).toEqual({
      [first.body.id]: "my key is [REDACTED:split_secret]",
      [second.body.id]: "[REDACTED:split_secret] thanks",
    });
    expect(runs).toHaveLength(2);
    for (const id of [first.body.id, second.body.id]) expect(JSON.stringify(await d1Row(id))).not.toContain("sk-abcdefghij");
  });

  it("ISSUE25-3 a cut never splits a redaction placeholder or a surrogate pair", () => {
    const pad = "x".repeat(PREVIEW_CHARS - 6);
    expect(preview(`${pad} [REDACTED:openai_style_key] tail`)).toBe(`${pad}…`);
    expect(preview(`${"é".repeat(10)}${"😀".repeat(100)}`)).toBe(`${"é".repeat(10)}${"😀".repeat(PREVIEW_CHARS - 11)}…`);
    expect(preview("  a\n\tb  ")).toBe("a b");
    expect(preview(null)).toBeNull();
  });

  it("ISSUE25-3 while D1 refuses the run-stop batch nothing is lost: the run answers, and its row lands with its previews once D1 is back", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "answered while D1 was down" }]);
    const agentId = `runs-${suffix()}`;
    const app = appFor(runConfig(host, { agentId }));
    const chat = chatSession(agentId, app);
    const d1 = { fail: 1_000, batches: 0 };
    await runInDurableObject(chat.stub, (instance: unknown) => {
      const e = (instance as { env: Env }).env;
      const real = e.DB;
      e.DB = new Proxy(real, {
        get(target, prop) {
          if (prop === "batch")
            return async (statements: D1PreparedStatement[]) => {
              d1.batches++;
              if (d1.fail > 0) throw new Error("D1_ERROR: injected failure");
              return target.batch(statements);
            };
          const value = Reflect.get(target, prop);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    });
    const res = await chat.send("hello while D1 is down");
    expect(res.status).toBe(202);
    expect(await waitForRun(app, res.body.id)).toMatchObject({ status: "completed", output: "answered while D1 was down" });
    await until(async () => d1.batches >= 1);
    expect(await d1Row(res.body.id)).toBeNull();
    expect(await inSession(chat.stub, (cx) => indexBacklog(cx.sql))).toBeGreaterThan(0);
    d1.fail = 0;
    await until(
      async () => (await inSession(chat.stub, (cx) => indexBacklog(cx.sql) === 0)) || ((await runDurableObjectAlarm(chat.stub)) && false),
      15_000,
    );
    const [listed] = await listedWhen(app, `agent_id=${agentId}`, (r) => r.length === 1);
    expect(listed).toMatchObject({
      run_id: res.body.id,
      status: "completed",
      message_preview: "hello while D1 is down",
      output_preview: "answered while D1 was down",
      rounds: 0,
      tool_calls: 0,
    });
    expect(typeof listed.duration_ms).toBe("number");
  });
});

describe("ISSUE25-3 GET /api/admin/runs?from=&to=: created_at in [from, to)", () => {
  const app = appFor(runConfig(uniqueHost("ok")));
  const at = (minute: number) => `2031-03-04T10:${String(minute).padStart(2, "0")}:00.000Z`;

  async function seed(agent: string, minutes: number[]): Promise<void> {
    for (const m of minutes)
      await indexRun(env.DB, {
        run_id: `${agent}-${m}`,
        agent_id: agent,
        session_key: `agent:${agent}:main`,
        session_id: "sess_x",
        caller_id: "alice",
        source: "http",
        status: "completed",
        created_at: at(m),
        updated_at: at(m),
      });
  }
  const ids = async (query: string) => {
    const res = await get(app, `/api/admin/runs?${query}`);
    expect(res.status, res.text).toBe(200);
    return res.body.runs.map((r: any) => r.run_id);
  };

  it("ISSUE25-3 from is inclusive, to exclusive; a date means UTC midnight; an offset is the same instant; paging keeps the range", async () => {
    const agent = `range-${suffix()}`;
    await seed(agent, [1, 2, 3, 4, 5]);
    const r = (m: number) => `${agent}-${m}`;
    expect(await ids(`agent_id=${agent}&from=${at(2)}`)).toEqual([r(5), r(4), r(3), r(2)]);
    expect(await ids(`agent_id=${agent}&to=${at(4)}`)).toEqual([r(3), r(2), r(1)]);
    expect(await ids(`agent_id=${agent}&from=${at(2)}&to=${at(4)}`)).toEqual([r(3), r(2)]);
    expect(await ids(`agent_id=${agent}&from=2031-03-04T11:03:00%2B01:00`)).toEqual([r(5), r(4), r(3)]);
    expect(await ids(`agent_id=${agent}&from=2031-03-04T10:02Z&to=2031-03-04T10:03:00.001Z`)).toEqual([r(3), r(2)]);
    expect(await ids(`agent_id=${agent}&from=2031-03-04&to=2031-03-05`)).toEqual([r(5), r(4), r(3), r(2), r(1)]);
    expect(await ids(`agent_id=${agent}&from=2031-03-05`)).toEqual([]);
    expect(await ids(`caller_id=alice&status=completed&from=${at(1)}&to=${at(3)}&agent_id=${agent}`)).toEqual([r(2), r(1)]);

    const first = await get(app, `/api/admin/runs?agent_id=${agent}&from=${at(2)}&limit=2`);
    expect(first.body.runs.map((x: any) => x.run_id)).toEqual([r(5), r(4)]);
    const second = await get(app, `/api/admin/runs?agent_id=${agent}&from=${at(2)}&limit=2&cursor=${first.body.next_cursor}`);
    expect(second.body).toMatchObject({ next_cursor: null });
    expect(second.body.runs.map((x: any) => x.run_id)).toEqual([r(3), r(2)]);
  });

  it("ISSUE25-3 a bound that is not a zoned ISO time, or an empty range, is 400 invalid.request naming the value", async () => {
    const refused = async (query: string, message: string) =>
      expect(await get(app, `/api/admin/runs?${query}`)).toMatchObject({
        status: 400,
        body: { error: { code: "invalid.request", message } },
      });
    const hint = "is not an ISO 8601 date or date-time with a zone (e.g. 2026-11-27T00:00:00Z)";
    await refused("from=yesterday", `from: "yesterday" ${hint}`);
    await refused("to=2031-02-30", `to: "2031-02-30" ${hint}`);
    await refused("from=2031-03-04T10:00:00", `from: "2031-03-04T10:00:00" ${hint}`);
    await refused("from=2031-03-04T24:00:00Z", `from: "2031-03-04T24:00:00Z" ${hint}`);
    await refused("to=1700000000", `to: "1700000000" ${hint}`);
    await refused("from=", `from: "" ${hint}`);
    await refused(`from=${at(3)}&to=${at(3)}`, `from (${at(3)}) must be before to (${at(3)})`);
    await refused(`from=${at(4)}&to=${at(3)}`, `from (${at(4)}) must be before to (${at(3)})`);
  });

  it("ISSUE25-3 each filter reads an index range: SQLite's plan for the list's own statement names an index, never a scan of runs", async () => {
    const plan = async (f: Omit<RunFilters, "limit">) => {
      const { sql, binds } = runListQuery({ ...f, limit: 51 });
      const rows = await env.DB.prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .bind(...binds)
        .all<{ detail: string }>();
      return rows.results.map((r) => r.detail).join("; ");
    };
    const range = { from: at(1), to: at(2) };
    const plans = {
      range: await plan(range),
      agent: await plan({ agentId: "a", ...range }),
      status: await plan({ status: "failed", from: at(1) }),
      caller: await plan({ callerId: "alice", to: at(2) }),
      paged: await plan({ ...range, after: [at(1), "run_x"] }),
    };
    expect(plans.range).toMatch(/USING (COVERING )?INDEX runs_by_created/);
    expect(plans.paged).toMatch(/USING (COVERING )?INDEX runs_by_created/);
    expect(plans.agent).toMatch(/USING (COVERING )?INDEX runs_by_agent/);
    expect(plans.status).toMatch(/USING (COVERING )?INDEX runs_by_status/);
    expect(plans.caller).toMatch(/USING (COVERING )?INDEX runs_by_caller/);
    for (const p of Object.values(plans)) expect(p).not.toMatch(/SCAN runs(?! USING)/);
  });
});
