/**
 * Issue 20 §4 "Limits that one caller cannot break or use against another" (first two bullets):
 * - the honeypot rate limit is reserved atomically before a send goes out, so concurrent sends from many sessions
 *   deliver exactly the limit and the rest wait for approval; a failed delivery keeps or gives back its place;
 * - pending approvals and tokens per day are limited per caller as well as per agent, atomically, so one caller at
 *   its limit is refused while another caller of the same agent is still served.
 * End to end through the HTTP surface, real SessionDOs and D1; provider and chat platform mocked at the network.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { bodiesSentTo, requestsTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, BOB, call, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";

registerTestTools();

const label = () => crypto.randomUUID().slice(0, 8);
const statusOf = async (app: ReturnType<typeof appFor>, id: string, token = ALICE) =>
  (await call(app, "GET", `/v1/runs/${id}`, undefined, token)).body.status as string;
const settled = (s: string) => s === "completed" || s === "failed" || s === "awaiting_approval";
const platformPosts = async (host: string): Promise<any[]> =>
  (await fetch(`https://mock.control/platform?host=${encodeURIComponent(host)}`)).json();
const pendingInD1 = async (agentId: string, caller?: string) =>
  (
    await env.DB.prepare("SELECT COUNT(*) AS n FROM approvals WHERE agent_id = ?1 AND status = 'pending' AND (?2 IS NULL OR caller = ?2)")
      .bind(agentId, caller ?? null)
      .first<{ n: number }>()
  )?.n;
const testSend = (id: string) => ({
  tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: "deploy finished" }) }],
});

describe("ISSUE20-§4 the honeypot rate limit is reserved before the send", () => {
  const honeypot = {
    templates: { ready: "Your report {name} is ready." },
    recipientTypes: ["user"],
    perRecipientPerHour: 3,
    perAgentPerHour: 30,
  };
  const configFor = (host: string, agentId: string, telegramHost: string) =>
    runConfig(host, {
      agentId,
      agent: { tools: { allow: ["message.send"] } },
      policy: { honeypot, approvals: { ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: 20 } },
      channels: { telegram: { enabled: true, apiBaseUrl: `https://${telegramHost}` } },
    });
  const templatedSend = (id: string, to: string) => ({
    tool_calls: [
      {
        id,
        name: "message__send",
        arguments: JSON.stringify({ channel: "telegram", to, recipient_type: "user", template: "ready", vars: { name: id } }),
      },
    ],
  });

  it("ISSUE20-§4 8 concurrent templated sends to one recipient from 8 sessions → exactly 3 delivered, 5 wait for approval", async () => {
    const agentId = `honey-${label()}`;
    const telegramHost = `ok-${label()}.telegram.test`;
    const to = "4242";
    const apps = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const host = uniqueHost("script");
        await scriptProvider(host, [templatedSend(`h${i}`, to), { content: "sent" }]);
        return appFor(configFor(host, agentId, telegramHost));
      }),
    );
    // Eight sessions (POST /v1/runs gives each run its own), started together.
    const ids = await Promise.all(apps.map((app) => startRun(app, "tell them", agentId)));
    await until(async () => (await Promise.all(ids.map((id, i) => statusOf(apps[i] as never, id)))).every(settled), 20_000);
    const statuses = await Promise.all(ids.map((id, i) => statusOf(apps[i] as never, id)));

    expect(await platformPosts(telegramHost)).toHaveLength(3);
    expect(statuses.filter((s) => s === "completed")).toHaveLength(3);
    expect(statuses.filter((s) => s === "awaiting_approval")).toHaveLength(5);
    // Each waiting run has its approval row, and says why the exception did not apply.
    const listed = await call(apps[0] as never, "GET", `/api/admin/approvals?status=pending&agent_id=${agentId}`, undefined, ADMIN);
    expect(listed.body.approvals).toHaveLength(5);
    expect(new Set(listed.body.approvals.map((a: any) => a.run_id))).toEqual(
      new Set(ids.filter((_, i) => statuses[i] === "awaiting_approval")),
    );
    for (const [i, id] of ids.entries()) {
      if (statuses[i] !== "awaiting_approval") continue;
      const requested = (await runDetail(apps[i] as never, id)).events.find((e: any) => e.event_type === "approval.requested");
      expect(requested.payload.reason).toBe(
        "message.send is side_effect: it needs a human approval (honeypot exception not met: rate limit: 3 sends to this recipient in the last hour)",
      );
    }
    // The three deliveries are the three places taken: counted once each, not again after the send.
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM honeypot_sends WHERE agent_id = ?1").bind(agentId).first<{ n: number }>();
    expect(rows?.n).toBe(3);
  }, 30_000);

  it("ISSUE20-§4 a delivery that may have happened (platform 500) keeps its place: the next send to that recipient waits for approval", async () => {
    const agentId = `honey-${label()}`;
    const down = `down-${label()}.telegram.test`;
    const host = uniqueHost("script");
    await scriptProvider(host, [templatedSend("f1", "77"), { content: "failed" }, templatedSend("f2", "77")]);
    const app = appFor(
      runConfig(host, {
        agentId,
        agent: { tools: { allow: ["message.send"] } },
        policy: { honeypot: { ...honeypot, perRecipientPerHour: 1 } },
        channels: { telegram: { enabled: true, apiBaseUrl: `https://${down}` } },
      }),
    );
    const first = await waitForRun(app, await startRun(app, "tell them", agentId));
    expect(first.trace.tool_execution_results[0].error).toBe(
      'the "telegram" adapter could not send the message; it may not have been delivered, so check before sending again',
    );
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM honeypot_sends WHERE agent_id = ?1").bind(agentId).first<{ n: number }>();
    expect(rows?.n).toBe(1);
    const second = await startRun(app, "again", agentId);
    await until(async () => (await statusOf(app, second)) === "awaiting_approval");
    const requested = (await runDetail(app, second)).events.find((e: any) => e.event_type === "approval.requested");
    expect(requested.payload.reason).toBe(
      "message.send is side_effect: it needs a human approval (honeypot exception not met: rate limit: 1 send to this recipient in the last hour)",
    );
  });

  it("ISSUE20-§4 a send that certainly did not go out (no adapter for the channel) gives its place back", async () => {
    const agentId = `honey-${label()}`;
    const host = uniqueHost("script");
    const noAdapter = {
      tool_calls: [
        {
          id: "n1",
          name: "message__send",
          arguments: JSON.stringify({ channel: "nochan", to: "9", recipient_type: "user", template: "ready", vars: { name: "x" } }),
        },
      ],
    };
    await scriptProvider(host, [noAdapter, { content: "no" }]);
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: ["message.send"] } }, policy: { honeypot } }));
    const run = await waitForRun(app, await startRun(app, "tell them", agentId));
    expect(run.trace.tool_execution_results[0].error).toBe('no adapter for channel "nochan" is configured, so nothing was sent');
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM honeypot_sends WHERE agent_id = ?1").bind(agentId).first<{ n: number }>();
    expect(rows?.n).toBe(0);
  });
});

describe("ISSUE20-§4 pending approvals are limited per caller, atomically", () => {
  const configFor = (host: string, agentId: string, perCaller: number, perAgent = 20) =>
    runConfig(host, { agentId, policy: { approvals: { ttlSeconds: 3600, maxPendingPerAgent: perAgent, maxPendingPerCaller: perCaller } } });

  it("ISSUE20-§4 caller alice at its pending-approval limit gets 429 rate.limited; bob is still served on the same agent", async () => {
    const host = uniqueHost("script");
    const agentId = `appr-${label()}`;
    await scriptProvider(host, [testSend("a1"), testSend("a2"), { content: "hello bob" }]);
    const app = appFor(configFor(host, agentId, 2));
    for (const message of ["one", "two"]) {
      const id = await startRun(app, message, agentId);
      await until(async () => (await statusOf(app, id)) === "awaiting_approval");
    }
    expect(await pendingInD1(agentId, "api:alice")).toBe(2);
    const refused = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "three" });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("Retry-After")).toBe("60");
    expect(refused.body).toEqual({
      error: {
        code: "rate.limited",
        message: `caller "api:alice" has 2 tool calls waiting for approval on agent "${agentId}" (limit 2 per caller); wait until an admin decides them`,
        retry_after_seconds: 60,
      },
    });
    // The chat route refuses alice the same way.
    const chat = await call(app, "POST", "/v1/chat/messages", { agent_id: agentId, room_id: "r", user_id: "u", message: "hi" });
    expect(chat.status).toBe(429);
    expect(chat.body).toEqual(refused.body);
    // Bob, same agent, is served.
    const bobs = await call(app, "POST", "/v1/runs", { agent_id: agentId, message: "hi" }, BOB);
    expect(bobs.status).toBe(202);
    const run = await waitForRun(app, bobs.body.id, BOB);
    expect(run).toMatchObject({ status: "completed", output: "hello bob" });
  });

  it("ISSUE20-§4 12 concurrent side-effect runs by one caller (limit 3) never leave more than 3 pending; the rest are refused as a tool error", async () => {
    const agentId = `appr-${label()}`;
    const apps = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const host = uniqueHost("script");
        await scriptProvider(host, [testSend(`s${i}`), { content: "could not send" }]);
        return appFor(configFor(host, agentId, 3));
      }),
    );
    const answers = await Promise.all(apps.map((app) => call(app, "POST", "/v1/runs", { agent_id: agentId, message: "send" })));
    // The early check may already refuse some (429); every run it let through is held to the limit when it asks.
    expect(answers.every((a) => a.status === 202 || a.status === 429)).toBe(true);
    const accepted = answers.flatMap((a, i) => (a.status === 202 ? [{ app: apps[i] as never, id: a.body.id as string }] : []));
    await until(async () => (await Promise.all(accepted.map((r) => statusOf(r.app, r.id)))).every(settled), 20_000);
    const statuses = await Promise.all(accepted.map((r) => statusOf(r.app, r.id)));
    expect(statuses.filter((s) => s === "awaiting_approval")).toHaveLength(3);
    expect(await pendingInD1(agentId)).toBe(3);
    for (const [i, r] of accepted.entries()) {
      if (statuses[i] !== "completed") continue;
      const run = await waitForRun(r.app, r.id);
      const why =
        'not run: caller "api:alice" already has 3 tool calls waiting for approval (tools.policy.approvals.maxPendingPerCaller = 3); try again once they are decided';
      expect(run.trace.tool_execution_results[0].error).toBe(why);
      const result = (await runDetail(r.app, r.id)).events.find((e: any) => e.event_type === "tool.result");
      expect(result.payload.gate).toMatchObject({ outcome: "denied", code: "policy.denied", reason: why, tool: "test.send" });
    }
    expect(statuses.filter((s) => s === "completed")).toHaveLength(accepted.length - 3);
  }, 30_000);

  it("ISSUE20-§4 the agent's own pending limit holds under concurrency too: alice and bob, 6 each at once, agent limit 4 → 4 pending", async () => {
    const agentId = `appr-${label()}`;
    const apps = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const host = uniqueHost("script");
        await scriptProvider(host, [testSend(`s${i}`), { content: "could not send" }]);
        return appFor(configFor(host, agentId, 10, 4));
      }),
    );
    const tokenOf = (i: number) => (i % 2 === 0 ? ALICE : BOB);
    const answers = await Promise.all(
      apps.map((app, i) => call(app, "POST", "/v1/runs", { agent_id: agentId, message: "send" }, tokenOf(i))),
    );
    const accepted = answers.flatMap((a, i) =>
      a.status === 202 ? [{ app: apps[i] as never, id: a.body.id as string, token: tokenOf(i) }] : [],
    );
    await until(async () => (await Promise.all(accepted.map((r) => statusOf(r.app, r.id, r.token)))).every(settled), 20_000);
    const statuses = await Promise.all(accepted.map((r) => statusOf(r.app, r.id, r.token)));
    expect(statuses.filter((s) => s === "awaiting_approval")).toHaveLength(4);
    expect(await pendingInD1(agentId)).toBe(4);
  }, 30_000);
});

describe("ISSUE20-§4 a channel message's caller is its sender", () => {
  it("ISSUE20-§4 Telegram: sender Ada at her pending limit (1) is refused in the group too; Bob in the same group still gets his approval", async () => {
    const host = uniqueHost("script");
    const agentId = `chan-${label()}`;
    const telegramHost = `ok-${label()}.telegram.test`;
    await scriptProvider(host, [testSend("d1"), testSend("g1"), { content: "could not send" }, testSend("g2")]);
    const app = appFor(
      runConfig(host, {
        agentId,
        agent: { tools: { allow: ["test.send"] } },
        policy: { approvals: { ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: 1 } },
        channels: { telegram: { enabled: true, apiBaseUrl: `https://${telegramHost}` } },
      }),
    );
    const update = (fromId: number, chat: { id: number; type: string }) =>
      JSON.stringify({
        update_id: Math.floor(Math.random() * 1e9),
        message: { message_id: 7, date: 1_700_000_000, chat, from: { id: fromId, is_bot: false, first_name: "x" }, text: "send it" },
      });
    const post = (body: string) =>
      app.request(
        `https://gateway.test/webhooks/telegram/${agentId}`,
        {
          method: "POST",
          headers: { "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string },
          body,
        },
        env,
      );
    const ada = "telegram:7000000001:1";
    const bob = "telegram:7000000001:2";
    // Ada in a private chat: her approval is pending.
    expect((await post(update(1, { id: 1, type: "private" }))).status).toBe(200);
    await until(async () => (await pendingInD1(agentId, ada)) === 1);
    // Ada in the group: her call finds no place (her limit, not the group's), so the run answers without it.
    expect((await post(update(1, { id: -100777, type: "group" }))).status).toBe(200);
    await until(async () => (await platformPosts(telegramHost)).some((p) => p.body.text === "could not send"));
    expect(await pendingInD1(agentId, ada)).toBe(1);
    // Bob in the same group: his approval is requested.
    expect((await post(update(2, { id: -100777, type: "group" }))).status).toBe(200);
    await until(async () => (await pendingInD1(agentId, bob)) === 1);
    expect(await pendingInD1(agentId)).toBe(2);
  }, 30_000);
});

describe("ISSUE20-§4 tokensPerDay is limited per caller too", () => {
  it("ISSUE20-§4 caller alice out of tokensPerCallerPerDay → over_budget before the network (429 on chat completions); bob is served", async () => {
    const host = uniqueHost("script");
    const agentId = `budget-${label()}`;
    await scriptProvider(host, [
      { content: "first", usage: { prompt_tokens: 2500, completion_tokens: 500, total_tokens: 3000 } },
      { content: "hello bob", usage: { prompt_tokens: 2500, completion_tokens: 500, total_tokens: 3000 } },
    ]);
    const app = appFor(runConfig(host, { agentId, agent: { budget: { tokensPerDay: 100_000, tokensPerCallerPerDay: 6000 } } }));
    const first = await waitForRun(app, await startRun(app, "one", agentId));
    expect(first.status).toBe("completed");
    const second = await waitForRun(app, await startRun(app, "two", agentId));
    expect(second.status).toBe("failed");
    const day = new Date().toISOString().slice(0, 10);
    expect(second.output).toMatch(
      new RegExp(
        `^caller "api:alice" of agent "${agentId}" has used 3000 of its 6000 tokens for ${day} \\(UTC\\); this call needs up to \\d+$`,
      ),
    );
    expect((await runDetail(app, second.id)).events.at(-1).payload.code).toBe("over_budget");
    // Through the OpenAI-compatible route the same refusal is a 429 over_budget.
    const completion = await call(app, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      messages: [{ role: "user", content: "three" }],
    });
    expect(completion.status).toBe(429);
    expect(completion.body).toEqual({
      error: {
        message: expect.stringMatching(
          new RegExp(
            `^run run_[0-9a-f]{80} failed: caller "api:alice" of agent "${agentId}" has used 3000 of its 6000 tokens for ${day} \\(UTC\\); this call needs up to \\d+$`,
          ),
        ),
        type: "insufficient_quota",
        code: "over_budget",
      },
    });
    // Bob, same agent, same day: served.
    const bobs = await waitForRun(app, await startRun(app, "hi", agentId, BOB), BOB);
    expect(bobs).toMatchObject({ status: "completed", output: "hello bob" });
    expect(await bodiesSentTo(host)).toHaveLength(2);
    expect(await requestsTo(host)).toHaveLength(2);
    const usage = await env.DB.prepare("SELECT caller, tokens FROM caller_token_usage WHERE agent_id = ?1 ORDER BY caller")
      .bind(agentId)
      .all<{ caller: string; tokens: number }>();
    expect(usage.results).toEqual([
      { caller: "api:alice", tokens: 3000 },
      { caller: "api:bob", tokens: 3000 },
    ]);
    const agentRow = await env.DB.prepare("SELECT tokens FROM agent_token_usage WHERE agent_id = ?1")
      .bind(agentId)
      .first<{ tokens: number }>();
    expect(agentRow?.tokens).toBe(6000);
  });

  it("ISSUE20-§4 concurrent runs of one caller never spend past tokensPerCallerPerDay: 6 at once, room for 2", async () => {
    const agentId = `budget-${label()}`;
    const apps = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const host = uniqueHost("script");
        // Each run that gets through spends 6000: two use up the caller's 12000 in any interleaving.
        await scriptProvider(host, [{ content: "ok", usage: { prompt_tokens: 5000, completion_tokens: 1000, total_tokens: 6000 } }]);
        return { host, app: appFor(runConfig(host, { agentId, agent: { budget: { tokensPerCallerPerDay: 12_000 } } })) };
      }),
    );
    const ids = await Promise.all(apps.map((a) => startRun(a.app, "go", agentId)));
    const runs = await Promise.all(ids.map((id, i) => waitForRun(apps[i]?.app as never, id)));
    // Each call first reserves its worst case (about 5.5k: the prompt estimate + 4096 output), so a third never fits.
    const completed = runs.filter((r) => r.status === "completed").length;
    expect(completed).toBe(2);
    const sent = (await Promise.all(apps.map((a) => requestsTo(a.host)))).flat();
    expect(sent).toHaveLength(2);
  }, 30_000);
});
