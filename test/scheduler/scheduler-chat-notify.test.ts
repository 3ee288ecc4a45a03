/**
 * Issue 24 §1: scheduled reports delivered to a chat. A job with `notify: {channel: "telegram" | "slack" | "discord",
 * target}` posts its run's output there through the channel's reply outbox — once, split at the platform's limit,
 * retried on 429 — and a failed run is one code and an actionable sentence. The target is checked when the job is
 * written. Telegram's sendMessage, Slack's chat.postMessage and Discord's Create Message (with DISCORD_BOT_TOKEN,
 * D-076) are mocked at the network boundary (test/support/outbound.ts).
 */
import { createScheduledController, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { postDiscordChannelMessage } from "../../src/channels/discord";
import { jobFailureText } from "../../src/channels/job-reports";
import type { GatewayConfig } from "../../src/config/schema";
import { createLogger, type Logger } from "../../src/observability/logger";
import type { ConfigRef } from "../../src/runs/spec";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, type App, appFor, call, registerTestTools, runDetail, until } from "../support/runs";

registerTestTools();

const label = () => crypto.randomUUID().slice(0, 8);
const jobId = (name: string) => `cn-${name}-${label()}`;

/** A config whose agent `reporter` answers through `provider`, with Telegram, Slack and Discord at the given mock hosts. */
function chatConfig(
  o: {
    provider?: string;
    telegram?: string;
    slack?: string;
    discord?: string;
    enabled?: boolean;
    runs?: Record<string, unknown>;
    tools?: string[];
  } = {},
) {
  const on = o.enabled ?? true;
  return runConfig(o.provider ?? uniqueHost("ok"), {
    agentId: "reporter",
    agent: { tools: { allow: o.tools ?? [] } },
    ...(o.runs ? { runs: o.runs } : {}),
    channels: {
      telegram: { enabled: on, apiBaseUrl: `https://${o.telegram ?? `ok-${label()}.telegram.test`}` },
      slack: { enabled: on, apiBaseUrl: `https://${o.slack ?? `ok-${label()}.slack.test`}/api` },
      discord: { enabled: on, apiBaseUrl: `https://${o.discord ?? `ok-${label()}.discord.test`}/api/v10` },
    },
  });
}

async function postsAt(host: string): Promise<PlatformPost[]> {
  return (await fetch(`https://mock.control/platform?host=${host}`)).json();
}

/** Creates a job reporting to `notify` at 10:00 and fires its 11:00 slot under `config`; returns the firing's run id. */
async function fire(
  id: string,
  notify: { channel: string; target: string },
  config: GatewayConfig,
  o: { logger?: Logger; configRef?: ConfigRef } = {},
): Promise<string> {
  const write = JobWrite.parse({
    job_id: id,
    agent_id: "reporter",
    schedule: "@every 1h",
    message: "daily numbers",
    mode: "isolated",
    enabled: true,
    notify,
  });
  const created = await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"));
  if (!created.ok) throw new Error(JSON.stringify(created));
  const controller = createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" });
  await runSchedulerTick(env, controller, o.logger ?? createLogger("error"), {
    config,
    ...(o.configRef ? { configRef: o.configRef } : {}),
  });
  const row = await env.DB.prepare("SELECT run_id FROM job_firings WHERE job_id = ?1").bind(id).first<{ run_id: string }>();
  if (!row?.run_id) throw new Error("not dispatched");
  return row.run_id;
}

async function notifyState(id: string) {
  return env.DB.prepare("SELECT notify_channel, notify_status, notify_attempts, notify_error FROM job_firings WHERE job_id = ?1")
    .bind(id)
    .first();
}

/** The run's audit events (the agent's audit log for today). */
async function auditOf(app: App, runId: string): Promise<{ event_type: string; actor: string; payload: Record<string, unknown> }[]> {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=reporter&date=${new Date().toISOString().slice(0, 10)}`, undefined, ADMIN);
  if (res.status !== 200) return [];
  return res.text
    .split("\n")
    .filter(Boolean)
    .map((l: string) => JSON.parse(l))
    .filter((e: { run_id?: string }) => e.run_id === runId);
}

const settled = async (id: string) => ["delivered", "failed"].includes(String((await notifyState(id))?.notify_status));

describe("ISSUE24-1 a job's report goes to the chat", () => {
  it("ISSUE24-1 telegram: a firing → exactly one sendMessage with the run's output to the configured chat", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const id = jobId("tg");
    const config = chatConfig({ telegram: tg });
    const runId = await fire(id, { channel: "telegram", target: "-1001234567890" }, config);
    await until(() => settled(id));
    await new Promise((r) => setTimeout(r, 300));
    expect(await postsAt(tg)).toEqual([
      { host: tg, method: "sendMessage", body: { chat_id: "-1001234567890", text: "pong" }, authorized: true, answered: 200 },
    ]);
    expect(await notifyState(id)).toEqual({
      notify_channel: "telegram",
      notify_status: "delivered",
      notify_attempts: 1,
      notify_error: null,
    });
    // The delivery is audited in the run's stream, with the chat's message id (the audit log ships within a window).
    const app = appFor(config);
    await until(async () => (await auditOf(app, runId)).some((e) => e.event_type === "job.notify.delivered"));
    const delivered = (await auditOf(app, runId)).filter((e) => e.event_type === "job.notify.delivered");
    expect(delivered).toHaveLength(1);
    expect(delivered[0]?.payload).toMatchObject({ job_id: id, channel: "telegram", attempt: 1, message_ids: [expect.any(String)] });
  });

  it("ISSUE24-1 slack: a firing → exactly one chat.postMessage with the run's output to the configured channel, not in a thread", async () => {
    const sl = `ok-${label()}.slack.test`;
    const id = jobId("sl");
    await fire(id, { channel: "slack", target: "C0123456789" }, chatConfig({ slack: sl }));
    await until(() => settled(id));
    await new Promise((r) => setTimeout(r, 300));
    expect(await postsAt(sl)).toEqual([
      { host: sl, method: "chat.postMessage", body: { channel: "C0123456789", text: "pong" }, authorized: true, answered: 200 },
    ]);
    expect(await notifyState(id)).toEqual({ notify_channel: "slack", notify_status: "delivered", notify_attempts: 1, notify_error: null });
  });

  it("ISSUE24-1 telegram 429: retried once — exactly two attempts, one delivered message", async () => {
    const tg = `limited-${label()}.telegram.test`;
    const id = jobId("tg429");
    await fire(id, { channel: "telegram", target: "@sophie_reports" }, chatConfig({ telegram: tg }));
    await until(() => settled(id), 15_000);
    await new Promise((r) => setTimeout(r, 300));
    const posts = await postsAt(tg);
    expect(posts.map((p) => [p.answered, p.body])).toEqual([
      [429, { chat_id: "@sophie_reports", text: "pong" }],
      [200, { chat_id: "@sophie_reports", text: "pong" }],
    ]);
    expect(await notifyState(id)).toEqual({
      notify_channel: "telegram",
      notify_status: "delivered",
      notify_attempts: 2,
      notify_error: null,
    });
  });

  it("ISSUE24-1 slack 429: retried once — exactly two attempts, one delivered message", async () => {
    const sl = `limited-${label()}.slack.test`;
    const id = jobId("sl429");
    await fire(id, { channel: "slack", target: "G0PRIVATE1" }, chatConfig({ slack: sl }));
    await until(() => settled(id), 15_000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await postsAt(sl)).map((p) => [p.answered, p.body])).toEqual([
      [429, { channel: "G0PRIVATE1", text: "pong" }],
      [200, { channel: "G0PRIVATE1", text: "pong" }],
    ]);
    expect(await notifyState(id)).toEqual({ notify_channel: "slack", notify_status: "delivered", notify_attempts: 2, notify_error: null });
  });

  it("ISSUE24-1 a failed run → one code and an actionable sentence, never the run's error text", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const id = jobId("fail");
    const config = chatConfig({ provider: uniqueHost("error500"), telegram: tg, runs: { providerAttempts: 1 } });
    const runId = await fire(id, { channel: "telegram", target: "42" }, config);
    await until(() => settled(id));
    expect((await postsAt(tg)).map((p) => p.body)).toEqual([
      {
        chat_id: "42",
        text: `[provider.unavailable] The scheduled job "${id}" did not finish. Ask an operator to check run ${runId} in the dashboard.`,
      },
    ]);
    expect(await notifyState(id)).toMatchObject({ notify_status: "delivered", notify_attempts: 1 });
  });

  it("ISSUE24-1 an escalated run (the failure loop stopped it) → one code and an actionable sentence, no tool trace", async () => {
    const provider = uniqueHost("script");
    const fail = (id: string) => ({ tool_calls: [{ id, name: "test__fail", arguments: "{}" }] });
    await scriptProvider(provider, [fail("f1"), fail("f2"), fail("f3"), fail("f4"), fail("f5"), { content: "never asked" }]);
    const sl = `ok-${label()}.slack.test`;
    const id = jobId("esc");
    const config = chatConfig({ provider, slack: sl, tools: ["test.fail"] });
    const runId = await fire(id, { channel: "slack", target: "C0123456789" }, config);
    await until(() => settled(id), 15_000);
    expect((await postsAt(sl)).map((p) => p.body)).toEqual([
      {
        channel: "C0123456789",
        text: `[internal.error] The scheduled job "${id}" stopped after repeated tool errors. Ask an operator to check run ${runId} in the dashboard and adjust the job's message or tools.`,
      },
    ]);
    // The whole escalation stays in the run view.
    const detail = await runDetail(appFor(config), runId);
    expect(detail.events.at(-1)).toMatchObject({ event_type: "run.completed", payload: { needs_guidance: true } });
    expect(detail.run.output).toContain("test.fail: failed");
  });

  it("ISSUE24-1 a long output is split at Telegram's 4096 characters, losslessly, in order", async () => {
    const provider = uniqueHost("script");
    const long = `${"a".repeat(4000)}\n${"b".repeat(4000)}\n${"c".repeat(100)}`;
    await scriptProvider(provider, [{ content: long }]);
    const tg = `ok-${label()}.telegram.test`;
    const id = jobId("tglong");
    await fire(id, { channel: "telegram", target: "42" }, chatConfig({ provider, telegram: tg }));
    await until(() => settled(id));
    const texts = (await postsAt(tg)).map((p) => p.body.text as string);
    expect(texts.map((t) => t.length)).toEqual([4001, 4001, 100]);
    expect(texts.join("")).toBe(long);
    expect(await notifyState(id)).toMatchObject({ notify_status: "delivered", notify_attempts: 3 });
  });

  it("ISSUE24-1 a long output is split at the Slack reply path's 39,000 characters", async () => {
    const provider = uniqueHost("script");
    const long = "x".repeat(50_000);
    await scriptProvider(provider, [{ content: long }]);
    const sl = `ok-${label()}.slack.test`;
    const id = jobId("sllong");
    await fire(id, { channel: "slack", target: "D0DIRECT" }, chatConfig({ provider, slack: sl }));
    await until(() => settled(id));
    const texts = (await postsAt(sl)).map((p) => p.body.text as string);
    expect(texts.map((t) => t.length)).toEqual([39_000, 11_000]);
    expect(texts.join("")).toBe(long);
  });

  it("ISSUE24-1 a channel turned off after the job was written: the run runs, nothing is posted, the firing says why", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const id = jobId("off");
    const config = chatConfig({ telegram: tg, enabled: false });
    const runId = await fire(id, { channel: "telegram", target: "42" }, config);
    await until(() => settled(id));
    expect(await notifyState(id)).toEqual({
      notify_channel: "telegram",
      notify_status: "failed",
      notify_attempts: 0,
      notify_error: "the telegram channel is not enabled (channels.telegram.enabled)",
    });
    const app = appFor(config);
    await until(async () => (await call(app, "GET", `/api/admin/runs/${runId}`, undefined, ADMIN)).body?.run.status === "completed");
    expect(await postsAt(tg)).toEqual([]);
    // Nothing was queued to send: the object holds neither outbox (D-062 creates them on first write).
    const tables = await runInDurableObject(env.SESSIONS.getByName(`agent:reporter:job:${id}:job:20300101T110000.000Z`), (_, state) =>
      state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE name IN ('notify_outbox', 'reply_outbox')")
        .toArray()
        .map((r) => r.name),
    );
    expect(tables).toEqual([]);
  });

  it("ISSUE24-1 the short texts: escalated, cancelled, and a stored error that is not a gateway code", () => {
    const run = { jobId: "daily", runId: "run_1", error: null };
    expect(jobFailureText({ ...run, status: "completed", escalated: true })).toBe(
      '[internal.error] The scheduled job "daily" stopped after repeated tool errors. Ask an operator to check run run_1 in the dashboard and adjust the job\'s message or tools.',
    );
    expect(jobFailureText({ ...run, status: "cancelled", escalated: false })).toBe(
      '[cancelled] The scheduled job "daily" was cancelled before it finished. Ask an operator to check run run_1 in the dashboard if that was not intended.',
    );
    expect(jobFailureText({ ...run, status: "failed", escalated: false, error: '{"code":"Bearer xoxb-leak","message":"secret"}' })).toBe(
      '[internal.error] The scheduled job "daily" did not finish. Ask an operator to check run run_1 in the dashboard.',
    );
    expect(jobFailureText({ ...run, status: "failed", escalated: false, error: "not json" })).toBe(
      '[internal.error] The scheduled job "daily" did not finish. Ask an operator to check run run_1 in the dashboard.',
    );
    expect(jobFailureText({ ...run, status: "completed", escalated: false })).toBeNull();
  });
});

describe("ISSUE24-1 discord: a job's report goes to a Discord channel with the bot token", () => {
  const BOT_TOKEN = env.DISCORD_BOT_TOKEN as string;
  const CHANNEL = "1234567890123456789";
  afterEach(() => vi.restoreAllMocks());

  /** Everything a Durable Object of the firing's session stores, as text. */
  async function objectStorage(id: string): Promise<string> {
    return runInDurableObject(env.SESSIONS.getByName(`agent:reporter:job:${id}:job:20300101T110000.000Z`), (_, state) => {
      const tables = state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table'")
        .toArray()
        .map((r) => String(r.name))
        .filter((t) => !t.startsWith("_cf_") && !t.startsWith("sqlite_")); // the runtime's own tables cannot be read
      return JSON.stringify(tables.map((t) => state.storage.sql.exec(`SELECT * FROM "${t}"`).toArray()));
    });
  }

  it("ISSUE24-1 discord: a firing → exactly one POST /channels/{id}/messages with the output and Bot authorization; the token is in no log, audit, event or storage", async () => {
    const lines: string[] = [];
    for (const level of ["log", "warn", "error", "info", "debug"] as const)
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });
    const dc = `ok-${label()}.discord.test`;
    const id = jobId("dc");
    const config = chatConfig({ discord: dc });
    const runId = await fire(id, { channel: "discord", target: CHANNEL }, config, { logger: createLogger("debug") });
    await until(() => settled(id));
    await new Promise((r) => setTimeout(r, 300));
    expect(await postsAt(dc)).toEqual([
      {
        host: dc,
        method: "createMessage",
        path: `/api/v10/channels/${CHANNEL}/messages`,
        body: { content: "pong", allowed_mentions: { parse: [] } },
        authorized: true,
        answered: 200,
      },
    ]);
    expect(await notifyState(id)).toEqual({
      notify_channel: "discord",
      notify_status: "delivered",
      notify_attempts: 1,
      notify_error: null,
    });
    const app = appFor(config);
    await until(async () => (await auditOf(app, runId)).some((e) => e.event_type === "job.notify.delivered"));
    const audit = await auditOf(app, runId);
    expect(audit.filter((e) => e.event_type === "job.notify.delivered").map((e) => e.payload)).toEqual([
      expect.objectContaining({ job_id: id, channel: "discord", attempt: 1, message_ids: [expect.stringMatching(/^\d+$/)] }),
    ]);
    expect(audit.find((e) => e.event_type === "reply.delivered")?.payload).toMatchObject({ channel: "discord", parts: 1 });
    // The token went in the Authorization header only: nowhere the gateway writes or shows.
    const firings = await call(app, "GET", `/api/admin/jobs/${id}/firings`, undefined, ADMIN);
    const written = [
      lines.join("\n"),
      JSON.stringify(audit),
      JSON.stringify(await runDetail(app, runId)),
      firings.text,
      await objectStorage(id),
      JSON.stringify(await postsAt(dc)),
    ];
    expect(lines.length).toBeGreaterThan(0);
    for (const text of written) expect(text).not.toContain(BOT_TOKEN);
    // What the outbox row holds: the channel and the token's origin, not the token.
    expect(await objectStorage(id)).toContain(`\\"channelId\\":\\"${CHANNEL}\\"`);
  });

  it("ISSUE24-1 discord 429 (retry_after in the body, Retry-After header): retried once — attempts [429, 200], one message", async () => {
    const dc = `limited-${label()}.discord.test`;
    const id = jobId("dc429");
    await fire(id, { channel: "discord", target: CHANNEL }, chatConfig({ discord: dc }));
    await until(() => settled(id), 15_000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await postsAt(dc)).map((p) => [p.answered, p.method, p.body])).toEqual([
      [429, "createMessage", { content: "pong", allowed_mentions: { parse: [] } }],
      [200, "createMessage", { content: "pong", allowed_mentions: { parse: [] } }],
    ]);
    expect(await notifyState(id)).toEqual({
      notify_channel: "discord",
      notify_status: "delivered",
      notify_attempts: 2,
      notify_error: null,
    });
  });

  it("ISSUE24-1 discord: a 4,100-character output is split at 2,000 — three messages 2000/2000/100, in order, losslessly", async () => {
    const provider = uniqueHost("script");
    const long = `${"a".repeat(2000)}${"b".repeat(2000)}${"c".repeat(100)}`;
    await scriptProvider(provider, [{ content: long }]);
    const dc = `ok-${label()}.discord.test`;
    const id = jobId("dclong");
    await fire(id, { channel: "discord", target: CHANNEL }, chatConfig({ provider, discord: dc }));
    await until(() => settled(id));
    const texts = (await postsAt(dc)).map((p) => p.body.content as string);
    expect(texts.map((t) => t.length)).toEqual([2000, 2000, 100]);
    expect(texts).toEqual(["a".repeat(2000), "b".repeat(2000), "c".repeat(100)]);
    expect(await notifyState(id)).toMatchObject({ notify_status: "delivered", notify_attempts: 3 });
  });

  it("ISSUE24-1 discord: a failed run → the short failure text, never the run's error", async () => {
    const dc = `ok-${label()}.discord.test`;
    const id = jobId("dcfail");
    const config = chatConfig({ provider: uniqueHost("error500"), discord: dc, runs: { providerAttempts: 1 } });
    const runId = await fire(id, { channel: "discord", target: CHANNEL }, config);
    await until(() => settled(id));
    expect((await postsAt(dc)).map((p) => p.body)).toEqual([
      {
        content: `[provider.unavailable] The scheduled job "${id}" did not finish. Ask an operator to check run ${runId} in the dashboard.`,
        allowed_mentions: { parse: [] },
      },
    ]);
    expect(await notifyState(id)).toMatchObject({ notify_status: "delivered", notify_attempts: 1 });
  });

  it("ISSUE24-1 discord: under an admin-posted config that moved Discord away from the deployment's origin, the bot token is withheld — nothing reaches the new origin", async () => {
    const dc = `ok-${label()}.discord.test`;
    const id = jobId("dcmoved");
    // An admin-posted version is in force: the token stays bound to the deployed config's origin (https://discord.com).
    const configRef: ConfigRef = { source: "admin", version: 2, sha256: "0".repeat(64) };
    await fire(id, { channel: "discord", target: CHANNEL }, chatConfig({ discord: dc }), { configRef });
    await until(() => settled(id));
    expect(await notifyState(id)).toEqual({
      notify_channel: "discord",
      notify_status: "failed",
      notify_attempts: 0,
      notify_error:
        'DISCORD_BOT_TOKEN is withheld: channel "discord" is configured at another origin than the one DISCORD_BOT_TOKEN was stored for; an admin must store DISCORD_BOT_TOKEN again for the new origin (POST /api/admin/secrets with "origin")',
    });
    expect(await postsAt(dc)).toEqual([]);
  });

  it("ISSUE24-1 discord: Create Message verdicts — 403 not retried, 429 Retry-After, 5xx retried, no answer, a bad id never sent; the token never in error text", async () => {
    const seen: { url: string; authorization: string | null }[] = [];
    const answering = (status: number, body: string, headers: Record<string, string> = {}) =>
      (async (input: RequestInfo | URL, init?: RequestInit) => {
        seen.push({ url: String(input), authorization: new Headers(init?.headers).get("authorization") });
        return new Response(body, { status, headers: { "content-type": "application/json", ...headers } });
      }) as typeof fetch;
    const send = (f: typeof fetch, channelId = CHANNEL) =>
      postDiscordChannelMessage({ fetch: f, apiBaseUrl: "https://ok.discord.test/api/v10/", botToken: "tok.EN-1", channelId, text: "hi" });
    expect(await send(answering(403, '{"message":"Missing Permissions","code":50013}'))).toEqual({
      ok: false,
      retry: false,
      status: 403,
      error: "discord 403: Missing Permissions",
    });
    expect(seen).toEqual([{ url: `https://ok.discord.test/api/v10/channels/${CHANNEL}/messages`, authorization: "Bot tok.EN-1" }]);
    expect(await send(answering(401, '{"message":"401: Unauthorized (Bot tok.EN-1)"}'))).toEqual({
      ok: false,
      retry: false,
      status: 401,
      error: "discord 401: 401: Unauthorized (Bot [redacted])",
    });
    expect(await send(answering(429, '{"message":"limited"}', { "retry-after": "7" }))).toEqual({
      ok: false,
      retry: true,
      status: 429,
      error: "discord 429: limited",
      retryAfterSeconds: 7,
    });
    expect(await send(answering(429, '{"message":"limited","retry_after":1.2}'))).toMatchObject({ retry: true, retryAfterSeconds: 2 });
    expect(await send(answering(502, "<html>bad gateway</html>"))).toEqual({ ok: false, retry: true, status: 502, error: "discord 502" });
    expect(await send(answering(200, '{"id":"1100000000000000001"}'))).toEqual({ ok: true, messageId: "1100000000000000001" });
    const thrown = (async () => {
      throw new TypeError("connection reset");
    }) as unknown as typeof fetch;
    expect(await send(thrown)).toMatchObject({ ok: false, retry: true, status: null });
    const before = seen.length;
    expect(await send(answering(200, "{}"), "../../users/@me")).toEqual({
      ok: false,
      retry: false,
      status: null,
      error: "discord: invalid channel id",
    });
    expect(seen.length).toBe(before);
  });

  it("ISSUE24-1 discord: a channel turned off after the job was written → nothing posted, the firing says why", async () => {
    const dc = `ok-${label()}.discord.test`;
    const id = jobId("dcoff");
    await fire(id, { channel: "discord", target: CHANNEL }, chatConfig({ discord: dc, enabled: false }));
    await until(() => settled(id));
    expect(await notifyState(id)).toEqual({
      notify_channel: "discord",
      notify_status: "failed",
      notify_attempts: 0,
      notify_error: "the discord channel is not enabled (channels.discord.enabled)",
    });
    expect(await postsAt(dc)).toEqual([]);
  });
});

describe("ISSUE24-1 the target is checked when the job is written", () => {
  const on = appFor(chatConfig());
  const off = appFor(chatConfig({ enabled: false }));
  const write = (id: string, notify: unknown) => ({
    job_id: id,
    agent_id: "reporter",
    schedule: "@every 1h",
    message: "report",
    mode: "isolated",
    enabled: true,
    notify,
  });
  const admin = (app: App, method: string, path: string, body?: unknown) => call(app, method, path, body, ADMIN);
  /** An admin call under the env `e` (e.g. without a bot token). */
  async function adminIn(e: object, app: App, method: string, path: string, body?: unknown) {
    const headers = { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" };
    const res = await app.request(`https://gateway.test${path}`, { method, headers, body: JSON.stringify(body) }, e);
    return { status: res.status, body: (await res.json()) as any };
  }

  /** POST and PUT of `notify` are both refused with exactly `message` (under env `e`), and nothing is stored or changed. */
  async function refusedBoth(app: App, notify: unknown, message: string, e: object = env): Promise<void> {
    const id = jobId("bad");
    const post = await adminIn(e, app, "POST", "/api/admin/jobs", write(id, notify));
    expect({ status: post.status, body: post.body }).toEqual({ status: 400, body: { error: { code: "invalid.request", message } } });
    expect((await admin(app, "GET", `/api/admin/jobs/${id}`)).status).toBe(404);
    const existing = jobId("kept");
    expect((await admin(on, "POST", "/api/admin/jobs", write(existing, { channel: "none", target: "" }))).status).toBe(201);
    const put = await adminIn(e, app, "PUT", `/api/admin/jobs/${existing}`, write(existing, notify));
    expect({ status: put.status, body: put.body }).toEqual({ status: 400, body: { error: { code: "invalid.request", message } } });
    expect((await admin(app, "GET", `/api/admin/jobs/${existing}`)).body.notify).toEqual({ channel: "none", target: "" });
  }

  it("ISSUE24-1 a channel not enabled in the config in force → 400 naming it; nothing stored", async () => {
    for (const channel of ["telegram", "slack"]) {
      await refusedBoth(
        off,
        { channel, target: channel === "telegram" ? "42" : "C0123456789" },
        `notify.channel: the ${channel} channel is not enabled in the configuration in force (channels.${channel}.enabled)`,
      );
    }
  });

  it("ISSUE24-1 a malformed Telegram target → 400 naming notify.target (8 cases); nothing stored", async () => {
    const rule = "notify.target: must be a Telegram chat id (an integer, negative for groups) or @channelusername";
    for (const target of ["", "abc", "12.5", "0", "-0", "+42", "@abc", "42 "]) await refusedBoth(on, { channel: "telegram", target }, rule);
  });

  it("ISSUE24-1 a malformed Slack target → 400 naming notify.target (7 cases); nothing stored", async () => {
    const rule = "notify.target: must be a Slack channel id (C, G or D followed by upper-case letters and digits, e.g. C0123456789)";
    for (const target of ["", "c0123456789", "X0123456789", "C01234-567", "#general", "C", "C0123456789\n"]) {
      await refusedBoth(on, { channel: "slack", target }, rule);
    }
  });

  it("ISSUE24-1 without the channel's bot token a report cannot be configured (400 naming the secret)", async () => {
    const res = await on.request(
      "https://gateway.test/api/admin/jobs",
      {
        method: "POST",
        headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" },
        body: JSON.stringify(write(jobId("notoken"), { channel: "slack", target: "C0123456789" })),
      },
      { ...env, SLACK_BOT_TOKEN: undefined },
    );
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 400,
      body: {
        error: {
          code: "invalid.request",
          message: "notify.channel: slack reports need the SLACK_BOT_TOKEN secret, which is not set on this gateway",
        },
      },
    });
  });

  it("ISSUE24-1 well-formed targets on an enabled channel are stored as given", async () => {
    const cases = [
      { channel: "telegram", target: "42" },
      { channel: "telegram", target: "-1001234567890" },
      { channel: "telegram", target: "@sophie_reports" },
      { channel: "slack", target: "C0123456789" },
      { channel: "slack", target: "G0PRIVATE1" },
      { channel: "slack", target: "D0DIRECT" },
    ];
    for (const notify of cases) {
      const res = await admin(on, "POST", "/api/admin/jobs", write(jobId("ok"), notify));
      expect({ status: res.status, notify: res.body.notify }).toEqual({ status: 201, notify });
    }
  });

  it("ISSUE24-1 discord: a channel not enabled in the config in force → 400 naming it (POST and PUT); nothing stored", async () => {
    await refusedBoth(
      off,
      { channel: "discord", target: "1234567890123456789" },
      "notify.channel: the discord channel is not enabled in the configuration in force (channels.discord.enabled)",
    );
  });

  it("ISSUE24-1 discord: without DISCORD_BOT_TOKEN a report cannot be configured (400 naming the secret, POST and PUT); nothing stored", async () => {
    await refusedBoth(
      on,
      { channel: "discord", target: "1234567890123456789" },
      "notify.channel: discord reports need the DISCORD_BOT_TOKEN secret, which is not set on this gateway",
      { ...env, DISCORD_BOT_TOKEN: undefined },
    );
  });

  it("ISSUE24-1 discord: a malformed target → 400 naming notify.target (12 cases × POST and PUT); nothing stored", async () => {
    const rule = "notify.target: must be a Discord channel id (a snowflake: 17–20 digits, e.g. 1234567890123456789)";
    const targets = [
      "",
      "general",
      "#general",
      "<#1234567890123456789>", // a channel mention, not an id
      "1234567890123456", // 16 digits
      "123456789012345678901", // 21 digits
      "01234567890123456789", // a leading zero
      "-1234567890123456789",
      "+1234567890123456789",
      "1234567890123456789 ",
      "12345678901234567a",
      "1.234567890123456e18",
    ];
    expect(targets).toHaveLength(12);
    for (const target of targets) await refusedBoth(on, { channel: "discord", target }, rule);
  });

  it("ISSUE24-1 discord: well-formed channel ids (17–20 digits) on an enabled channel are stored as given", async () => {
    for (const target of ["12345678901234567", "1234567890123456789", "18446744073709551615"]) {
      const notify = { channel: "discord", target };
      const res = await admin(on, "POST", "/api/admin/jobs", write(jobId("dc"), notify));
      expect({ status: res.status, notify: res.body.notify }).toEqual({ status: 201, notify });
    }
  });

  /** The job.updated audit payloads of job `id`, oldest first, once there are `n` (the audit log is written behind). */
  async function updates(id: string, n: number): Promise<Record<string, unknown>[]> {
    await until(async () => (await auditedUpdates(id)).length >= n);
    return auditedUpdates(id);
  }
  async function auditedUpdates(id: string): Promise<Record<string, unknown>[]> {
    const res = await admin(on, "GET", `/api/admin/audit?agent_id=reporter&date=${new Date().toISOString().slice(0, 10)}`);
    return res.text
      .split("\n")
      .filter(Boolean)
      .map((l: string) => JSON.parse(l))
      .filter(
        (e: { event_type: string; payload: { job?: { job_id?: string } } }) =>
          e.event_type === "job.updated" && e.payload.job?.job_id === id,
      )
      .map((e: { payload: Record<string, unknown> }) => e.payload);
  }
  const offMessage = (channel: string) =>
    `notify.channel: the ${channel} channel is not enabled in the configuration in force (channels.${channel}.enabled)`;
  /** A job written under `on` reporting to telegram chat 42; the tests then write it under `off`. */
  async function offJob(name: string): Promise<{ id: string; body: Record<string, unknown> }> {
    const id = jobId(name);
    const created = await admin(on, "POST", "/api/admin/jobs", write(id, { channel: "telegram", target: "42" }));
    expect(created.status).toBe(201);
    return { id, body: created.body };
  }
  const refusal = (message: string) => ({ status: 400, body: { error: { code: "invalid.request", message } } });

  it("ISSUE24-1 (D-084) channel turned off after the job was written: PUT enabled:false → 200, the job disabled, the audit says why its reports fail", async () => {
    const { id } = await offJob("disable");
    const res = await admin(off, "PUT", `/api/admin/jobs/${id}`, { ...write(id, { channel: "telegram", target: "42" }), enabled: false });
    expect({ status: res.status, enabled: res.body.enabled, next: res.body.next_run_at, notify: res.body.notify }).toEqual({
      status: 200,
      enabled: false,
      next: null,
      notify: { channel: "telegram", target: "42" },
    });
    expect((await admin(off, "GET", `/api/admin/jobs/${id}`)).body.enabled).toBe(false);
    expect((await updates(id, 1)).map((p) => p.notify_unavailable)).toEqual([offMessage("telegram")]);
  });

  it("ISSUE24-1 (D-084) the dashboard's toggle (GET the job, PUT it back with enabled flipped) works both ways with the channel off", async () => {
    const { id } = await offJob("toggle");
    const current = await admin(off, "GET", `/api/admin/jobs/${id}`);
    const disabled = await admin(off, "PUT", `/api/admin/jobs/${id}`, { ...current.body, enabled: !current.body.enabled });
    expect({ status: disabled.status, enabled: disabled.body.enabled }).toEqual({ status: 200, enabled: false });
    const again = await admin(off, "GET", `/api/admin/jobs/${id}`);
    const enabled = await admin(off, "PUT", `/api/admin/jobs/${id}`, { ...again.body, enabled: !again.body.enabled });
    expect({ status: enabled.status, enabled: enabled.body.enabled, scheduled: typeof enabled.body.next_run_at }).toEqual({
      status: 200,
      enabled: true,
      scheduled: "string",
    });
  });

  it("ISSUE24-1 (D-084) channel off: PUT changing only the schedule (or the message) → 200", async () => {
    const { id } = await offJob("resched");
    const res = await admin(off, "PUT", `/api/admin/jobs/${id}`, {
      ...write(id, { channel: "telegram", target: "42" }),
      schedule: "@every 2h",
    });
    expect({ status: res.status, schedule: res.body.schedule, notify: res.body.notify }).toEqual({
      status: 200,
      schedule: "@every 2h",
      notify: { channel: "telegram", target: "42" },
    });
    const msg = await admin(off, "PUT", `/api/admin/jobs/${id}`, {
      ...write(id, { channel: "telegram", target: "42" }),
      message: "weekly",
    });
    expect({ status: msg.status, message: msg.body.message }).toEqual({ status: 200, message: "weekly" });
  });

  it("ISSUE24-1 (D-084) channel off: PUT changing the target, or the channel to another off one → 400 naming the channel; nothing changed", async () => {
    const { id, body } = await offJob("retarget");
    const target = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "telegram", target: "43" }));
    expect({ status: target.status, body: target.body }).toEqual(refusal(offMessage("telegram")));
    const channel = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "slack", target: "C0123456789" }));
    expect({ status: channel.status, body: channel.body }).toEqual(refusal(offMessage("slack")));
    expect((await admin(off, "GET", `/api/admin/jobs/${id}`)).body).toEqual(body);
    expect(await auditedUpdates(id)).toEqual([]);
  });

  it("ISSUE24-1 (D-084) channel off: a malformed target is refused whatever is stored (400 naming notify.target)", async () => {
    const { id } = await offJob("malformed");
    const res = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "telegram", target: "42 " }));
    expect({ status: res.status, body: res.body }).toEqual(
      refusal("notify.target: must be a Telegram chat id (an integer, negative for groups) or @channelusername"),
    );
  });

  it("ISSUE24-1 (D-084) channel off: PUT switching notify to none → 200; the audit has no unavailable notify", async () => {
    const { id } = await offJob("none");
    const res = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "none", target: "" }));
    expect({ status: res.status, notify: res.body.notify }).toEqual({ status: 200, notify: { channel: "none", target: "" } });
    expect((await updates(id, 1)).map((p) => p.notify_unavailable)).toEqual([undefined]);
    // …and once moved away, the off channel cannot be set back.
    const back = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "telegram", target: "42" }));
    expect({ status: back.status, body: back.body }).toEqual(refusal(offMessage("telegram")));
  });

  it("ISSUE24-1 (D-084) channel off: POST of a new job to it → still 400; a PUT to no such job → the same 400", async () => {
    const id = jobId("new");
    const post = await admin(off, "POST", "/api/admin/jobs", write(id, { channel: "telegram", target: "42" }));
    expect({ status: post.status, body: post.body }).toEqual(refusal(offMessage("telegram")));
    const put = await admin(off, "PUT", `/api/admin/jobs/${id}`, write(id, { channel: "telegram", target: "42" }));
    expect({ status: put.status, body: put.body }).toEqual(refusal(offMessage("telegram")));
    expect((await admin(on, "GET", `/api/admin/jobs/${id}`)).status).toBe(404);
  });

  it("ISSUE24-1 (D-084) bot token removed after the job was written: PUT enabled:false → 200; a new target → 400 naming the secret", async () => {
    const id = jobId("dctoken");
    const notify = { channel: "discord", target: "1234567890123456789" };
    expect((await admin(on, "POST", "/api/admin/jobs", write(id, notify))).status).toBe(201);
    const noToken = { ...env, DISCORD_BOT_TOKEN: undefined };
    const res = await adminIn(noToken, on, "PUT", `/api/admin/jobs/${id}`, { ...write(id, notify), enabled: false });
    expect({ status: res.status, enabled: res.body.enabled }).toEqual({ status: 200, enabled: false });
    const moved = await adminIn(noToken, on, "PUT", `/api/admin/jobs/${id}`, write(id, { ...notify, target: "12345678901234567" }));
    expect({ status: moved.status, body: moved.body }).toEqual(
      refusal("notify.channel: discord reports need the DISCORD_BOT_TOKEN secret, which is not set on this gateway"),
    );
    expect((await updates(id, 1)).map((p) => p.notify_unavailable)).toEqual([
      "notify.channel: discord reports need the DISCORD_BOT_TOKEN secret, which is not set on this gateway",
    ]);
  });

  it("ISSUE24-1 (D-084) webhook secret removed after the job was written: PUT enabled:false → 200; a new URL or a POST → 400 naming the secret", async () => {
    const id = jobId("wh");
    const notify = { channel: "webhook", target: "https://hooks.example.com/jobs" };
    expect((await admin(on, "POST", "/api/admin/jobs", write(id, notify))).status).toBe(201);
    const noSecret = { ...env, SCHEDULER_WEBHOOK_SECRET: undefined };
    const message =
      "notify.channel: webhook notifications need the SCHEDULER_WEBHOOK_SECRET secret (whsec_…), which is not set on this gateway";
    const res = await adminIn(noSecret, on, "PUT", `/api/admin/jobs/${id}`, { ...write(id, notify), enabled: false });
    expect({ status: res.status, enabled: res.body.enabled }).toEqual({ status: 200, enabled: false });
    const moved = await adminIn(
      noSecret,
      on,
      "PUT",
      `/api/admin/jobs/${id}`,
      write(id, { ...notify, target: "https://hooks.example.com/b" }),
    );
    expect({ status: moved.status, body: moved.body }).toEqual(refusal(message));
    const post = await adminIn(noSecret, on, "POST", "/api/admin/jobs", write(jobId("wh2"), notify));
    expect({ status: post.status, body: post.body }).toEqual(refusal(message));
  });

  it("ISSUE24-1 the OpenAPI document shows every notify variant", async () => {
    const doc = (await admin(on, "GET", "/openapi.json")).body;
    const variants = doc.components.schemas.JobNotify.anyOf.map((v: { $ref: string }) => {
      const s = doc.components.schemas[v.$ref.replace("#/components/schemas/", "")];
      return [s.properties.channel.const ?? s.properties.channel.enum?.[0], s.required];
    });
    expect(variants).toEqual([
      ["none", ["channel", "target"]],
      ["webhook", ["channel", "target"]],
      ["telegram", ["channel", "target"]],
      ["slack", ["channel", "target"]],
      ["discord", ["channel", "target"]],
    ]);
    expect(doc.components.schemas.Job.properties.notify).toEqual({ $ref: "#/components/schemas/JobNotify" });
    expect(doc.components.schemas.JobWrite.properties.notify.allOf).toEqual([{ $ref: "#/components/schemas/JobNotify" }]);
  });
});
