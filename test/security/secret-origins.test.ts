/**
 * Issue 20 §5 "Secrets stay where they belong" — origin binding. An admin who points a provider's `baseUrl` or a
 * channel's `apiBaseUrl` at their own server must not receive the stored key or bot token there: a config version
 * that moves a credential's destination is refused (400 naming the provider or channel), and a version that is in
 * force anyway (stored before this rule) gets the credential withheld — the mock at the new origin never sees it.
 * Storing the secret again for the new origin (the admin supplies the value) makes the move work.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { channelSenders } from "../../src/channels/outbound";
import { bundledConfig } from "../../src/config/load";
import { forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { forgetStoredSecrets } from "../../src/security/stored-secrets";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import "../../src/channels/senders";
import { mockProvider, requestsTo, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, call, until, waitForRun } from "../support/runs";

/** The app as deployed: no fixed config, so it follows the versions in D1 (bundled: moonshot at api.moonshot.cn). */
const app = createApp({ logger: createLogger("error") });
const BOT_ID = "7000000001"; // TELEGRAM_BOT_TOKEN's numeric id (vitest.config.ts)
const label = () => crypto.randomUUID().slice(0, 8);

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM config_versions"), env.DB.prepare("DELETE FROM admin_secrets")]);
  forgetAdminGenerations();
  forgetConfigInForce();
  forgetStoredSecrets();
});

/** The bundled config as an admin would post it, with `edit` applied. */
function document(edit: (doc: any) => void): any {
  const doc = JSON.parse(JSON.stringify(bundledConfig()));
  edit(doc);
  return doc;
}

/** Puts `doc` in force the way a version stored before origin binding would be: past the API's refusal. */
async function forceVersion(doc: unknown): Promise<void> {
  const r = await postConfigVersion(env.DB, doc, { actor: "admin", now: new Date() });
  if (!r.ok) throw new Error(JSON.stringify(r));
  forgetAdminGenerations();
  forgetConfigInForce();
}

async function postsAt(host: string): Promise<PlatformPost[]> {
  return (await fetch(`https://mock.control/platform?host=${host}`)).json();
}

async function replyRow(sessionKey: string): Promise<{ status: string; last_error: string | null } | null> {
  return (await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) => {
    const rows = state.storage.sql.exec("SELECT status, last_error FROM reply_outbox").toArray();
    return rows[0] ?? null;
  })) as never;
}

const TG = { "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string };

function telegramUpdate(fromId: number) {
  return JSON.stringify({
    update_id: Math.floor(Math.random() * 1e9),
    message: { message_id: 5, date: 1_700_000_000, chat: { id: fromId, type: "private" }, from: { id: fromId, is_bot: false }, text: "hi" },
  });
}

const webhook = (path: string, body: string, headers: Record<string, string>) =>
  app.request(`https://gateway.test${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body }, env);

/** A config whose model is a keyless local provider on the mock (so only the channel token is in play). */
function channelDoc(o: { provider: string; telegram?: string; slack?: string }): any {
  return document((d) => {
    d.models = { default: "lm:kimi-k1-128k", providers: { lm: { ...mockProvider(o.provider), local: true } } };
    d.agents = { main: { tools: { allow: [] } } };
    if (o.telegram) d.channels.telegram = { enabled: true, apiBaseUrl: `https://${o.telegram}` };
    if (o.slack) d.channels.slack = { enabled: true, apiBaseUrl: `https://${o.slack}/api` };
  });
}

describe("ISSUE20-§5.1 a provider key is sent only to the origin it is bound to", () => {
  it("ISSUE20-§5.1 a config moving the provider to another origin is refused with 400 naming the provider and the fix; nothing is stored", async () => {
    const evil = uniqueHost("ok");
    const res = await call(
      app,
      "POST",
      "/api/admin/config",
      document((d) => (d.models.providers.moonshot.baseUrl = `https://${evil}/v1`)),
      ADMIN,
    );
    const message = `provider "moonshot" would move to https://${evil}, but MOONSHOT_API_KEY is bound to https://api.moonshot.cn; store MOONSHOT_API_KEY again for the new origin (POST /api/admin/secrets with "origin": "https://${evil}") before moving it`;
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: {
        code: "invalid.request",
        message: `config is invalid: models.providers.moonshot.baseUrl: ${message}`,
        issues: [{ path: "models.providers.moonshot.baseUrl", message }],
      },
    });
    expect((await call(app, "GET", "/api/admin/config/versions", undefined, ADMIN)).body.versions).toEqual([]);
    // A path change on the same origin is no move.
    const samePlace = document((d) => (d.models.providers.moonshot.baseUrl = "https://api.moonshot.cn/v2"));
    expect((await call(app, "POST", "/api/admin/config", samePlace, ADMIN)).status).toBe(201);
  });

  it("ISSUE20-§5.1 a version in force that moved the provider: runs fail with the key withheld, and the new origin never sees a request", async () => {
    const evil = uniqueHost("ok");
    await forceVersion(document((d) => (d.models.providers.moonshot.baseUrl = `https://${evil}/v1`)));
    const queued = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "hello" });
    expect(queued.status).toBe(202);
    const run = await waitForRun(app, queued.body.id);
    expect({ status: run.status, output: run.output }).toEqual({
      status: "failed",
      output:
        'MOONSHOT_API_KEY is withheld: provider "moonshot" is configured at another origin than the one MOONSHOT_API_KEY was stored for; an admin must store MOONSHOT_API_KEY again for the new origin (POST /api/admin/secrets with "origin")',
    });
    // The admin status page probes the provider with the key too: withheld there as well.
    const status = await call(app, "GET", "/api/admin/status", undefined, ADMIN);
    expect(status.body.provider_status).toMatchObject({ status: "failed", reason: "key_withheld" });
    expect(await requestsTo(evil)).toEqual([]);
    expect(run.output).not.toContain(evil);
  });

  it("ISSUE20-§5.1 storing the key again for the new origin makes the move work: the config is accepted and runs reach it with a key", async () => {
    const moved = uniqueHost("ok");
    const key = `sk-moved-${crypto.randomUUID()}`;
    const stored = await call(
      app,
      "POST",
      "/api/admin/secrets",
      { name: "MOONSHOT_API_KEY", value: key, origin: `https://${moved}/v1/anything` },
      ADMIN,
    );
    expect(stored.status).toBe(201);
    expect(stored.body).toEqual({
      name: "MOONSHOT_API_KEY",
      created_at: stored.body.created_at,
      updated_at: stored.body.created_at,
      origin: `https://${moved}`,
    });
    expect((await call(app, "GET", "/api/admin/secrets", undefined, ADMIN)).body.secrets).toEqual([stored.body]);
    const posted = await call(
      app,
      "POST",
      "/api/admin/config",
      document((d) => (d.models.providers.moonshot.baseUrl = `https://${moved}/v1`)),
      ADMIN,
    );
    expect(posted.status).toBe(201);
    const run = await waitForRun(app, (await call(app, "POST", "/v1/runs", { agent_id: "main", message: "hello" })).body.id);
    expect(run.status).toBe("completed");
    expect((await requestsTo(moved)).map((r) => [r.path, r.authorized])).toEqual([["/v1/chat/completions", true]]);
    // Moving it on again is refused: the stored key is bound to the origin it was stored for.
    const third = uniqueHost("ok");
    const again = await call(
      app,
      "POST",
      "/api/admin/config",
      document((d) => (d.models.providers.moonshot.baseUrl = `https://${third}/v1`)),
      ADMIN,
    );
    expect(again.status).toBe(400);
    expect(again.body.error.issues[0].message).toContain(`MOONSHOT_API_KEY is bound to https://${moved};`);
  });

  it("ISSUE20-§5.1 origin is refused for secrets never sent anywhere, and must be an http(s) URL", async () => {
    const inbound = await call(
      app,
      "POST",
      "/api/admin/secrets",
      { name: "TELEGRAM_WEBHOOK_SECRET", value: "abcdef_0123456789", origin: "https://x.test" },
      ADMIN,
    );
    expect(inbound.body).toEqual({
      error: {
        code: "invalid.request",
        message: "origin applies only to provider keys and bot tokens; TELEGRAM_WEBHOOK_SECRET is never sent to another server",
      },
    });
    const bad = await call(
      app,
      "POST",
      "/api/admin/secrets",
      { name: "MOONSHOT_API_KEY", value: "sk-x-0123456789", origin: "ftp://x.test" },
      ADMIN,
    );
    expect(bad.body).toEqual({
      error: { code: "invalid.request", message: "origin must be an http or https URL, such as https://api.moonshot.cn" },
    });
    expect((await call(app, "GET", "/api/admin/secrets", undefined, ADMIN)).body.secrets).toEqual([]);
  });
});

describe("ISSUE20-§5.1 a channel bot token is sent only to the origin it is bound to", () => {
  it("ISSUE20-§5.1 a config moving Telegram's and Slack's apiBaseUrl is refused with 400 naming each channel", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const sl = `ok-${label()}.slack.test`;
    const res = await call(app, "POST", "/api/admin/config", channelDoc({ provider: uniqueHost("ok"), telegram: tg, slack: sl }), ADMIN);
    expect(res.status).toBe(400);
    expect(res.body.error.issues).toEqual([
      {
        path: "channels.telegram.apiBaseUrl",
        message: `channel "telegram" would move to https://${tg}, but TELEGRAM_BOT_TOKEN is bound to https://api.telegram.org; store TELEGRAM_BOT_TOKEN again for the new origin (POST /api/admin/secrets with "origin": "https://${tg}") before moving it`,
      },
      {
        path: "channels.slack.apiBaseUrl",
        message: `channel "slack" would move to https://${sl}, but SLACK_BOT_TOKEN is bound to https://slack.com; store SLACK_BOT_TOKEN again for the new origin (POST /api/admin/secrets with "origin": "https://${sl}") before moving it`,
      },
    ]);
  });

  it("ISSUE24-1 DISCORD_BOT_TOKEN is bound like the other bot tokens: a config moving Discord's apiBaseUrl is refused with 400 naming it", async () => {
    const dc = `ok-${label()}.discord.test`;
    const doc = document((d) => {
      d.channels.discord = { enabled: true, apiBaseUrl: `https://${dc}/api/v10` };
    });
    const res = await call(app, "POST", "/api/admin/config", doc, ADMIN);
    expect(res.status).toBe(400);
    expect(res.body.error.issues).toEqual([
      {
        path: "channels.discord.apiBaseUrl",
        message: `channel "discord" would move to https://${dc}, but DISCORD_BOT_TOKEN is bound to https://discord.com; store DISCORD_BOT_TOKEN again for the new origin (POST /api/admin/secrets with "origin": "https://${dc}") before moving it`,
      },
    ]);
  });

  it("ISSUE20-§5.1 Telegram moved by a version in force: the reply is withheld (the mock never sees the token); stored again for that origin, replies reach it", async () => {
    const tg = `ok-${label()}.telegram.test`;
    await forceVersion(channelDoc({ provider: uniqueHost("ok"), telegram: tg }));
    const fromId = 100_000 + Math.floor(Math.random() * 1e6);
    expect((await webhook("/webhooks/telegram/main", telegramUpdate(fromId), TG)).status).toBe(200);
    const sessionKey = `agent:main:telegram:${BOT_ID}:dm:${fromId}`;
    await until(async () => (await replyRow(sessionKey))?.status === "failed");
    expect(await replyRow(sessionKey)).toEqual({
      status: "failed",
      last_error:
        'TELEGRAM_BOT_TOKEN is withheld: channel "telegram" is configured at another origin than the one TELEGRAM_BOT_TOKEN was stored for; an admin must store TELEGRAM_BOT_TOKEN again for the new origin (POST /api/admin/secrets with "origin")',
    });
    expect(await postsAt(tg)).toEqual([]);
    expect(await requestsTo(tg)).toEqual([]);

    const stored = { name: "TELEGRAM_BOT_TOKEN", value: env.TELEGRAM_BOT_TOKEN, origin: `https://${tg}` };
    expect((await call(app, "POST", "/api/admin/secrets", stored, ADMIN)).status).toBe(201);
    const next = fromId + 1;
    expect((await webhook("/webhooks/telegram/main", telegramUpdate(next), TG)).status).toBe(200);
    await until(async () => (await postsAt(tg)).length === 1);
    expect((await postsAt(tg)).map((p) => [p.method, p.authorized])).toEqual([["sendMessage", true]]);
    // And the config itself is now accepted through the API.
    expect((await call(app, "POST", "/api/admin/config", channelDoc({ provider: uniqueHost("ok"), telegram: tg }), ADMIN)).status).toBe(
      201,
    );
  });

  it("ISSUE20-§5.1 message.send: a Slack or Telegram token bound elsewhere is never sent; bound here, it is", async () => {
    const sl = `ok-${label()}.slack.test`;
    const tg = `ok-${label()}.telegram.test`;
    const msg = { to: "C1", recipientType: "channel", text: "hello", attachments: [] };
    const ctx = { agentId: "main", signal: new AbortController().signal, env };
    const deployment = { SLACK_BOT_TOKEN: "https://slack.com", TELEGRAM_BOT_TOKEN: "https://api.telegram.org" };
    await expect(
      channelSenders.get("slack")?.send(msg, { ...ctx, apiBaseUrl: `https://${sl}/api`, secretOrigins: deployment }),
    ).rejects.toThrow(/^SLACK_BOT_TOKEN is withheld: channel "slack"/);
    await expect(
      channelSenders.get("telegram")?.send(msg, { ...ctx, apiBaseUrl: `https://${tg}`, secretOrigins: deployment }),
    ).rejects.toThrow(/^TELEGRAM_BOT_TOKEN is withheld: channel "telegram"/);
    expect(await requestsTo(sl)).toEqual([]);
    expect(await requestsTo(tg)).toEqual([]);
    const here = { SLACK_BOT_TOKEN: `https://${sl}` };
    await channelSenders.get("slack")?.send(msg, { ...ctx, apiBaseUrl: `https://${sl}/api`, secretOrigins: here });
    expect((await postsAt(sl)).map((p) => [p.method, p.authorized])).toEqual([["chat.postMessage", true]]);
  });
});
