/**
 * Runs that survive trouble: the failure loop (S3 §2, DESIGN "Failure loop") and eviction mid-run
 * (DESIGN "SessionDO": runs survive eviction; no side effect repeated).
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { validateRunLog } from "../../src/runs/events";
import { runObjectId } from "../../src/runs/ids";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { appFor, call, invocations, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

const fail = (id: string) => ({ tool_calls: [{ id, name: "test__fail", arguments: "{}" }] });
const echo = (id: string) => ({ tool_calls: [{ id, name: "test__echo", arguments: "{}" }] });
/** Whether the request's L5 carries the error-recovery instruction (S3 §2 recovery mode). */
const inRecovery = (body: { messages: { role: string; content: string }[] }) =>
  body.messages.some((m) => m.role === "system" && m.content.includes("Error recovery mode"));

describe("failure loop (S3 §2)", () => {
  it("S3 §2 after exactly 2 consecutive failing tool results the next model turn runs in recovery mode (L5 error_recovery)", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [fail("f1"), fail("f2"), { content: "recovered" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "try it"));
    expect(run.output).toBe("recovered");
    const sent = await bodiesSentTo(host);
    expect(sent.map(inRecovery)).toEqual([false, false, true]);
    const detail = await runDetail(app, run.id);
    const requested = detail.events.filter((e: any) => e.event_type === "model.requested").map((e: any) => e.payload.recovery);
    expect(requested).toEqual([false, false, true]);
    const l5 = detail.manifests[2].manifest.stack.find((e: any) => e.layer === "L5");
    // Issue 21 §7: an ordinary session of an unconfigured agent runs in scratch mode; recovery is appended to it.
    expect(l5.id).toBe("tasks/scratch+tasks/error_recovery");
  });

  it("S3 §2 3 more failures in recovery end the run with a message asking for guidance: attempts, errors, output snippets", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [fail("f1"), fail("f2"), fail("f3"), fail("f4"), fail("f5"), { content: "never asked" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "keep trying"));
    expect(run.status).toBe("completed");
    const attempt = (n: number) => `${n}. test.fail: failed — error: tool.input_invalid: no file at missing.txt`;
    expect(run.output).toBe(
      [
        "I've tried several times and keep running into errors, so I've stopped rather than keep guessing.",
        "",
        "Recent attempts:",
        attempt(1),
        attempt(2),
        attempt(3),
        attempt(4),
        attempt(5),
        "",
        "How would you like me to proceed? For example: different inputs, a permission I'm missing, or a different approach.",
      ].join("\n"),
    );
    expect(await bodiesSentTo(host)).toHaveLength(5);
    const detail = await runDetail(app, run.id);
    expect(detail.events.at(-1)).toMatchObject({ event_type: "run.completed", payload: { needs_guidance: true } });
    expect(validateRunLog(detail.events)).toBeNull();
  });

  it("the escalation message redacts secrets from errors and outputs", async () => {
    const host = uniqueHost("script");
    const leak = { tool_calls: [{ id: "", name: "test__echo", arguments: `{"key":"${env.MOONSHOT_API_KEY}"}` }] };
    // echo succeeds (and its output carries the key); five failures then escalate with the echo among the recent attempts.
    await scriptProvider(host, [
      fail("a"),
      fail("b"),
      { ...leak, tool_calls: [{ ...leak.tool_calls[0], id: "e" }] } as never,
      fail("c"),
      fail("d"),
      fail("f"),
    ]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "leak?"));
    expect(run.output).toContain("Recent attempts:");
    expect(run.output).not.toContain(env.MOONSHOT_API_KEY);
    expect(JSON.stringify(await runDetail(app, run.id))).not.toContain(env.MOONSHOT_API_KEY);
  });

  it("recovery clears only after 2 consecutive successes, not after one", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [fail("f1"), fail("f2"), echo("s1"), echo("s2"), { content: "fine" }]);
    const app = appFor(runConfig(host));
    const run = await waitForRun(app, await startRun(app, "clear it"));
    expect(run.output).toBe("fine");
    expect((await bodiesSentTo(host)).map(inRecovery)).toEqual([false, false, true, true, false]);
  });

  it("failure-loop state lives in the SessionDO and survives eviction: the session's next run starts in recovery", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [fail("f1"), fail("f2"), { content: "stopping here" }, { content: "second run" }]);
    const app = appFor(runConfig(host));
    const room = `r-${crypto.randomUUID()}`;
    const send = async (message: string) =>
      (await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: "main", message })).body.id as string;
    const first = await send("first");
    await waitForRun(app, first);
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(first) as string));
    await evictDurableObject(stub);
    await waitForRun(app, await send("second"));
    expect((await bodiesSentTo(host)).map(inRecovery)).toEqual([false, false, true, true]);
  });
});

const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

/**
 * Kills the object abruptly, as a crash or a deploy would: in-flight work is dropped, storage stays.
 * (evictDurableObject is graceful: it waits for in-flight work.) Then fires the alarm on a fresh stub.
 */
async function crashAndWake(runId: string): Promise<void> {
  await runInDurableObject(stubOf(runId), (_instance, state: DurableObjectState) => {
    state.abort("simulated crash");
  }).catch(() => {});
  await runDurableObjectAlarm(stubOf(runId));
}

describe("eviction mid-run (nothing lost, nothing repeated)", () => {
  it("evictDurableObject during a slow model call: eviction waits for the run, which finishes; the tool ran exactly once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "once", name: "test__counter", arguments: "{}" }] },
      { content: "finished before the eviction", delay_ms: 1_000 },
    ]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "count once");
    await until(async () => (await runDetail(app, id)).events.filter((e: any) => e.event_type === "model.requested").length === 2);
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(id) as string));
    await evictDurableObject(stub);
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "finished before the eviction", tool_calls: 1 });
    expect(invocations.filter((i) => i.runId === id)).toHaveLength(1);
    expect(validateRunLog((await runDetail(app, id)).events)).toBeNull();
  });

  it("crashed during the model call after a tool ran: the run resumes from its alarm, finishes, and the tool ran exactly once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "once", name: "test__counter", arguments: "{}" }] },
      { content: "lost with the eviction", delay_ms: 1_500 },
      { content: "done after resume" },
    ]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "count once");
    await until(async () => (await runDetail(app, id)).events.filter((e: any) => e.event_type === "model.requested").length === 2);
    await crashAndWake(id);
    const run = await waitForRun(app, id);
    expect(run.status).toBe("completed");
    expect(run.output).toBe("done after resume");
    expect(invocations.filter((i) => i.runId === id && i.tool === "test.counter")).toHaveLength(1);
    expect(run.trace.tool_execution_results).toEqual([
      { tool: "test.counter", tool_call_id: "once", summary: "test.counter succeeded", output: '{"count":1}', error: "" },
    ]);
    const detail = await runDetail(app, id);
    expect(validateRunLog(detail.events)).toBeNull();
    expect(detail.events.map((e: any) => e.event_type)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "tool.result",
      "model.requested",
      "model.requested",
      "run.completed",
    ]);
  });

  it("crashed while a tool with effects runs: it is not run again; its result says the effect is unknown; the run finishes", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { tool_calls: [{ id: "slow-effect", name: "test__counter", arguments: '{"delay_ms":1500}' }] },
      { content: "carried on" },
    ]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "slow effect");
    await until(async () => invocations.some((i) => i.runId === id));
    await crashAndWake(id);
    const run = await waitForRun(app, id);
    expect(run.status).toBe("completed");
    expect(run.output).toBe("carried on");
    expect(invocations.filter((i) => i.runId === id)).toHaveLength(1);
    expect(run.trace.tool_execution_results).toEqual([
      {
        tool: "test.counter",
        tool_call_id: "slow-effect",
        summary: "test.counter failed",
        output: "",
        error: "the gateway was interrupted while this call ran; it was not repeated, so its effect is unknown",
      },
    ]);
    const detail = await runDetail(app, id);
    expect(detail.events.find((e: any) => e.event_type === "tool.result").payload.interrupted).toBe(true);
    expect(validateRunLog(detail.events)).toBeNull();
  });
});
