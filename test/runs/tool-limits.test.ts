/**
 * Issue 20 §3 "One turn cannot fan out": tool calls per model turn (`runs.maxToolCallsPerTurn`, default 16) and per
 * run (`runs.maxToolCallsPerRun`, default 64). Calls past a cap are answered with a `policy.denied` tool error the
 * model reads in its next request, never executed, and recorded (tool.call + tool.result, the run view).
 * End to end: POST /v1/runs → the SessionDO runs it against the scripted mock provider → GET /v1/runs, admin view.
 */
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import { TOOL_CALLS_BEGIN, TOOL_CALLS_END } from "../../src/runs/tool-markers";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { appFor, invocations, registerTestTools, runDetail, startRun, waitForRun } from "../support/runs";

registerTestTools();

const perTurnMessage = (asked: number, max = 16) =>
  `not run: this turn asked for ${asked} tool calls and at most ${max} run per turn (runs.maxToolCallsPerTurn); ask again for the ones you still need, fewer at a time`;
const perRunMessage = (max = 64) =>
  `not run: this run has used all ${max} of its tool calls (runs.maxToolCallsPerRun); answer with what you have`;
const echoCalls = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, name: "test__echo", arguments: JSON.stringify({ text: `${prefix}${i}` }) }));
const executed = (runId: string) => invocations.filter((i) => i.runId === runId).map((i) => i.toolCallId);
const eventsOf = (detail: any, type: string) => detail.events.filter((e: any) => e.event_type === type);

describe("ISSUE20-§3 one turn cannot fan out", () => {
  it("ISSUE20-§3 config defaults: runs.maxToolCallsPerTurn = 16, runs.maxToolCallsPerRun = 64", () => {
    const parsed = parseGatewayConfig({
      models: {
        providers: {
          p: {
            baseUrl: "https://p.test/v1",
            models: { m: { contextWindow: 8192, maxOutputTokens: 1024, supportsTools: true, supportsStreaming: false } },
            defaults: { model: "m" },
          },
        },
      },
    });
    expect(parsed.ok && [parsed.value.runs.maxToolCallsPerTurn, parsed.value.runs.maxToolCallsPerRun]).toEqual([16, 64]);
  });

  it("ISSUE20-§3 a turn asking for 300 tool calls executes at most 16; the other 284 get the cap error in the model's next request", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: echoCalls("c", 300) }, { content: "done" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "fan out"));
    expect(run.status).toBe("completed");
    expect(run.output).toBe("done");
    // Exactly the first 16, in order, ran; the run counts only those.
    expect(executed(run.id)).toEqual(Array.from({ length: 16 }, (_, i) => `c${i}`));
    expect(run.tool_calls).toBe(16);
    // Recorded: 300 tool.call and 300 tool.result events; 284 results are the cap error, with the limit in the gate.
    const detail = await runDetail(app, run.id);
    expect(eventsOf(detail, "tool.call")).toHaveLength(300);
    const results = eventsOf(detail, "tool.result");
    expect(results).toHaveLength(300);
    expect(results.filter((e: any) => e.payload.ok)).toHaveLength(16);
    const refused = results.filter((e: any) => !e.payload.ok);
    expect(refused).toHaveLength(284);
    expect(refused[0].payload).toMatchObject({
      tool: "test.echo",
      tool_call_id: "c16",
      ok: false,
      error: { code: "policy.denied", message: perTurnMessage(300) },
      gate: { outcome: "denied", code: "policy.denied", limit: "runs.maxToolCallsPerTurn", tool: "test.echo" },
    });
    expect(new Set(refused.map((e: any) => e.payload.error.message))).toEqual(new Set([perTurnMessage(300)]));
    // The run view shows every call, the refused ones with the cap error.
    const view = run.trace.tool_execution_results;
    expect(view).toHaveLength(300);
    expect(view.filter((r: any) => r.error === perTurnMessage(300))).toHaveLength(284);
    expect(view.find((r: any) => r.tool_call_id === "c299")).toEqual({
      tool: "test.echo",
      tool_call_id: "c299",
      summary: "test.echo not run: runs.maxToolCallsPerTurn",
      output: "",
      error: perTurnMessage(300),
    });
    // The model's next request answers all 300 ids: 16 outputs and 284 cap errors it can read.
    const second = (await bodiesSentTo(host))[1];
    const tools = second?.messages.filter((m: any) => m.role === "tool") ?? [];
    expect(tools).toHaveLength(300);
    expect(tools.filter((m: any) => JSON.parse(m.content).ok)).toHaveLength(16);
    expect(JSON.parse(tools[16].content)).toEqual({
      id: "c16",
      tool: "test.echo",
      ok: false,
      output: null,
      error: { code: "policy.denied", message: perTurnMessage(300) },
    });
  });

  it("ISSUE20-§3 the marker protocol is capped the same way: 300 marker calls → 16 executed, 284 refused", async () => {
    const host = uniqueHost("script");
    const block = JSON.stringify(Array.from({ length: 300 }, (_, i) => ({ id: `m${i}`, tool: "test.echo", args: { text: `m${i}` } })));
    await scriptProvider(host, [{ content: `On it.\n${TOOL_CALLS_BEGIN}\n${block}\n${TOOL_CALLS_END}` }, { content: "done" }]);
    const app = appFor(runConfig(host, { model: { supportsTools: false } }));
    const run = await waitForRun(app, await startRun(app, "fan out"));
    expect(run.status).toBe("completed");
    expect(executed(run.id)).toEqual(Array.from({ length: 16 }, (_, i) => `m${i}`));
    const tools = ((await bodiesSentTo(host))[1]?.messages ?? []).filter((m: any) => m.role === "tool");
    expect(tools).toHaveLength(300);
    expect(tools.filter((m: any) => JSON.parse(m.content).error?.message === perTurnMessage(300))).toHaveLength(284);
  });

  it("ISSUE20-§3 five rounds of 16 tool calls → 64 executed, the fifth round's 16 refused by runs.maxToolCallsPerRun", async () => {
    const host = uniqueHost("script");
    const rounds = [1, 2, 3, 4, 5].map((r) => ({ tool_calls: echoCalls(`r${r}-`, 16) }));
    await scriptProvider(host, [...rounds, { content: "done" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "fan out over rounds"));
    expect(run.status).toBe("completed");
    const ran = executed(run.id);
    expect(ran).toHaveLength(64);
    expect(ran.some((id) => id.startsWith("r5-"))).toBe(false);
    expect(run.tool_calls).toBe(64);
    const refused = eventsOf(await runDetail(app, run.id), "tool.result").filter((e: any) => !e.payload.ok);
    expect(refused.map((e: any) => e.payload.tool_call_id)).toEqual(Array.from({ length: 16 }, (_, i) => `r5-${i}`));
    expect(refused[0].payload.error).toEqual({ code: "policy.denied", message: perRunMessage() });
    expect(refused[0].payload.gate.limit).toBe("runs.maxToolCallsPerRun");
    // The sixth request carries the fifth round's refusals.
    const sixth = (await bodiesSentTo(host))[5];
    const last = sixth?.messages.filter((m: any) => m.role === "tool").slice(-16) ?? [];
    expect(last.map((m: any) => JSON.parse(m.content).error?.message)).toEqual(Array(16).fill(perRunMessage()));
  });

  it("ISSUE20-§3 a turn asking for more than 1024 tool calls fails its run: nothing run, nothing recorded call by call", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: echoCalls("x", 1025) }, { content: "never asked" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "fan out wide"));
    expect(run).toMatchObject({
      status: "failed",
      tool_calls: 0,
      output: "the model asked for 1025 tool calls in one turn, more than the 1024 the gateway answers; none was run",
    });
    expect(executed(run.id)).toEqual([]);
    const detail = await runDetail(app, run.id);
    expect(eventsOf(detail, "tool.call")).toEqual([]);
    expect(detail.events.at(-1).payload.code).toBe("invalid.request");
    expect(await bodiesSentTo(host)).toHaveLength(1);
  });

  it("ISSUE20-§3 a turn partly over the per-run cap: with 10 left of runs.maxToolCallsPerRun, a turn of 16 runs 10", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: echoCalls("a", 6) }, { tool_calls: echoCalls("b", 16) }, { content: "done" }]);
    const app = appFor(runConfig(host, { runs: { maxToolCallsPerRun: 16, maxToolCallsPerTurn: 16 } }));
    const run = await waitForRun(app, await startRun(app, "two rounds"));
    expect(run.status).toBe("completed");
    expect(executed(run.id)).toEqual([...echoCalls("a", 6), ...echoCalls("b", 10)].map((c) => c.id));
    const refused = run.trace.tool_execution_results.filter((r: any) => r.error !== "");
    expect(refused.map((r: any) => r.tool_call_id)).toEqual(["b10", "b11", "b12", "b13", "b14", "b15"]);
    expect(new Set(refused.map((r: any) => r.error))).toEqual(new Set([perRunMessage(16)]));
  });
});
