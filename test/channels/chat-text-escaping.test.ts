/**
 * Issue 24 §2 follow-up (D-081): text a model or a user wrote cannot mention or link in a chat. Slack reads a
 * message's `text` as mrkdwn, so every text the gateway sends to Slack is escaped (`&` `<` `>` → `&amp;` `&lt;`
 * `&gt;`, Slack's documented escaping) in the function that posts it — a reply, `message.send`, a job's report;
 * Discord's bodies carry `allowed_mentions: {parse: []}` on every path; Telegram gets no `parse_mode`, so the text is
 * shown as written. A hostile model's output goes out through each path, mocked at the network boundary.
 */
import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { slackEscape } from "../../src/channels/slack";
import { createLogger } from "../../src/observability/logger";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, appFor, call, until } from "../support/runs";

const HOSTILE = "Hi <!channel> <!here> <@U123> <#C999|general> <https://evil.example|click> & more";
const ESCAPED = "Hi &lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &lt;#C999|general&gt; &lt;https://evil.example|click&gt; &amp; more";
const label = () => crypto.randomUUID().slice(0, 8);
const postsAt = async (host: string): Promise<PlatformPost[]> => (await fetch(`https://mock.control/platform?host=${host}`)).json();
const settle = () => new Promise((r) => setTimeout(r, 300));

/** An app whose model answers `steps`, with Slack, Telegram and Discord at their own mock hosts. */
async function hostileApp(steps: object[], tools: string[] = []) {
  const provider = uniqueHost("script");
  await scriptProvider(provider, steps as never);
  const hosts = { slack: `ok-${label()}.slack.test`, tg: `ok-${label()}.telegram.test`, dc: `ok-${label()}.discord.test` };
  const config = runConfig(provider, {
    agent: { tools: { allow: tools } },
    channels: {
      slack: { enabled: true, apiBaseUrl: `https://${hosts.slack}/api` },
      telegram: { enabled: true, apiBaseUrl: `https://${hosts.tg}` },
      discord: { enabled: true, apiBaseUrl: `https://${hosts.dc}/api/v10` },
    },
  });
  return { app: appFor(config), config, ...hosts };
}

async function slackHeaders(raw: string) {
  const at = Math.floor(Date.now() / 1000);
  const secret = env.SLACK_SIGNING_SECRET as string;
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`v0:${at}:${raw}`)));
  return {
    "Content-Type": "application/json",
    "X-Slack-Request-Timestamp": String(at),
    "X-Slack-Signature": `v0=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`,
  };
}

/** Fires a job that reports to `notify` (its run answers with the app's script); resolves once its report settled. */
async function fireReport(config: ReturnType<typeof runConfig>, notify: { channel: string; target: string }): Promise<void> {
  const id = `esc-${label()}`;
  const write = JobWrite.parse({
    job_id: id,
    agent_id: "main",
    schedule: "@every 1h",
    message: "numbers",
    mode: "isolated",
    enabled: true,
    notify,
  });
  const created = await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"));
  if (!created.ok) throw new Error(JSON.stringify(created));
  const controller = createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" });
  await runSchedulerTick(env, controller, createLogger("error"), { config });
  await until(async () => {
    const row = await env.DB.prepare("SELECT notify_status FROM job_firings WHERE job_id = ?1").bind(id).first<{ notify_status: string }>();
    return row?.notify_status === "delivered";
  }, 15_000);
}

describe("ISSUE24-2 Slack: model text cannot mention or link (D-081)", { timeout: 30_000 }, () => {
  it("ISSUE24-2 slackEscape: Slack's three characters, & first (an entity the model wrote stays literal), nothing else touched", () => {
    expect(slackEscape(HOSTILE)).toBe(ESCAPED);
    expect(slackEscape("a &lt;!channel&gt; b")).toBe("a &amp;lt;!channel&amp;gt; b");
    expect(slackEscape("*bold* _it_ `code` 🙂 é")).toBe("*bold* _it_ `code` 🙂 é");
    expect(slackEscape("")).toBe("");
  });

  it("ISSUE24-2 the reply outbox: a hostile reply reaches chat.postMessage escaped, exact body", async () => {
    const h = await hostileApp([{ content: HOSTILE }]);
    const channel = `C${label().toUpperCase()}`;
    const ts = `1700000000.${String(Math.floor(Math.random() * 1e6)).padStart(6, "0")}`;
    const raw = JSON.stringify({
      type: "event_callback",
      team_id: "T0TEAM",
      event_id: `Ev${label()}`,
      event: { type: "message", channel, channel_type: "channel", user: "U0USER", text: "hello", ts },
    });
    const res = await h.app.request(
      "https://gateway.test/webhooks/slack/main",
      { method: "POST", headers: await slackHeaders(raw), body: raw },
      env,
    );
    expect(res.status).toBe(200);
    await until(async () => (await postsAt(h.slack)).length === 1);
    await settle();
    expect((await postsAt(h.slack)).map((p) => [p.method, p.body])).toEqual([
      ["chat.postMessage", { channel, text: ESCAPED, thread_ts: ts }],
    ]);
  });

  it("ISSUE24-2 message.send through Slack: the hostile text reaches chat.postMessage escaped, exact body", async () => {
    const args = { channel: "slack", to: "C0OTHER", recipient_type: "channel", text: HOSTILE };
    const h = await hostileApp(
      [{ tool_calls: [{ id: "send_1", name: "message__send", arguments: JSON.stringify(args) }] }, { content: "sent" }],
      ["message.send"],
    );
    const run = await call(h.app, "POST", "/v1/runs", { agent_id: "main", message: "tell them" });
    let approvalId = "";
    await until(async () => {
      const list = await call(h.app, "GET", "/api/admin/approvals?status=pending&limit=200", undefined, ADMIN);
      approvalId = list.body.approvals.find((a: { run_id: string }) => a.run_id === run.body.id)?.approval_id ?? "";
      return approvalId !== "";
    });
    expect((await call(h.app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN)).status).toBe(200);
    await until(async () => (await postsAt(h.slack)).length === 1);
    await settle();
    expect((await postsAt(h.slack)).map((p) => [p.method, p.body, p.answered])).toEqual([
      ["chat.postMessage", { channel: "C0OTHER", text: ESCAPED }, 200],
    ]);
  });

  it("ISSUE24-2 a job's report to Slack: the hostile output reaches chat.postMessage escaped, exact body", async () => {
    const h = await hostileApp([{ content: HOSTILE }]);
    await fireReport(h.config, { channel: "slack", target: "C0REPORTS" });
    await settle();
    expect((await postsAt(h.slack)).map((p) => [p.method, p.body])).toEqual([
      ["chat.postMessage", { channel: "C0REPORTS", text: ESCAPED }],
    ]);
  });
});

/** A signed Discord `/ask` (the key pair is made here; the app's env names its public key). */
const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const APP_ID = "1100000000000000001";
const discordEnv = {
  ...env,
  DISCORD_PUBLIC_KEY: hex(new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer)),
  DISCORD_APPLICATION_ID: APP_ID,
};
async function askDiscord(app: ReturnType<typeof appFor>, text: string): Promise<Response> {
  const snowflake = () => String(1_200_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e15)));
  const raw = JSON.stringify({
    id: snowflake(),
    application_id: APP_ID,
    type: 2,
    token: `aW50ZXJhY3Rpb246${label()}${label()}`,
    version: 1,
    channel_id: snowflake(),
    guild_id: "1300000000000000001",
    member: { user: { id: snowflake(), username: "ada", bot: false }, roles: [] },
    data: { id: "1400000000000000001", name: "ask", type: 1, options: [{ name: "message", type: 3, value: text }] },
  });
  const at = Math.floor(Date.now() / 1000);
  const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", pair.privateKey, new TextEncoder().encode(`${at}${raw}`)));
  const headers = { "Content-Type": "application/json", "X-Signature-Ed25519": hex(sig), "X-Signature-Timestamp": String(at) };
  return app.request("https://gateway.test/webhooks/discord/main", { method: "POST", headers, body: raw }, discordEnv);
}

describe("ISSUE24-2 Discord and Telegram: the same hostile text (D-081)", { timeout: 30_000 }, () => {
  it("ISSUE24-2 a reply to Discord (the interaction's follow-up): content as written, allowed_mentions {parse: []}", async () => {
    const h = await hostileApp([{ content: `@everyone ${HOSTILE} <@&42>` }]);
    expect((await askDiscord(h.app, "hello")).status).toBe(200);
    await until(async () => (await postsAt(h.dc)).length === 1);
    await settle();
    expect((await postsAt(h.dc)).map((p) => [p.method, p.body])).toEqual([
      ["followup", { content: `@everyone ${HOSTILE} <@&42>`, allowed_mentions: { parse: [] } }],
    ]);
  });

  it("ISSUE24-2 a job's report to Discord: content as written, allowed_mentions {parse: []}", async () => {
    const h = await hostileApp([{ content: `@everyone ${HOSTILE} <@&42>` }]);
    await fireReport(h.config, { channel: "discord", target: "1234567890123456789" });
    await settle();
    expect((await postsAt(h.dc)).map((p) => [p.method, p.body])).toEqual([
      ["createMessage", { content: `@everyone ${HOSTILE} <@&42>`, allowed_mentions: { parse: [] } }],
    ]);
  });

  it("ISSUE24-2 a job's report to Telegram: the text as written, no parse_mode (nothing in it is markup)", async () => {
    const h = await hostileApp([{ content: `${HOSTILE} <b>x</b> [a](https://evil.example)` }]);
    await fireReport(h.config, { channel: "telegram", target: "-1001234567890" });
    await settle();
    expect((await postsAt(h.tg)).map((p) => [p.method, p.body])).toEqual([
      ["sendMessage", { chat_id: "-1001234567890", text: `${HOSTILE} <b>x</b> [a](https://evil.example)` }],
    ]);
  });
});
