/**
 * Issue 23, a tool round's cost before the reply, counted exactly (test/support/counters.ts, D-056, D-065): a
 * conversation's next turn through `/v1/chat/completions` whose model asks for one read-only tool, then answers
 * from its result (1 tool call, 2 model calls) — the turn the Agents SDK peer's tool round is measured against.
 * A plain turn makes 2 commits before its reply (test/runs/turn-commits.test.ts); the issue allows one more per
 * tool round. Counted as workerd commits (D-066: one commit per event-loop turn that wrote; a `transactionSync` is a
 * savepoint of it), a round whose tool does no I/O is one commit between the two model calls.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { validateRunLog } from "../../src/runs/events";
import { runObjectId } from "../../src/runs/ids";
import { SessionDO } from "../../src/sessions/SessionDO";
import { insertSession, readSession, readSessionType, setCurrentGeneration } from "../../src/sessions/session-store";
import { createSql } from "../../src/storage/sql";
import { tools } from "../../src/tools/registry";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { type Counter, quiescent, startCounting } from "../support/counters";
import { type App, appFor, call, invocations, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

let counter: Counter | null = null;
afterEach(() => {
  counter?.stop();
  counter = null;
});

async function countFromHere(): Promise<Counter> {
  const storage = await runInDurableObject(env.SESSIONS.getByName(`tool-commits-probe-${crypto.randomUUID()}`), (_i, s) => s.storage);
  counter = startCounting(storage, [SessionDO]);
  return counter;
}

/** The provider's two replies of one tool-round turn: a call of test.echo, then the answer after its result. */
const TOOL_ROUND = (n: number) => [
  { tool_calls: [{ id: `call_${n}`, name: "test__echo", arguments: `{"text":"hi ${n}"}` }] },
  { content: `The echo tool said hi ${n}.` },
];

function conversation(app: App, agentId: string, user: string) {
  let n = 0;
  return async () => {
    n++;
    const res = await call(app, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      user,
      messages: [{ role: "user", content: "use the echo tool" }],
    });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content).toBe(`The echo tool said hi ${n}.`);
    return res.headers.get("X-Run-Id") as string;
  };
}

/** A read-only tool that takes `delay_ms` (registered here: a crash must be able to land while it runs). */
const slowReads: string[] = [];
if (!tools.get("test.slow_read"))
  tools.register({
    name: "test.slow_read",
    description: "Reads slowly (read_only).",
    parameters: { type: "object", properties: { delay_ms: { type: "integer" } }, additionalProperties: false },
    risk: "read_only",
    handler: async (input, ctx) => {
      slowReads.push(ctx.runId);
      await new Promise((r) => setTimeout(r, Number(input.delay_ms ?? 0)));
      return { ok: true, output: { read: true } };
    },
  });

const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

/** The counts of a conversation's second turn (the first makes the session; its shipping is over before counting). */
async function countSecondTurn(turn: () => Promise<string>) {
  await turn();
  const c = await countFromHere();
  await quiescent(() => JSON.stringify(c.counts), 2_500);
  c.reset();
  const runId = await turn();
  const counts = { ...c.counts };
  c.stop();
  return { runId, counts };
}

const eventsOf = async (app: App, runId: string) =>
  (await runDetail(app, runId)).events.map((e: { event_type: string; seq: number }) => [e.seq, e.event_type]);

const ONE_ROUND = [
  [1, "run.created"],
  [2, "run.started"],
  [3, "model.requested"],
  [4, "tool.call"],
  [5, "tool.result"],
  [6, "model.requested"],
  [7, "run.completed"],
];

describe("ISSUE23 a tool round's commits before its reply (D-065)", () => {
  it("ISSUE23 a conversation's next turn with one read-only tool round makes exactly 3 commits before its reply (2 for a plain turn): T1, the round (the model's usage, the tool plan, the call's result with its started mark and idempotency record, the next model.requested), T3", {
    timeout: 30_000,
  }, async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [...TOOL_ROUND(1), ...TOOL_ROUND(2)]);
    const agentId = `tool-commits-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: ["test.echo"] } } }));
    const { runId, counts } = await countSecondTurn(conversation(app, agentId, "tool-commits-1"));
    console.log(`ISSUE23_TOOL_ROUND_COUNTS ${JSON.stringify(counts)}`);
    expect(counts.commits).toBe(3);
    expect(counts.alarmWrites).toBe(1);
    // The round is whole: 1 tool call, run once, its result sent back to the model, and the lifecycle in order.
    expect(invocations.filter((i) => i.runId === runId)).toEqual([
      { tool: "test.echo", toolCallId: "call_2", runId, input: { text: "hi 2" } },
    ]);
    const sent = await bodiesSentTo(host);
    expect(sent).toHaveLength(4);
    expect(sent[3]?.messages.at(-1)).toEqual({
      role: "tool",
      tool_call_id: "call_2",
      content: '{"id":"call_2","tool":"test.echo","ok":true,"output":{"echoed":{"text":"hi 2"}},"error":null}',
    });
    expect(await eventsOf(app, runId)).toEqual(ONE_ROUND);
    // What the deferred writes left: the call done with its start time, both traces in order, the outcome replayable.
    const stored = await runInDurableObject(stubOf(runId), (_i, state) => ({
      call: state.storage.sql
        .exec("SELECT status, started_at, finished_at FROM tool_executions WHERE run_id = ? AND tool_call_id = 'call_2'", runId)
        .toArray(),
      traces: state.storage.sql
        .exec("SELECT kind FROM run_traces WHERE run_id = ? AND kind IN ('tool_start', 'tool_done') ORDER BY id", runId)
        .toArray()
        .map((r) => r.kind),
      record: state.storage.sql.exec("SELECT status FROM idempotency WHERE key = ?", `${runId}:1:call_2`).toArray(),
    }));
    expect(stored.call).toHaveLength(1);
    expect(stored.call[0]?.status).toBe("done");
    expect(String(stored.call[0]?.started_at) <= String(stored.call[0]?.finished_at)).toBe(true);
    expect(stored.traces).toEqual(["tool_start", "tool_done"]);
    expect(stored.record).toEqual([{ status: "done" }]);
  });

  it("ISSUE23 a tool with effects (draft_only) is marked started, with its in-flight record, before its handler runs; the turn is 3 commits before the reply", {
    timeout: 30_000,
  }, async () => {
    const host = uniqueHost("script");
    const counter = (n: number) => [
      { tool_calls: [{ id: `count_${n}`, name: "test__counter", arguments: "{}" }] },
      { content: `The echo tool said hi ${n}.` },
    ];
    await scriptProvider(host, [...counter(1), ...counter(2)]);
    const agentId = `effect-commits-${crypto.randomUUID().slice(0, 8)}`;
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: ["test.counter"] } } }));
    const { runId, counts } = await countSecondTurn(conversation(app, agentId, "effect-commits-1"));
    expect(counts.commits).toBe(3);
    expect(invocations.filter((i) => i.runId === runId).map((i) => i.tool)).toEqual(["test.counter"]);
    expect(await eventsOf(app, runId)).toEqual(ONE_ROUND);
  });

  it("ISSUE23 crashed while a read-only tool runs (its started mark not yet written): the call is run again after the restart, with one tool.call and one tool.result, and the run completes", {
    timeout: 30_000,
  }, async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "slow", name: "test__slow_read", arguments: '{"delay_ms":1500}' }] },
      { content: "read after the restart" },
    ]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: ["test.slow_read"] } } }));
    const id = await startRun(app, "read slowly");
    await until(async () => slowReads.includes(id));
    const before = await runInDurableObject(stubOf(id), (_i, state) =>
      state.storage.sql.exec("SELECT status FROM tool_executions WHERE run_id = ?", id).toArray(),
    );
    expect(before).toEqual([{ status: "planned" }]);
    await runInDurableObject(stubOf(id), (_i, state: DurableObjectState) => {
      state.abort("simulated crash");
    }).catch(() => {});
    await runDurableObjectAlarm(stubOf(id));
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "read after the restart", tool_calls: 1 });
    expect(slowReads.filter((r) => r === id)).toHaveLength(2);
    expect(run.trace.tool_execution_results).toEqual([
      { tool: "test.slow_read", tool_call_id: "slow", summary: "test.slow_read succeeded", output: '{"read":true}', error: "" },
    ]);
    const detail = await runDetail(app, id);
    expect(validateRunLog(detail.events)).toBeNull();
    expect(detail.events.map((e: { event_type: string }) => e.event_type)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
  });
});

describe("ISSUE23 the session row kept per object (D-065)", () => {
  it("ISSUE23 a generation switch is read at once; a switch rolled back is never remembered", async () => {
    const stub = env.SESSIONS.getByName(`kept-row-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_i, state) => {
      const sql = createSql(state.storage.sql);
      const ref = { sessionKey: "agent:main:api:kept:u", agentId: "main", sessionId: "ses_a" };
      state.storage.transactionSync(() => insertSession(sql, ref, "ordinary"));
      expect(readSession(sql)).toEqual(ref);
      setCurrentGeneration(sql, "ses_b");
      expect(readSession(sql)?.sessionId).toBe("ses_b");
      expect(() =>
        state.storage.transactionSync(() => {
          setCurrentGeneration(sql, "ses_c");
          expect(readSession(createSql(state.storage.sql))?.sessionId).toBe("ses_c");
          throw new Error("rolled back");
        }),
      ).toThrow("rolled back");
      expect(readSession(sql)?.sessionId).toBe("ses_b");
      expect(readSessionType(sql)).toBe("ordinary");
    });
  });
});
