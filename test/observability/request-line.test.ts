/**
 * D-068, issue 23 "one log line per turn": a request that waits for its run in the SessionDO and gets it back ended
 * or paused prints ONE console line, its `http.request`, carrying the run's own lines (`run_lines`) exactly as the
 * SessionDO would have printed them; the SessionDO prints them itself when the caller stops waiting, so none is
 * lost and none printed twice; the R2 archive is unchanged (the run's lines on their own, the plain request line).
 *
 * The app, its SessionDOs and their loggers run in this isolate, so spying on the console sees every line; the
 * app logs as in production (console and this isolate's R2 segments), the model is scripted at the network boundary.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/http/app";
import { isolateLogSinks } from "../../src/observability/r2-logs";
import { RunLogger } from "../../src/observability/run-lines";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ALICE, readResponse, registerTestTools, runDetail, until, waitForRun } from "../support/runs";

registerTestTools();

const HOST = uniqueHost("script");
/** The production logger (no `logger` override): console and this isolate's R2 segments. */
const app = createApp({ config: runConfig(HOST, { agent: { tools: { allow: ["test.echo", "test.send"] } } }) });

type Line = Record<string, any>;
let printed: { method: "log" | "warn" | "error"; text: string }[] = [];

beforeAll(async () => {
  // The isolate's one provider check (its `startup.validation` line) happens here, before any line is counted.
  await scriptProvider(HOST, [{ content: "warm" }]);
  expect((await post("/v1/runs", { agent_id: "main", message: "warm up" }, { Prefer: "wait=30" })).status).toBe(200);
});

beforeEach(() => {
  printed = [];
  for (const method of ["log", "warn", "error"] as const)
    vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      printed.push({ method, text: args.map(String).join(" ") });
    });
});
afterEach(() => vi.restoreAllMocks());

/** The gateway's JSON lines printed so far (parsed). */
const lines = (): Line[] => printed.filter((p) => p.text.startsWith("{")).map((p) => JSON.parse(p.text) as Line);

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await app.request(
    `https://gateway.test${path}`,
    {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json", ...headers },
      body: JSON.stringify(body),
    },
    env,
  );
  return readResponse(res);
}

/** The lines under `logs/gateway/` mentioning `id`, parsed (flushed first: the app and the objects share this isolate's sinks). */
async function archived(id: string): Promise<Line[]> {
  await isolateLogSinks(env.AUDIT).sinks.flush();
  const out: Line[] = [];
  for (const o of (await env.AUDIT.list({ prefix: "logs/gateway/" })).objects)
    for (const l of ((await (await env.AUDIT.get(o.key))?.text()) ?? "").split("\n")) if (l.includes(id)) out.push(JSON.parse(l) as Line);
  return out.sort((a, b) => String(a.ts).localeCompare(String(b.ts)));
}

const requestId = () => `req_rl_${crypto.randomUUID().replaceAll("-", "")}`;

describe("ISSUE23 D-068 one console line per request that waits for its run", () => {
  it("ISSUE23 a plain /v1/chat/completions turn prints exactly one console line: http.request (200) with run_lines = [the run.turn line], equal to the run.turn line archived in R2", async () => {
    await scriptProvider(HOST, [{ content: "the answer" }]);
    const rid = requestId();
    const res = await post(
      "/v1/chat/completions",
      { model: "agent:main", messages: [{ role: "user", content: "hello" }] },
      { "X-Request-Id": rid },
    );
    expect(res.status).toBe(200);
    const runId = res.headers.get("X-Run-Id") as string;
    const all = lines();
    expect(all).toHaveLength(1);
    expect(printed.map((p) => p.method)).toEqual(["log"]);
    const [line] = all as [Line];
    expect(Object.keys(line)).toEqual(["ts", "level", "event", "request_id", "method", "route", "status", "latency_ms", "run_lines"]);
    expect(line).toMatchObject({
      level: "info",
      event: "http.request",
      request_id: rid,
      method: "POST",
      route: "/v1/chat/completions",
      status: 200,
    });
    expect(line.run_lines).toHaveLength(1);
    expect(line.run_lines[0]).toMatchObject({
      level: "info",
      event: "run.turn",
      run_id: runId,
      request_id: runId,
      agent_id: "main",
      status: "completed",
      rounds: 0,
      tool_calls: 0,
      round: 1,
      provider: "moonshot",
      model: "kimi-k1-128k",
      call: "ok",
      prompt_tokens: 10,
      completion_tokens: 5,
    });
    // The R2 archive: the run.turn line as the SessionDO wrote it (the very line the request carried), and the
    // Worker's plain request line.
    expect(await archived(runId)).toEqual(line.run_lines);
    const [request] = (await archived(rid)) as [Line];
    expect(request).toEqual({ ...line, run_lines: undefined, ts: request.ts });
    expect(Object.hasOwn(request, "run_lines")).toBe(false);
  });

  it("ISSUE23 a tool-round turn prints one line: run_lines = [run.round, run.turn], the gate outcome in the run.turn line's `gates`", async () => {
    await scriptProvider(HOST, [{ tool_calls: [{ id: "rl1", name: "test__echo", arguments: '{"text":"hi"}' }] }, { content: "echoed" }]);
    const rid = requestId();
    const res = await post(
      "/v1/chat/completions",
      { model: "agent:main", messages: [{ role: "user", content: "echo hi" }] },
      { "X-Request-Id": rid },
    );
    expect(res.status).toBe(200);
    const runId = res.headers.get("X-Run-Id") as string;
    const all = lines();
    expect(all).toHaveLength(1);
    const [line] = all as [Line];
    expect(line).toMatchObject({ level: "info", event: "http.request", request_id: rid, route: "/v1/chat/completions", status: 200 });
    expect(line.run_lines.map((l: Line) => l.event)).toEqual(["run.round", "run.turn"]);
    expect(line.run_lines[0]).toMatchObject({ run_id: runId, round: 1, call: "ok" });
    expect(line.run_lines[0].gates).toBeUndefined();
    const decision = (await runDetail(app, runId)).events.find((e: { event_type: string }) => e.event_type === "tool.result").payload.gate;
    expect(line.run_lines[1]).toMatchObject({ run_id: runId, status: "completed", rounds: 1, tool_calls: 1, round: 2 });
    expect(line.run_lines[1].gates).toEqual([
      { tool: "test.echo", channel: decision.channel, risk: "read_only", policy_id: decision.policy_id, outcome: "allowed" },
    ]);
    expect(await archived(runId)).toEqual(line.run_lines);
  });

  it("ISSUE23 POST /v1/runs with Prefer: wait prints one line; without Prefer (202) the request line alone, and the SessionDO's own run.turn line after", async () => {
    await scriptProvider(HOST, [{ content: "waited" }, { content: "not waited" }]);
    const waited = requestId();
    const res = await post("/v1/runs", { agent_id: "main", message: "wait for me" }, { Prefer: "wait=30", "X-Request-Id": waited });
    expect(res.status).toBe(200);
    const all = lines();
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({ level: "info", event: "http.request", request_id: waited, route: "/v1/runs", status: 200 });
    expect(all[0]?.run_lines).toHaveLength(1);
    expect(all[0]?.run_lines[0]).toMatchObject({ event: "run.turn", run_id: res.body.id, status: "completed" });
    expect(res.body).toMatchObject({ id: all[0]?.run_lines[0].run_id, status: "completed", output: "waited" });
    expect(Object.keys(res.body)).not.toContain("runLines"); // the lines are the request line's, not the answer's

    printed = [];
    const queued = requestId();
    const later = await post("/v1/runs", { agent_id: "main", message: "do not wait" }, { "X-Request-Id": queued });
    expect(later.status).toBe(202);
    await waitForRun(app, later.body.id);
    await until(async () => lines().some((l) => l.event === "run.turn" && l.run_id === later.body.id));
    const request = lines().filter((l) => l.request_id === queued);
    expect(request).toHaveLength(1);
    expect(request[0]).toMatchObject({ level: "info", event: "http.request", route: "/v1/runs", status: 202 });
    expect(Object.hasOwn(request[0] as Line, "run_lines")).toBe(false);
    const own = lines().filter((l) => l.run_id === later.body.id || JSON.stringify(l.run_lines ?? []).includes(later.body.id));
    expect(own.map((l) => l.event)).toEqual(["run.turn"]);
  });

  it("ISSUE23 a waiter whose wait expires before the run ends: the SessionDO prints what it held at once, then the rest — none lost, none printed twice", async () => {
    await scriptProvider(HOST, [
      { tool_calls: [{ id: "rl2", name: "test__echo", arguments: '{"text":"slow"}' }] },
      { content: "too late", delay_ms: 2_500 },
    ]);
    const rid = requestId();
    const res = await post("/v1/runs", { agent_id: "main", message: "slow one" }, { Prefer: "wait=1", "X-Request-Id": rid });
    expect(res.status).toBe(202);
    const runId = res.body.id as string;
    // Answered after 1 s: the run.round line the SessionDO held was printed when the wait expired, before the answer.
    const atAnswer = lines();
    expect(atAnswer.map((l) => l.event)).toEqual(["run.round", "http.request"]);
    expect(atAnswer[0]).toMatchObject({ run_id: runId, round: 1 });
    expect(atAnswer[1]).toMatchObject({ request_id: rid, status: 202 });
    expect(Object.hasOwn(atAnswer[1] as Line, "run_lines")).toBe(false);
    await waitForRun(app, runId);
    await until(async () => lines().some((l) => l.event === "run.turn" && l.run_id === runId));
    await new Promise((r) => setTimeout(r, 200)); // nothing more comes
    const own = lines().filter((l) => l.run_id === runId);
    expect(own.map((l) => l.event)).toEqual(["run.round", "run.turn"]);
    expect(lines().filter((l) => l.run_lines)).toEqual([]);
    expect(await archived(runId)).toEqual(own);
  });

  it("ISSUE23 a failed run: the request line's level is warn, as its run.turn line's", async () => {
    await scriptProvider(HOST, [{ status: 401 }]);
    const rid = requestId();
    const res = await post("/v1/runs", { agent_id: "main", message: "fail" }, { Prefer: "wait=30", "X-Request-Id": rid });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("failed");
    const all = lines();
    expect(all).toHaveLength(1);
    expect(printed.map((p) => p.method)).toEqual(["warn"]);
    expect(all[0]).toMatchObject({ level: "warn", event: "http.request", request_id: rid, status: 200 });
    expect(all[0]?.run_lines).toHaveLength(1);
    expect(all[0]?.run_lines[0]).toMatchObject({ level: "warn", event: "run.turn", run_id: res.body.id, status: "failed", call: "failed" });
    expect(all[0]?.run_lines[0].code).toBe("provider.unavailable");
  });

  it("ISSUE23 no message text in any console line: hashes, ids and sizes only", async () => {
    const n = crypto.getRandomValues(new Uint32Array(1))[0];
    const said = `please water the fern number ${n}`;
    const tool = `fern ${n} on the sill`;
    const answered = `watered fern ${n} just now`;
    await scriptProvider(HOST, [
      { tool_calls: [{ id: "rl3", name: "test__echo", arguments: JSON.stringify({ text: tool }) }] },
      { content: answered },
    ]);
    const res = await post("/v1/chat/completions", { model: "agent:main", messages: [{ role: "user", content: said }] });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content).toBe(answered);
    const all = lines();
    expect(all).toHaveLength(1);
    for (const p of printed) for (const text of [said, tool, answered]) expect(p.text).not.toContain(text);
    for (const l of all[0]?.run_lines ?? []) {
      expect(l.stack_sha256).toMatch(/^[0-9a-f]{64}$/);
      for (const layer of l.layers) expect(layer.sha256).toMatch(/^[0-9a-f]{64}$/);
    }
  });

  it("ISSUE23 the object is reset mid-run (ctx.abort, as a crash or an eviction under load) while its caller waits: the instance that resumes the run prints the lines the lost one held, once", async () => {
    const user = `reset-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(HOST, [
      { tool_calls: [{ id: "rl4", name: "test__echo", arguments: '{"text":"before"}' }] },
      { content: "lost with the instance", delay_ms: 1_500 },
      { content: "after the reset" },
    ]);
    const before = (await bodiesSentTo(HOST)).length;
    const waiting = post("/v1/chat/completions", { model: "agent:main", user, messages: [{ role: "user", content: "reset me" }] });
    // The second model call is in flight: the run.round line is held for the waiting caller.
    await until(async () => (await bodiesSentTo(HOST)).length === before + 2);
    expect(lines().filter((l) => l.event === "run.round")).toEqual([]);
    const stub = env.SESSIONS.getByName(`agent:main:openai:alice:dm:${user}`);
    await runInDurableObject(stub, (_instance, state) => state.abort("simulated crash")).catch(() => {});
    const failed = await waiting; // the caller's call died with the instance
    expect(failed.status).toBe(500);
    // The object again (a new instance): its constructor resumes the interrupted run.
    await env.SESSIONS.getByName(`agent:main:openai:alice:dm:${user}`).runRecord("none");
    await until(async () => lines().some((l) => l.event === "run.turn"), 15_000);
    const runLines = lines().filter((l) => l.event === "run.round" || l.event === "run.turn");
    expect(runLines.map((l) => l.event)).toEqual(["run.round", "run.turn"]);
    expect(runLines[1]).toMatchObject({ run_id: runLines[0]?.run_id, status: "completed" });
    expect(lines().filter((l) => l.run_lines)).toEqual([]);
  });

  it("ISSUE23 a run that pauses for an approval: the OpenAI caller stops there and prints one line with [run.round, tool.gate]; a Prefer: wait caller does not, and the SessionDO prints them at the pause", async () => {
    await scriptProvider(HOST, [
      { tool_calls: [{ id: "rl5", name: "test__send", arguments: "{}" }] },
      { tool_calls: [{ id: "rl6", name: "test__send", arguments: "{}" }] },
    ]);
    const rid = requestId();
    const res = await post(
      "/v1/chat/completions",
      { model: "agent:main", messages: [{ role: "user", content: "send it" }] },
      { "X-Request-Id": rid },
    );
    expect(res.status).toBe(200);
    const runId = res.headers.get("X-Run-Id") as string;
    const all = lines();
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({ level: "info", event: "http.request", request_id: rid, status: 200 });
    expect(all[0]?.run_lines.map((l: Line) => l.event)).toEqual(["run.round", "tool.gate"]);
    expect(all[0]?.run_lines[1]).toMatchObject({
      run_id: runId,
      gates: [{ tool: "test.send", risk: "side_effect", outcome: "requires_approval" }],
    });
    expect(await archived(runId)).toEqual(all[0]?.run_lines);

    printed = [];
    const queued = requestId();
    const later = await post("/v1/runs", { agent_id: "main", message: "send it too" }, { Prefer: "wait=1", "X-Request-Id": queued });
    expect(later.status).toBe(202);
    const atAnswer = lines();
    expect(atAnswer.map((l) => l.event)).toEqual(["run.round", "tool.gate", "http.request"]);
    expect(atAnswer[1]).toMatchObject({ run_id: later.body.id, gates: [{ tool: "test.send", outcome: "requires_approval" }] });
    expect(atAnswer[2]).toMatchObject({ request_id: queued, status: 202 });
    expect(Object.hasOwn(atAnswer[2] as Line, "run_lines")).toBe(false);
    expect(await archived(later.body.id)).toEqual(atAnswer.slice(0, 2));
    for (const id of [runId, later.body.id]) await post(`/v1/runs/${id}/cancel`, {});
  });
});

describe("ISSUE23 D-068 lines held for a caller are never held for good", () => {
  it("ISSUE23 lines an evicted instance held for a run that never resumes here are printed, once, when another run is held more than 5 minutes later", () => {
    const printedA: string[] = [];
    const printedB: string[] = [];
    const lost = new RunLogger(
      () => {},
      (line) => printedA.push(line),
    );
    const next = new RunLogger(
      () => {},
      (line) => printedB.push(line),
    );
    const t0 = Date.now();
    const now = vi.spyOn(Date, "now").mockReturnValue(t0);
    try {
      lost.hold("run_lost");
      lost.runLine("info", "run.round", { run_id: "run_lost", request_id: "run_lost", agent_id: "main", round: 1 });
      now.mockReturnValue(t0 + 4 * 60_000);
      next.hold("run_early");
      expect(printedB).toEqual([]); // four minutes: still held, its caller may be waiting
      now.mockReturnValue(t0 + 5 * 60_000 + 1);
      next.hold("run_late");
      expect(printedA).toEqual([]);
      expect(printedB.map((l) => JSON.parse(l))).toEqual([expect.objectContaining({ event: "run.round", run_id: "run_lost", round: 1 })]);
      next.hold("run_later");
      expect(printedB).toHaveLength(1);
    } finally {
      now.mockRestore();
      next.take("run_early");
      next.take("run_late");
      next.take("run_later");
    }
  });
});
