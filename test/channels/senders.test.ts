/**
 * Issue 24 §3: who may talk to the agent (`channels.<name>.senders`). For each mode — `open` unchanged, `allowlist`
 * (a listed user or chat runs, anyone else is acknowledged, counted, never run, never answered), `pairing` (an
 * unknown sender gets one code per window and no run; an admin approves the code once; the next message runs) —
 * end to end through Telegram and Slack, and `allowlist` through Discord and Standard Webhooks, with the platforms
 * mocked at the network boundary (test/support/outbound.ts) and the pairings in the local D1.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { newPairingCode, PAIRING_ALPHABET, PAIRING_CODE, PAIRING_PENDING_TEXT, pairingText } from "../../src/channels/sender-policy";
import { signWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { parseGatewayConfig } from "../../src/config/parse";
import { mockProvider, runConfig, uniqueHost } from "../support/config";
import type { PlatformPost, ReceivedHook } from "../support/outbound";
import { ADMIN, appFor, call, until } from "../support/runs";

const BOT_ID = "7000000001"; // TELEGRAM_BOT_TOKEN's numeric id (vitest.config.ts)
const label = () => crypto.randomUUID().slice(0, 8);
const numericId = () => 100_000_000 + Math.floor(Math.random() * 800_000_000);
type Senders = { mode: "open" | "allowlist" | "pairing"; allow?: string[] };

function senderApp(channel: "telegram" | "slack" | "discord" | "standard", senders: Senders | undefined, host: string) {
  const base =
    channel === "standard"
      ? { replyUrl: `https://${host}/replies` }
      : { apiBaseUrl: channel === "telegram" ? `https://${host}` : `https://${host}/${channel === "slack" ? "api" : "api/v10"}` };
  return appFor(
    runConfig(uniqueHost("ok"), {
      agent: { tools: { allow: [] } },
      channels: { [channel]: { enabled: true, ...base, ...(senders ? { senders } : {}) } },
    }),
  );
}

const post = (app: ReturnType<typeof appFor>, path: string, body: string, headers: Record<string, string>, e: object = env) =>
  app.request(`https://gateway.test${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body }, e);

async function postsAt(host: string): Promise<PlatformPost[]> {
  return (await fetch(`https://mock.control/platform?host=${host}`)).json();
}
async function hooksAt(host: string): Promise<ReceivedHook[]> {
  return (await fetch(`https://mock.control/hooks?host=${host}`)).json();
}
async function runsOf(sessionKey: string): Promise<{ dispatch_key: string; status: string }[]> {
  return runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
    state.storage.sql.exec("SELECT dispatch_key, status FROM runs ORDER BY message_seq").toArray(),
  ) as never;
}
const settle = () => new Promise((r) => setTimeout(r, 300));

async function senderRow(app: ReturnType<typeof appFor>, channel: string, sender: string) {
  const res = await call(app, "GET", "/api/admin/channels/senders?agent_id=main&limit=500", undefined, ADMIN);
  expect(res.status).toBe(200);
  return (res.body.senders as { channel: string; sender: string }[]).find((s) => s.channel === channel && s.sender === sender);
}

// --- Telegram -------------------------------------------------------------------------------------------------

const TG = { "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string };
let updateSeq = Math.floor(Math.random() * 1e9);
function telegram(fromId: number, o: { chatId?: number; text?: string } = {}) {
  const chatId = o.chatId ?? fromId;
  return JSON.stringify({
    update_id: ++updateSeq,
    message: {
      message_id: 55,
      date: 1_700_000_000,
      chat: { id: chatId, type: chatId === fromId ? "private" : "group" },
      from: { id: fromId, is_bot: false, first_name: "Ada" },
      text: o.text ?? "hello",
    },
  });
}
const tgSession = (fromId: number) => `agent:main:telegram:${BOT_ID}:dm:${fromId}`;

describe("ISSUE24-3 Telegram", () => {
  it("ISSUE24-3 open (no senders block): any sender runs and is answered, as before", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const app = senderApp("telegram", undefined, tg);
    const fromId = numericId();
    expect((await post(app, "/webhooks/telegram/main", telegram(fromId), TG)).status).toBe(200);
    await until(async () => (await postsAt(tg)).length === 1);
    expect((await postsAt(tg)).map((p) => p.body.text)).toEqual(["pong"]);
    expect((await runsOf(tgSession(fromId))).map((r) => r.status)).toEqual(["completed"]);
    expect(await senderRow(app, "telegram", String(fromId))).toBeUndefined();
  });

  it("ISSUE24-3 allowlist: a listed user runs, a listed group lets any member in; an unlisted sender is acked, counted, never run, never answered", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const listed = numericId();
    const stranger = numericId();
    const group = -1_000_000_000 - numericId();
    const app = senderApp("telegram", { mode: "allowlist", allow: [String(listed), String(group)] }, tg);
    expect((await post(app, "/webhooks/telegram/main", telegram(listed), TG)).status).toBe(200);
    await until(async () => (await postsAt(tg)).length === 1);
    expect((await runsOf(tgSession(listed))).length).toBe(1);

    for (let i = 0; i < 3; i++) {
      const res = await post(app, "/webhooks/telegram/main", telegram(stranger), TG);
      expect({ status: res.status, body: await res.json() }).toEqual({ status: 200, body: { ok: true, ignored: true } });
    }
    await post(app, "/webhooks/telegram/main", telegram(stranger, { chatId: group }), TG);
    await until(async () => (await postsAt(tg)).length === 2);
    await settle();
    expect((await postsAt(tg)).map((p) => p.body.chat_id)).toEqual([String(listed), String(group)]);
    expect(await runsOf(tgSession(stranger))).toEqual([]);
    expect(await senderRow(app, "telegram", String(stranger))).toEqual({
      agent_id: "main",
      channel: "telegram",
      sender: String(stranger),
      refused: 3,
      last_refused_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      paired_at: null,
    });
  });

  it("ISSUE24-3 pairing: one code and no run; asked again → no second reply; approved → the next message runs; a second approval 409, a forged code 404", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const app = senderApp("telegram", { mode: "pairing" }, tg);
    const fromId = numericId();
    const first = await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    expect({ status: first.status, body: await first.json() }).toEqual({ status: 200, body: { ok: true, ignored: true } });
    const [reply] = await postsAt(tg);
    const code = /code is ([A-Z2-9]{8})/.exec(String(reply?.body.text))?.[1] as string;
    expect(code).toMatch(PAIRING_CODE);
    expect(reply).toEqual({
      host: tg,
      method: "sendMessage",
      body: { chat_id: String(fromId), text: pairingText(code), reply_parameters: { message_id: 55, allow_sending_without_reply: true } },
      authorized: true,
      answered: 200,
    });

    expect((await post(app, "/webhooks/telegram/main", telegram(fromId, { text: "please?" }), TG)).status).toBe(200);
    await settle();
    expect(await postsAt(tg)).toHaveLength(1);
    expect(await runsOf(tgSession(fromId))).toEqual([]);

    const pending = await call(app, "GET", "/api/admin/channels/pairings?agent_id=main&limit=500", undefined, ADMIN);
    expect(pending.status).toBe(200);
    expect(pending.body.pairings.filter((p: { code: string }) => p.code === code)).toEqual([
      {
        code,
        agent_id: "main",
        channel: "telegram",
        sender: String(fromId),
        created_at: expect.any(String),
        expires_at: expect.any(String),
      },
    ]);
    const p = pending.body.pairings.find((x: { code: string }) => x.code === code);
    expect(Date.parse(p.expires_at) - Date.parse(p.created_at)).toBe(3_600_000);

    const approved = await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN);
    expect(approved.status).toBe(200);
    expect(approved.body).toEqual({ ...p, approved_at: expect.any(String) });
    const again = await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN);
    expect({ status: again.status, body: again.body }).toEqual({
      status: 409,
      body: { error: { code: "conflict", message: `pairing code ${code} was already used` } },
    });
    const forged = code === "ABCDEFGH" ? "ABCDEFGJ" : "ABCDEFGH";
    const unknown = await call(app, "POST", `/api/admin/channels/pairings/${forged}/approve`, undefined, ADMIN);
    expect({ status: unknown.status, body: unknown.body }).toEqual({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no pairing code ${forged}` } },
    });
    expect((await call(app, "POST", "/api/admin/channels/pairings/abc-0/approve", undefined, ADMIN)).status).toBe(400);
    expect((await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`)).status).toBe(403);

    await post(app, "/webhooks/telegram/main", telegram(fromId, { text: "now?" }), TG);
    await until(async () => (await postsAt(tg)).length === 2);
    expect((await postsAt(tg))[1]?.body.text).toBe("pong");
    expect((await runsOf(tgSession(fromId))).map((r) => r.status)).toEqual(["completed"]);
    expect(await senderRow(app, "telegram", String(fromId))).toEqual(
      expect.objectContaining({ refused: 2, paired_at: approved.body.approved_at }),
    );
    // Paired for this agent and channel only: the listing no longer shows the code.
    const after = await call(app, "GET", "/api/admin/channels/pairings?agent_id=main&limit=500", undefined, ADMIN);
    expect(after.body.pairings.some((x: { code: string }) => x.code === code)).toBe(false);
  });

  it("ISSUE24-3 pairing: after the window the same pending code is sent again; an expired code is refused (410) and the sender gets a new one", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const app = senderApp("telegram", { mode: "pairing" }, tg);
    const fromId = numericId();
    await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    const codeOf = (p: PlatformPost | undefined) => /code is ([A-Z2-9]{8})/.exec(String(p?.body.text))?.[1];
    const code = codeOf((await postsAt(tg))[0]) as string;
    // The reply window (10 minutes) has passed, the code (1 hour) has not.
    await env.DB.prepare("UPDATE channel_senders SET replied_at = replied_at - 600001 WHERE sender = ?1").bind(String(fromId)).run();
    await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    expect((await postsAt(tg)).map(codeOf)).toEqual([code, code]);

    await env.DB.prepare("UPDATE channel_pairings SET expires_at = ?2 WHERE code = ?1")
      .bind(code, Date.now() - 1)
      .run();
    const expired = await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN);
    expect({ status: expired.status, code: expired.body.error.code }).toEqual({ status: 410, code: "gone" });
    const listed = await call(app, "GET", "/api/admin/channels/pairings?limit=500", undefined, ADMIN);
    expect(listed.body.pairings.some((x: { code: string }) => x.code === code)).toBe(false);

    await env.DB.prepare("UPDATE channel_senders SET replied_at = replied_at - 600001 WHERE sender = ?1").bind(String(fromId)).run();
    await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    const codes = (await postsAt(tg)).map(codeOf);
    expect(codes).toHaveLength(3);
    expect(codes[2]).toMatch(PAIRING_CODE);
    expect(codes[2]).not.toBe(code);
    // The expired code was replaced: it is unknown now.
    expect((await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN)).status).toBe(404);
    expect(await runsOf(tgSession(fromId))).toEqual([]);
  });

  it("ISSUE24-3 pairing: 8 concurrent messages from one unknown sender → exactly one reply, one code, 8 refusals counted, no run", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const app = senderApp("telegram", { mode: "pairing" }, tg);
    const fromId = numericId();
    const answers = await Promise.all(Array.from({ length: 8 }, () => post(app, "/webhooks/telegram/main", telegram(fromId), TG)));
    expect(answers.map((r) => r.status)).toEqual(Array(8).fill(200));
    await settle();
    expect(await postsAt(tg)).toHaveLength(1);
    expect(await senderRow(app, "telegram", String(fromId))).toEqual(expect.objectContaining({ refused: 8, paired_at: null }));
    const pending = await call(app, "GET", "/api/admin/channels/pairings?limit=500", undefined, ADMIN);
    expect(pending.body.pairings.filter((p: { sender: string }) => p.sender === String(fromId))).toHaveLength(1);
    expect(await runsOf(tgSession(fromId))).toEqual([]);
  });

  it("ISSUE24-3 pairing: a code reply the platform refused gives the window back — the next message gets the code", async () => {
    const tg = `down-${label()}.telegram.test`;
    const app = senderApp("telegram", { mode: "pairing" }, tg);
    const fromId = numericId();
    await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    await post(app, "/webhooks/telegram/main", telegram(fromId), TG);
    expect((await postsAt(tg)).map((p) => p.answered)).toEqual([500, 500]);
    expect(await runsOf(tgSession(fromId))).toEqual([]);
  });
});

// --- Slack ----------------------------------------------------------------------------------------------------

async function slackHeaders(raw: string) {
  const at = Math.floor(Date.now() / 1000);
  const key = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(env.SLACK_SIGNING_SECRET as string),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`v0:${at}:${raw}`)));
  return {
    "X-Slack-Request-Timestamp": String(at),
    "X-Slack-Signature": `v0=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`,
  };
}
function slack(user: string, channel = `D${label().toUpperCase()}`) {
  const ts = `1700000000.${String(Math.floor(Math.random() * 1e6)).padStart(6, "0")}`;
  return {
    ts,
    raw: JSON.stringify({
      type: "event_callback",
      team_id: "T0TEAM",
      event_id: `Ev${label()}`,
      event: { type: "message", channel, channel_type: "im", user, text: "hello", ts },
    }),
  };
}

describe("ISSUE24-3 Slack", () => {
  it("ISSUE24-3 allowlist: a listed user runs; an unlisted one is acked (200), counted, never run or answered", async () => {
    const sl = `ok-${label()}.slack.test`;
    const listed = `U${label().toUpperCase()}`;
    const stranger = `U${label().toUpperCase()}`;
    const app = senderApp("slack", { mode: "allowlist", allow: [listed] }, sl);
    const ok = slack(listed);
    await post(app, "/webhooks/slack/main", ok.raw, await slackHeaders(ok.raw));
    await until(async () => (await postsAt(sl)).length === 1);
    const no = slack(stranger);
    const res = await post(app, "/webhooks/slack/main", no.raw, await slackHeaders(no.raw));
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 200, body: { ok: true, ignored: true } });
    await settle();
    expect((await postsAt(sl)).map((p) => p.body.text)).toEqual(["pong"]);
    expect(await runsOf(`agent:main:slack:T0TEAM:dm:${stranger}`)).toEqual([]);
    expect(await senderRow(app, "slack", stranger)).toEqual(expect.objectContaining({ refused: 1, paired_at: null }));
  });

  it("ISSUE24-3 pairing: the code in the message's thread, once; approved → the next message runs and is answered", async () => {
    const sl = `ok-${label()}.slack.test`;
    const user = `U${label().toUpperCase()}`;
    const app = senderApp("slack", { mode: "pairing" }, sl);
    const first = slack(user);
    expect((await post(app, "/webhooks/slack/main", first.raw, await slackHeaders(first.raw))).status).toBe(200);
    const second = slack(user);
    await post(app, "/webhooks/slack/main", second.raw, await slackHeaders(second.raw));
    await settle();
    const posts = await postsAt(sl);
    expect(posts).toHaveLength(1);
    const code = /code is ([A-Z2-9]{8})/.exec(String(posts[0]?.body.text))?.[1] as string;
    expect(posts[0]?.body).toEqual({ channel: JSON.parse(first.raw).event.channel, text: pairingText(code), thread_ts: first.ts });
    expect(await runsOf(`agent:main:slack:T0TEAM:dm:${user}`)).toEqual([]);

    const approved = await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN);
    expect(approved.body).toEqual(expect.objectContaining({ code, agent_id: "main", channel: "slack", sender: user }));
    const third = slack(user);
    await post(app, "/webhooks/slack/main", third.raw, await slackHeaders(third.raw));
    await until(async () => (await postsAt(sl)).length === 2);
    expect((await postsAt(sl))[1]?.body).toEqual({ channel: JSON.parse(third.raw).event.channel, text: "pong", thread_ts: third.ts });
    expect(await runsOf(`agent:main:slack:T0TEAM:dm:${user}`)).toEqual([
      { dispatch_key: `slack:${JSON.parse(third.raw).event.channel}:${third.ts}`, status: "completed" },
    ]);
    expect((await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN)).status).toBe(409);
    // Audited once, in the gateway's own stream (the second approval changed nothing).
    const approvals = async () => {
      const res = await call(
        app,
        "GET",
        `/api/admin/audit?agent_id=gateway&date=${new Date().toISOString().slice(0, 10)}`,
        undefined,
        ADMIN,
      );
      return res.status === 200
        ? res.text
            .split("\n")
            .filter(Boolean)
            .map((l) => JSON.parse(l))
            .filter((e) => e.event_type === "channel.pairing.approved" && e.payload.code === code)
        : [];
    };
    await until(async () => (await approvals()).length === 1, 15_000);
    expect((await approvals())[0]).toMatchObject({
      actor: "admin",
      agent_id: "gateway",
      payload: { code, agent_id: "main", channel: "slack", sender: user },
    });
  }, 30_000);
});

// --- Discord and Standard Webhooks ------------------------------------------------------------------------------

const APP_ID = "1100000000000000001";
const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
const discordEnv = {
  ...env,
  DISCORD_PUBLIC_KEY: toHex(new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer)),
  DISCORD_APPLICATION_ID: APP_ID,
};
const snowflake = () => String(1_200_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e15)));
async function discord(userId: string, channelId: string) {
  const raw = JSON.stringify({
    id: snowflake(),
    application_id: APP_ID,
    type: 2,
    token: `aW50ZXJhY3Rpb246${label()}`,
    version: 1,
    channel_id: channelId,
    guild_id: "1300000000000000001",
    member: { user: { id: userId, username: "ada", bot: false }, roles: [] },
    data: { id: "1400000000000000001", name: "ask", type: 1, options: [{ name: "message", type: 3, value: "hello" }] },
  });
  const at = Math.floor(Date.now() / 1000);
  const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", pair.privateKey, new TextEncoder().encode(`${at}${raw}`)));
  return { raw, headers: { "X-Signature-Ed25519": toHex(sig), "X-Signature-Timestamp": String(at) } };
}

describe("ISSUE24-3 Discord and Standard Webhooks", () => {
  it("ISSUE24-3 Discord allowlist: a listed user gets the deferred ack and a run; an unlisted one an ephemeral refusal, counted, no run", async () => {
    const dc = `ok-${label()}.discord.test`;
    const listed = snowflake();
    const stranger = snowflake();
    const channelId = snowflake();
    const app = senderApp("discord", { mode: "allowlist", allow: [listed] }, dc);
    const ok = await discord(listed, channelId);
    const accepted = await post(app, "/webhooks/discord/main", ok.raw, ok.headers, discordEnv);
    expect({ status: accepted.status, body: await accepted.json() }).toEqual({ status: 200, body: { type: 5 } });
    await until(async () => (await postsAt(dc)).length === 1);
    const no = await discord(stranger, channelId);
    const refused = await post(app, "/webhooks/discord/main", no.raw, no.headers, discordEnv);
    expect({ status: refused.status, body: await refused.json() }).toEqual({
      status: 200,
      body: { type: 4, data: { content: "This agent does not take messages from you.", flags: 64 } },
    });
    await settle();
    expect(await postsAt(dc)).toHaveLength(1);
    expect((await runsOf(`agent:main:discord:${APP_ID}:group:${channelId}`)).length).toBe(1);
    expect(await senderRow(app, "discord", stranger)).toEqual(expect.objectContaining({ refused: 1 }));
  });

  it("ISSUE24-3 Discord pairing: the code is the interaction's ephemeral answer, once per window", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = senderApp("discord", { mode: "pairing" }, dc);
    const user = snowflake();
    const channelId = snowflake();
    const bodies: { type: number; data: { content: string; flags: number } }[] = [];
    for (let i = 0; i < 2; i++) {
      const m = await discord(user, channelId);
      bodies.push(await (await post(app, "/webhooks/discord/main", m.raw, m.headers, discordEnv)).json());
    }
    const code = /code is ([A-Z2-9]{8})/.exec(bodies[0]?.data.content ?? "")?.[1] as string;
    expect(bodies).toEqual([
      { type: 4, data: { content: pairingText(code), flags: 64 } },
      { type: 4, data: { content: PAIRING_PENDING_TEXT, flags: 64 } },
    ]);
    expect((await call(app, "POST", `/api/admin/channels/pairings/${code}/approve`, undefined, ADMIN)).status).toBe(200);
    const m = await discord(user, channelId);
    expect(await (await post(app, "/webhooks/discord/main", m.raw, m.headers, discordEnv)).json()).toEqual({ type: 5 });
    await until(async () => (await postsAt(dc)).length === 1);
    expect(await postsAt(dc)).toEqual([expect.objectContaining({ body: { content: "pong", allowed_mentions: { parse: [] } } })]);
  });

  it("ISSUE24-3 Discord pairing: inside the window a pending code is said to be pending — never re-issued or repeated; expired, the plain refusal", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = senderApp("discord", { mode: "pairing" }, dc);
    const user = snowflake();
    const channelId = snowflake();
    const ask = async () => {
      const m = await discord(user, channelId);
      const res = await post(app, "/webhooks/discord/main", m.raw, m.headers, discordEnv);
      return { status: res.status, body: (await res.json()) as { type: number; data: { content: string; flags: number } } };
    };
    const first = await ask();
    const code = /code is ([A-Z2-9]{8})/.exec(first.body.data.content)?.[1] as string;
    expect(first).toEqual({ status: 200, body: { type: 4, data: { content: pairingText(code), flags: 64 } } });
    const later = [await ask(), await ask(), await ask()];
    expect(later).toEqual(Array(3).fill({ status: 200, body: { type: 4, data: { content: PAIRING_PENDING_TEXT, flags: 64 } } }));
    expect(PAIRING_PENDING_TEXT).toBe(
      "This agent only talks to approved people. A pairing code was already given to you and is still pending: send it to the operator to get access. Write again after 10 minutes to see it once more.",
    );
    for (const r of later) expect(r.body.data.content).not.toContain(code);
    // No new code: the sender still has exactly the first one; every message was counted; nothing ran or was sent.
    const listed = await call(app, "GET", "/api/admin/channels/pairings?agent_id=main&limit=500", undefined, ADMIN);
    expect(listed.body.pairings.filter((p: { sender: string }) => p.sender === user).map((p: { code: string }) => p.code)).toEqual([code]);
    expect(await senderRow(app, "discord", user)).toEqual(expect.objectContaining({ refused: 4, paired_at: null }));
    expect(await runsOf(`agent:main:discord:${APP_ID}:group:${channelId}`)).toEqual([]);
    expect(await postsAt(dc)).toEqual([]);
    // After the window, the same pending code is shown once more.
    await env.DB.prepare("UPDATE channel_senders SET replied_at = replied_at - 600001 WHERE sender = ?1").bind(user).run();
    expect((await ask()).body.data.content).toBe(pairingText(code));
    // A code that expired inside the window is not "pending": the plain refusal, until the window gives a new code.
    await env.DB.prepare("UPDATE channel_pairings SET expires_at = ?2 WHERE code = ?1")
      .bind(code, Date.now() - 1)
      .run();
    expect((await ask()).body.data.content).toBe("This agent does not take messages from you.");
  });

  it("ISSUE24-3 Discord allowlist: a second refusal inside the window is the plain refusal too (no code was ever issued)", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = senderApp("discord", { mode: "allowlist", allow: [snowflake()] }, dc);
    const user = snowflake();
    const channelId = snowflake();
    for (let i = 0; i < 2; i++) {
      const m = await discord(user, channelId);
      expect(await (await post(app, "/webhooks/discord/main", m.raw, m.headers, discordEnv)).json()).toEqual({
        type: 4,
        data: { content: "This agent does not take messages from you.", flags: 64 },
      });
    }
  });

  it("ISSUE24-3 Standard Webhooks allowlist: a listed room runs (202 run_id); an unlisted sender is 202 ignored, counted, no run, no reply", async () => {
    const hook = `ok-${label()}.hook.test`;
    const room = `room-${label()}`;
    const app = senderApp("standard", { mode: "allowlist", allow: [room] }, hook);
    const key = webhookKey(env.STANDARD_WEBHOOK_SECRET) as Uint8Array;
    const signed = async (body: string) => {
      const id = `msg_${label()}`;
      const at = Math.floor(Date.now() / 1000);
      return { "webhook-id": id, "webhook-timestamp": String(at), "webhook-signature": await signWebhook(key, id, at, body) };
    };
    const ok = JSON.stringify({ user_id: "u-listed", room_id: room, message: "hello" });
    const accepted = await post(app, "/webhooks/standard/main", ok, await signed(ok));
    expect(accepted.status).toBe(202);
    expect((await accepted.json()) as object).toEqual({ ok: true, run_id: expect.stringMatching(/^run_/) });
    await until(async () => (await hooksAt(hook)).length === 1);
    const stranger = `u-${label()}`;
    const no = JSON.stringify({ user_id: stranger, room_id: `room-${label()}`, message: "hello" });
    const refused = await post(app, "/webhooks/standard/main", no, await signed(no));
    expect({ status: refused.status, body: await refused.json() }).toEqual({ status: 202, body: { ok: true, ignored: true } });
    await settle();
    expect(await hooksAt(hook)).toHaveLength(1);
    expect(await runsOf(`agent:main:standard:${JSON.parse(no).room_id}:dm:${stranger}`)).toEqual([]);
    expect(await senderRow(app, "standard", stranger)).toEqual(expect.objectContaining({ refused: 1 }));
  });
});

// --- Configuration and codes ------------------------------------------------------------------------------------

describe("ISSUE24-3 configuration and pairing codes", () => {
  const base = { models: { providers: { p: mockProvider("ok.provider.test") } } };
  const parse = (channels: unknown) => parseGatewayConfig({ ...base, channels } as never);

  it("ISSUE24-3 senders absent (open) on every channel by default; mode defaults to open, allow to []; allowlist and pairing parse", () => {
    const r = parse({ telegram: { enabled: true } });
    if (!r.ok) throw new Error(JSON.stringify(r.issues));
    for (const ch of ["telegram", "slack", "discord", "standard"] as const) expect(r.value.channels[ch].senders).toBeUndefined();
    const d = parse({ discord: { senders: {} } });
    if (!d.ok) throw new Error(JSON.stringify(d.issues));
    expect(d.value.channels.discord.senders).toEqual({ mode: "open", allow: [] });
    const p = parse({ slack: { senders: { mode: "pairing", allow: ["U01"] } }, standard: { senders: { mode: "allowlist" } } });
    if (!p.ok) throw new Error(JSON.stringify(p.issues));
    expect(p.value.channels.slack.senders).toEqual({ mode: "pairing", allow: ["U01"] });
    expect(p.value.channels.standard.senders).toEqual({ mode: "allowlist", allow: [] });
  });

  it("ISSUE24-3 an unknown key, an unknown mode, a non-string or malformed id are rejected, naming the field", () => {
    const cases: [unknown, string][] = [
      [{ telegram: { senders: { mode: "open", users: ["1"] } } }, "channels.telegram.senders.users"],
      [{ slack: { senders: { mode: "everyone" } } }, "channels.slack.senders.mode"],
      [{ discord: { senders: { mode: "allowlist", allow: [123] } } }, "channels.discord.senders.allow[0]"],
      [{ standard: { senders: { mode: "allowlist", allow: ["has space"] } } }, "channels.standard.senders.allow[0]"],
      [{ telegram: { senders: { mode: "allowlist", allow: [""] } } }, "channels.telegram.senders.allow[0]"],
    ];
    for (const [channels, path] of cases) {
      const r = parse(channels);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.issues[0]?.path).toBe(path);
    }
  });

  it("ISSUE24-3 pairing codes: 8 characters of the unambiguous alphabet, distinct over 2,000 draws", () => {
    expect(PAIRING_ALPHABET).not.toMatch(/[01ILO]/);
    const codes = new Set(Array.from({ length: 2000 }, () => newPairingCode()));
    expect(codes.size).toBe(2000);
    for (const c of codes) expect(c).toMatch(PAIRING_CODE);
  });

  it("ISSUE24-3 OpenAPI documents the admin routes and their refusals", async () => {
    const app = senderApp("telegram", undefined, `ok-${label()}.telegram.test`);
    const doc = (await (await app.request("https://gateway.test/openapi.json", {}, env)).json()) as { paths: Record<string, any> };
    expect(Object.keys(doc.paths["/api/admin/channels/pairings/{code}/approve"].post.responses).sort()).toEqual([
      "200",
      "400",
      "401",
      "404",
      "409",
      "410",
    ]);
    expect(doc.paths["/api/admin/channels/pairings"].get.responses["200"]).toBeDefined();
    expect(doc.paths["/api/admin/channels/senders"].get.responses["200"]).toBeDefined();
  });
});
