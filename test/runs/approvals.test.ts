/**
 * The tool policy and human approvals inside real runs (S1 §3.2, §3.3 Phase 1, §6 tool contract tests;
 * DESIGN "Approvals", "Capabilities"): allowlists by name, channel and risk class; a side_effect call
 * pauses its run until an admin decides; 409 / 410 / 429; argument tampering; eviction in between.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { channelSenders } from "../../src/channels/outbound";
import { validateRunLog } from "../../src/runs/events";
import { runObjectId } from "../../src/runs/ids";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, invocations, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

const send = (id: string, to = "ops@example.com") => ({
  tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to, text: "deploy finished" }) }],
});
const markersFor = (tool: string) => `<<<TOOL_CALLS_JSON>>>\n[{"id":"m1","tool":"${tool}","args":{}}]\n<<<END_TOOL_CALLS_JSON>>>`;
const types = (detail: any) => detail.events.map((e: any) => e.event_type);
const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

/** Starts a run whose model asks for test.send, and waits until it is paused for approval. */
async function pausedRun(host: string, app: ReturnType<typeof appFor>, steps: unknown[] = [send("s1"), { content: "sent it" }]) {
  await scriptProvider(host, steps as never);
  const id = await startRun(app, "tell ops");
  await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
  const detail = await runDetail(app, id);
  const requested = detail.events.find((e: any) => e.event_type === "approval.requested");
  return { id, approvalId: requested.payload.approval_id as string, requested };
}

describe("S1 §6 tool contract: allowlists (S1 §3.2)", () => {
  it("S1 §6 unallowlisted tool denied: never offered to the model, and denied if called anyway", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: markersFor("test.echo") }, { content: "ok" }]);
    const app = appFor(runConfig(host, { model: { supportsTools: false }, agent: { tools: { allow: ["test.fail"] } } }));
    const run = await waitForRun(app, await startRun(app, "echo"));
    expect(run.trace.tool_execution_results[0]).toMatchObject({ tool: "test.echo", error: 'test.echo is not allowed for agent "main"' });
    expect(invocations.filter((i) => i.runId === run.id)).toEqual([]);
    const l4 = (await bodiesSentTo(host))[0]?.messages.find((m: any) => m.role === "system" && m.content.includes("Your tool list:"));
    expect(l4.content).toContain("\n- test.fail: Always fails.\n");
    expect(l4.content).not.toContain("- test.echo");
  });

  it("S1 §3.2 a tool allowlisted for the agent but not for the channel is denied, naming the channel", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: [{ id: "e", name: "test__echo", arguments: "{}" }] }, { content: "ok" }]);
    const app = appFor(runConfig(host, { policy: { id: "chan-policy", channels: { "test.echo": ["telegram"] } } }));
    const run = await waitForRun(app, await startRun(app, "echo"));
    expect(run.trace.tool_execution_results[0].error).toBe('test.echo is not allowed on channel "http" (allowed: telegram)');
    const result = (await runDetail(app, run.id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload.gate).toEqual({
      outcome: "denied",
      code: "policy.denied",
      reason: 'test.echo is not allowed on channel "http" (allowed: telegram)',
      tool: "test.echo",
      risk: "read_only",
      channel: "http",
      policy_id: "chan-policy",
    });
  });

  it("S1 §3.2 a risk class outside tools.policy.risks is denied", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: [{ id: "c", name: "test__counter", arguments: "{}" }] }, { content: "ok" }]);
    const app = appFor(runConfig(host, { policy: { risks: ["read_only"] } }));
    const run = await waitForRun(app, await startRun(app, "count"));
    expect(run.trace.tool_execution_results[0].error).toBe("test.counter is draft_only, a risk class this gateway does not allow");
    expect(invocations.filter((i) => i.runId === run.id)).toEqual([]);
  });

  it("S1 §3.2 an allowed call records its gate decision: channel, risk, policy id, outcome", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: [{ id: "e", name: "test__echo", arguments: "{}" }] }, { content: "ok" }]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "echo");
    await waitForRun(app, id);
    const result = (await runDetail(app, id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload.gate).toEqual({
      outcome: "allowed",
      code: null,
      reason: "allowlisted",
      tool: "test.echo",
      risk: "read_only",
      channel: "http",
      policy_id: "default",
    });
  });
});

describe("S1 §6 tool contract: side effects require approval (S1 §3.3)", () => {
  it("S1 §6 side effect requires approval: the run pauses (awaiting_approval) behind an approval of its own id; approving runs it once", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId, requested } = await pausedRun(host, app);
    expect(approvalId).toMatch(/^apr_[0-9a-f]{80}$/);
    expect(approvalId).not.toContain("s1");
    expect(requested.payload).toMatchObject({
      tool: "test.send",
      tool_call_id: "s1",
      reason: "test.send is side_effect: it needs a human approval",
    });
    expect(invocations.filter((i) => i.runId === id)).toEqual([]);

    const listed = await call(app, "GET", "/api/admin/approvals?status=pending&agent_id=main&limit=200", undefined, ADMIN);
    expect(listed.body.approvals.some((a: any) => a.approval_id === approvalId && a.run_id === id && a.tool === "test.send")).toBe(true);
    const one = await call(app, "GET", `/api/admin/approvals/${approvalId}`, undefined, ADMIN);
    expect(one.body).toMatchObject({
      approval_id: approvalId,
      run_id: id,
      tool: "test.send",
      tool_call_id: "s1",
      args: { to: "ops@example.com", text: "deploy finished" },
      requester: "alice",
      channel: "http",
      status: "pending",
    });
    expect(one.body.args_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(Date.parse(one.body.expires_at) - Date.parse(one.body.created_at)).toBe(3600_000);

    const decided = await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve", reason: "expected" }, ADMIN);
    expect(decided.status).toBe(200);
    expect(decided.body).toMatchObject({ status: "approved", decided_by: "admin", decision_reason: "expected" });
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "sent it", tool_calls: 1 });
    expect(invocations.filter((i) => i.runId === id)).toHaveLength(1);
    const detail = await runDetail(app, id);
    expect(types(detail)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "approval.requested",
      "approval.decided",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    expect(validateRunLog(detail.events)).toBeNull();
    expect(detail.events[5].payload).toEqual({ approval_id: approvalId, decision: "approved", decided_by: "admin", reason: "expected" });
  });

  it("deciding twice → 409 conflict", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId } = await pausedRun(host, app);
    expect((await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN)).status).toBe(200);
    const again = await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "deny" }, ADMIN);
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: { code: "conflict", message: `approval ${approvalId} was already decided (approved)` } });
    await waitForRun(app, id);
  });

  it("a denial still yields a tool.result with policy.denied, and the run carries on", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId } = await pausedRun(host, app, [send("s1"), { content: "understood, not sent" }]);
    await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "deny", reason: "not today" }, ADMIN);
    const run = await waitForRun(app, id);
    expect(run.output).toBe("understood, not sent");
    expect(run.trace.tool_execution_results).toEqual([
      { tool: "test.send", tool_call_id: "s1", summary: "test.send failed", output: "", error: "denied by admin: not today" },
    ]);
    expect(invocations.filter((i) => i.runId === id)).toEqual([]);
    const sent = await bodiesSentTo(host);
    expect(JSON.parse(sent[1]?.messages.at(-1).content).error).toEqual({ code: "policy.denied", message: "denied by admin: not today" });
  });

  it("an expired approval → 410 on decision, the call is denied and the run carries on", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId } = await pausedRun(host, app);
    await runInDurableObject(stubOf(id), (_i, state: DurableObjectState) => {
      state.storage.sql.exec("UPDATE approvals SET expires_at = ?", new Date(Date.now() - 1000).toISOString());
    });
    const late = await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN);
    expect(late.status).toBe(410);
    expect(late.body.error.code).toBe("gone");
    const run = await waitForRun(app, id);
    expect(run.trace.tool_execution_results[0].error).toBe(`approval ${approvalId} expired before anyone decided; the call was not run`);
    expect(invocations.filter((i) => i.runId === id)).toEqual([]);
    const decided = (await runDetail(app, id)).events.find((e: any) => e.event_type === "approval.decided");
    expect(decided.payload).toEqual({ approval_id: approvalId, decision: "expired" });
  });

  it("the alarm expires an approval nobody decided, and the run resumes", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id } = await pausedRun(host, app);
    await runInDurableObject(stubOf(id), (_i, state: DurableObjectState) => {
      state.storage.sql.exec("UPDATE approvals SET expires_at = ?", new Date(Date.now() - 1000).toISOString());
    });
    await runDurableObjectAlarm(stubOf(id));
    const run = await waitForRun(app, id);
    expect(run.status).toBe("completed");
    expect(run.trace.tool_execution_results[0].error).toMatch(/expired before anyone decided/);
  });

  it("arguments changed after the approval was requested → refused, never run", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId } = await pausedRun(host, app);
    await runInDurableObject(stubOf(id), (_i, state: DurableObjectState) => {
      state.storage.sql.exec("UPDATE tool_executions SET args = ? WHERE run_id = ?", '{"to":"attacker@example.com","text":"x"}', id);
    });
    await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN);
    const run = await waitForRun(app, id);
    expect(run.trace.tool_execution_results[0].error).toBe(
      `the arguments changed after approval ${approvalId} was requested; the call was not run`,
    );
    expect(invocations.filter((i) => i.runId === id)).toEqual([]);
  });

  it("eviction between the request and the decision loses nothing: approve, and the run completes", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id, approvalId } = await pausedRun(host, app);
    await evictDurableObject(stubOf(id));
    expect((await call(app, "GET", `/api/admin/approvals/${approvalId}`, undefined, ADMIN)).body.status).toBe("pending");
    await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN);
    await evictDurableObject(stubOf(id));
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "sent it" });
    expect(invocations.filter((i) => i.runId === id)).toHaveLength(1);
  });

  it("cancelling a run that waits for an approval ends it at once", async () => {
    const host = uniqueHost("script");
    const app = appFor(runConfig(host));
    const { id } = await pausedRun(host, app);
    const res = await call(app, "POST", `/v1/runs/${id}/cancel`);
    expect(res.body).toEqual({ id, status: "cancelled" });
    expect(types(await runDetail(app, id)).at(-1)).toBe("run.cancelled");
  });

  it("too many pending approvals for the agent → new runs answer 429 rate.limited", async () => {
    const host = uniqueHost("script");
    const agentId = `appr-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [send("s1")]);
    const app = appFor(runConfig(host, { agentId, policy: { approvals: { ttlSeconds: 3600, maxPendingPerAgent: 1 } } }));
    const first = await startRun(app, "one", agentId);
    await until(async () => (await call(app, "GET", `/v1/runs/${first}`)).body.status === "awaiting_approval");
    await until(
      async () =>
        (await call(app, "GET", `/api/admin/approvals?status=pending&agent_id=${agentId}`, undefined, ADMIN)).body.approvals.length === 1,
    );
    const refused = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "two" });
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      error: {
        code: "rate.limited",
        message: `agent "${agentId}" has 1 tool calls waiting for approval (limit 1); decide them at /api/admin/approvals first`,
        retry_after_seconds: 60,
      },
    });
  });

  it("unknown approval ids → 404; malformed → 400", async () => {
    const app = appFor(runConfig(uniqueHost("script")));
    const bogus = `apr_${"a".repeat(80)}`;
    expect((await call(app, "POST", `/api/admin/approvals/${bogus}`, { decision: "approve" }, ADMIN)).status).toBe(404);
    expect((await call(app, "POST", "/api/admin/approvals/apr_1", { decision: "approve" }, ADMIN)).status).toBe(400);
    expect((await call(app, "GET", "/api/admin/approvals")).status).toBe(403);
  });
});

describe("S1 §6 tool contract: the honeypot exception (S1 §3.3 Phase 2)", () => {
  const delivered: { to: string; text: string }[] = [];
  if (!channelSenders.get("honeychan"))
    channelSenders.register("honeychan", {
      send: async (msg) => {
        delivered.push({ to: msg.to, text: msg.text });
        return { messageId: `m${delivered.length}` };
      },
    });
  const honeypot = {
    templates: { ready: "Your report {name} is ready." },
    recipientTypes: ["user"],
    perRecipientPerHour: 1,
    perAgentPerHour: 10,
  };
  const sendCall = (id: string, args: Record<string, unknown>) => ({
    tool_calls: [{ id, name: "message__send", arguments: JSON.stringify({ channel: "honeychan", recipient_type: "user", ...args }) }],
  });
  const config = (host: string, agentId: string) =>
    runConfig(host, { agentId, agent: { tools: { allow: ["message.send"] } }, policy: { honeypot } });

  it("S1 §6 honeypot exception respects templates + rate limits: an allowlisted template to an allowlisted recipient type, no links or attachments, goes without approval", async () => {
    const host = uniqueHost("script");
    const agentId = `honey-${crypto.randomUUID().slice(0, 8)}`;
    const to = `u-${crypto.randomUUID().slice(0, 6)}`;
    await scriptProvider(host, [sendCall("h1", { to, template: "ready", vars: { name: "Q3" } }), { content: "sent" }]);
    const app = appFor(config(host, agentId));
    const run = await waitForRun(app, await startRun(app, "tell them", agentId));
    expect(run.status).toBe("completed");
    expect(run.trace.tool_execution_results[0]).toMatchObject({ tool: "message.send", error: "" });
    expect(delivered).toContainEqual({ to, text: "Your report Q3 is ready." });
    const result = (await runDetail(app, run.id)).events.find((e: any) => e.event_type === "tool.result");
    expect(result.payload.gate).toMatchObject({ outcome: "allowed", reason: "honeypot exception (S1 §3.3 Phase 2)", risk: "side_effect" });
  });

  it("a link in the template vars, free text, or the per-recipient rate limit falls back to approval", async () => {
    for (const [args, why] of [
      [{ template: "ready", vars: { name: "see example[.]com" } }, "the message contains a link"],
      [{ text: "hello" }, "the message has no template; free text is never sent without approval"],
    ] as const) {
      const host = uniqueHost("script");
      const agentId = `honey-${crypto.randomUUID().slice(0, 8)}`;
      await scriptProvider(host, [sendCall("h1", { to: "someone", ...args })]);
      const app = appFor(config(host, agentId));
      const id = await startRun(app, "tell them", agentId);
      await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
      const requested = (await runDetail(app, id)).events.find((e: any) => e.event_type === "approval.requested");
      expect(requested.payload.reason).toBe(`message.send is side_effect: it needs a human approval (honeypot exception not met: ${why})`);
    }
    // Rate limit: the second send to the same recipient within the hour needs approval.
    const host = uniqueHost("script");
    const agentId = `honey-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [
      sendCall("a", { to: "repeat", template: "ready", vars: { name: "1" } }),
      sendCall("b", { to: "repeat", template: "ready", vars: { name: "2" } }),
    ]);
    const app = appFor(config(host, agentId));
    const id = await startRun(app, "twice", agentId);
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    const requested = (await runDetail(app, id)).events.find((e: any) => e.event_type === "approval.requested");
    expect(requested.payload.reason).toBe(
      "message.send is side_effect: it needs a human approval (honeypot exception not met: rate limit: 1 send to this recipient in the last hour)",
    );
  });
});

describe("capabilities (S4 §1.1): the model requests, only admins grant", () => {
  it("a NOTES request_permission shows as pending; an admin grants and revokes it over /api/admin", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [
      { content: 'Need the network.\n<<<NOTES_JSON>>>\n{"actions":["request_permission:net:example.com"]}\n<<<END_NOTES_JSON>>>' },
    ]);
    const app = appFor(runConfig(host));
    const res = await call(app, "POST", "/v1/chat/messages", {
      user_id: "u",
      room_id: `r-${crypto.randomUUID()}`,
      agent_id: "main",
      message: "fetch it",
    });
    await waitForRun(app, res.body.id);
    const path = `/api/admin/sessions/${res.body.session_id}/capabilities`;
    expect((await call(app, "GET", path, undefined, ADMIN)).body).toEqual({
      session_id: res.body.session_id,
      granted: [],
      pending: ["net:example.com"],
    });
    expect((await call(app, "POST", path, { grant: "net:example.com" }, ADMIN)).body).toMatchObject({
      granted: ["net:example.com"],
      pending: [],
    });
    expect((await call(app, "POST", path, { revoke: "net:example.com" }, ADMIN)).body).toMatchObject({ granted: [], pending: [] });
    expect((await call(app, "POST", path, { grant: "not a cap!" }, ADMIN)).status).toBe(400);
    expect((await call(app, "GET", path)).status).toBe(403);
  });
});
