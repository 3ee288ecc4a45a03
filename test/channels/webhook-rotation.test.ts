/**
 * Issue 20 §5 "Inbound webhook secrets have no rotation overlap": when an admin replaces TELEGRAM_WEBHOOK_SECRET,
 * SLACK_SIGNING_SECRET or STANDARD_WEBHOOK_SECRET through POST /api/admin/secrets, the value it replaced (a stored
 * one, or the Worker secret on the first store) stays accepted for `channels.secretRotationOverlapSeconds`
 * (default 24 h) counted from the replacement; the new one always is; a forged signature never is.
 * Time is advanced by moving the stored `rotated_at` back.
 */
import { env } from "cloudflare:workers";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { signWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { secretValuesFromEnv } from "../../src/security/redact";
import { envWithStoredSecrets, forgetStoredSecrets } from "../../src/security/stored-secrets";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, until } from "../support/runs";

const label = () => crypto.randomUUID().slice(0, 8);

function channelApp(overlapSeconds?: number) {
  return appFor(
    runConfig(uniqueHost("ok"), {
      agent: { tools: { allow: [] } },
      channels: {
        telegram: { enabled: true, apiBaseUrl: `https://ok-${label()}.telegram.test` },
        slack: { enabled: true, apiBaseUrl: `https://ok-${label()}.slack.test/api` },
        standard: { enabled: true },
        ...(overlapSeconds === undefined ? {} : { secretRotationOverlapSeconds: overlapSeconds }),
      },
    }),
  );
}

afterEach(async () => {
  await env.DB.prepare("DELETE FROM admin_secrets").run();
  forgetAdminGenerations();
  forgetStoredSecrets();
});

// Every accepted webhook starts a run that finishes (and logs) after its test returns. Wait until the run index
// has been still for a while, so no run is left logging when the file's environment is torn down.
afterAll(async () => {
  let last = -1;
  let stableSince = Date.now();
  await until(async () => {
    const row = await env.DB.prepare("SELECT count(*) AS n FROM runs").first<{ n: number }>();
    if (row?.n !== last) [last, stableSince] = [row?.n ?? 0, Date.now()];
    return Date.now() - stableSince > 2_500;
  }, 20_000);
}, 30_000);

/** Moves the stored rotation time back by `seconds` (as if that much time had passed), and drops the isolate's copy. */
async function age(name: string, seconds: number): Promise<void> {
  const at = new Date(Date.now() - seconds * 1000).toISOString();
  await env.DB.prepare("UPDATE admin_secrets SET rotated_at = ?2 WHERE name = ?1").bind(name, at).run();
  forgetAdminGenerations();
  forgetStoredSecrets();
}

const post = (app: ReturnType<typeof appFor>, path: string, body: string, headers: Record<string, string>) =>
  app.request(`https://gateway.test${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body }, env);

let seq = Math.floor(Math.random() * 1e9);
const telegramBody = () =>
  JSON.stringify({
    update_id: ++seq,
    message: { message_id: 1, date: 1_700_000_000, chat: { id: 55, type: "private" }, from: { id: 55, is_bot: false }, text: "hi" },
  });

async function slackHeaders(raw: string, secret: string) {
  const at = Math.floor(Date.now() / 1000);
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`v0:${at}:${raw}`)));
  return {
    "X-Slack-Request-Timestamp": String(at),
    "X-Slack-Signature": `v0=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`,
  };
}
const slackBody = () =>
  JSON.stringify({
    type: "event_callback",
    team_id: "T0TEAM",
    event_id: `Ev${label()}`,
    event: { type: "message", channel: "C0ROT", channel_type: "channel", user: "U0USER", text: "hi", ts: `1700000000.${++seq}` },
  });

async function standardHeaders(raw: string, secret: string) {
  const id = `msg_${label()}`;
  const at = Math.floor(Date.now() / 1000);
  return {
    "webhook-id": id,
    "webhook-timestamp": String(at),
    "webhook-signature": await signWebhook(webhookKey(secret) as Uint8Array, id, at, raw),
  };
}
const standardBody = () => JSON.stringify({ user_id: "u1", room_id: `r${label()}`, message: "hi" });

/** What each channel's webhook answers for a body signed (or headed) with `secret`. */
const channels = {
  telegram: {
    name: "TELEGRAM_WEBHOOK_SECRET",
    fresh: () => `rotated-telegram_${label()}${label()}`,
    send: (app: ReturnType<typeof appFor>, secret: string) =>
      post(app, "/webhooks/telegram/main", telegramBody(), { "X-Telegram-Bot-Api-Secret-Token": secret }),
    ok: 200,
  },
  slack: {
    name: "SLACK_SIGNING_SECRET",
    fresh: () => `rotatedslack${label()}${label()}`.replaceAll("-", ""),
    send: async (app: ReturnType<typeof appFor>, secret: string) => {
      const raw = slackBody();
      return post(app, "/webhooks/slack/main", raw, await slackHeaders(raw, secret));
    },
    ok: 200,
  },
  standard: {
    name: "STANDARD_WEBHOOK_SECRET",
    fresh: () => `whsec_${btoa(`rotated-standard-${label()}`)}`,
    send: async (app: ReturnType<typeof appFor>, secret: string) => {
      const raw = standardBody();
      return post(app, "/webhooks/standard/main", raw, await standardHeaders(raw, secret));
    },
    ok: 202,
  },
} as const;

const forged = {
  TELEGRAM_WEBHOOK_SECRET: "forged-telegram-secret_0123456789",
  SLACK_SIGNING_SECRET: "forgedslacksecret0123456789abcdef",
  STANDARD_WEBHOOK_SECRET: `whsec_${btoa("forged-standard-key-0123")}`,
} as const;

describe("ISSUE20-§5.4 inbound webhook secrets rotate with an overlap", () => {
  for (const [channel, c] of Object.entries(channels)) {
    it(`ISSUE20-§5.4 ${channel}: after rotation the old secret is accepted within 24 h and refused after; the new one always; a forged one never`, async () => {
      const app = channelApp();
      const old = env[c.name] as string;
      const next = c.fresh();
      const e401 = { error: { code: "auth.unauthorized", message: `the ${channel} webhook could not be verified` } };

      const stored = await call(app, "POST", "/api/admin/secrets", { name: c.name, value: next }, ADMIN);
      expect(stored.status).toBe(201);
      expect(stored.body).toEqual({
        name: c.name,
        created_at: stored.body.created_at,
        updated_at: stored.body.created_at,
        rotated_at: stored.body.created_at,
      });

      expect((await c.send(app, next)).status).toBe(c.ok);
      expect((await c.send(app, old)).status).toBe(c.ok);
      const forgedAnswer = await c.send(app, forged[c.name]);
      expect({ status: forgedAnswer.status, body: await forgedAnswer.json() }).toEqual({ status: 401, body: e401 });

      await age(c.name, 86_400 - 60); // a minute before the window closes
      expect((await c.send(app, old)).status).toBe(c.ok);
      await age(c.name, 86_400 + 1); // just after
      const late = await c.send(app, old);
      expect({ status: late.status, body: await late.json() }).toEqual({ status: 401, body: e401 });
      expect((await c.send(app, next)).status).toBe(c.ok);
    });
  }

  it("ISSUE20-§5.4 a second rotation keeps only the value it replaced; with secretRotationOverlapSeconds 0 the old value is refused at once", async () => {
    const app = channelApp();
    const c = channels.telegram;
    const first = c.fresh();
    const second = c.fresh();
    await call(app, "POST", "/api/admin/secrets", { name: c.name, value: first }, ADMIN);
    const replaced = await call(app, "POST", "/api/admin/secrets", { name: c.name, value: second }, ADMIN);
    expect(replaced.status).toBe(200);
    expect(replaced.body.rotated_at).toBe(replaced.body.updated_at);
    expect((await c.send(app, second)).status).toBe(200);
    expect((await c.send(app, first)).status).toBe(200);
    expect((await c.send(app, env.TELEGRAM_WEBHOOK_SECRET as string)).status).toBe(401);

    const strict = channelApp(0);
    expect((await c.send(strict, second)).status).toBe(200);
    expect((await c.send(strict, first)).status).toBe(401);
  });

  it("ISSUE20-§5.4 the replaced value is still a secret: it is redacted like the current one while it is kept", async () => {
    const app = channelApp();
    const next = channels.slack.fresh();
    await call(app, "POST", "/api/admin/secrets", { name: "SLACK_SIGNING_SECRET", value: next }, ADMIN);
    const values = secretValuesFromEnv(await envWithStoredSecrets(env));
    expect(values).toContain(next);
    expect(values).toContain(env.SLACK_SIGNING_SECRET);
    expect(values.filter((v) => v === env.SLACK_SIGNING_SECRET)).toHaveLength(1);
  });
});
