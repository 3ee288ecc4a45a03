/**
 * Discord as the fourth channel (issue 24 §4): the Interactions endpoint verified with Ed25519 (failing closed),
 * PING answered PONG, slash commands and components queued as one run per interaction id and acknowledged with a
 * deferred response, the answer sent as follow-ups (≤ 2,000 characters each) through the interaction webhook —
 * mocked at the network boundary (`*.discord.test`, test/support/outbound.ts). The key pair is generated here.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseDiscordInteraction, verifyDiscordSignature } from "../../src/channels/discord";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { appFor, until } from "../support/runs";

const APP_ID = "1100000000000000001";
const label = () => crypto.randomUUID().slice(0, 8);
const snowflake = () => String(1_200_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e15)));
const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const enc = new TextEncoder();

const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
const PUBLIC_KEY = toHex(new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer));
const other = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;

const discordEnv = { ...env, DISCORD_PUBLIC_KEY: PUBLIC_KEY, DISCORD_APPLICATION_ID: APP_ID };
const E401 = { error: { code: "auth.unauthorized", message: "the discord webhook could not be verified" } };

async function sign(raw: string, at = Math.floor(Date.now() / 1000), key = pair.privateKey): Promise<Record<string, string>> {
  const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", key, enc.encode(`${at}${raw}`)));
  return { "X-Signature-Ed25519": toHex(sig), "X-Signature-Timestamp": String(at) };
}

function discordApp(o: { provider?: string; discord?: string; disabled?: boolean } = {}) {
  return appFor(
    runConfig(o.provider ?? uniqueHost("ok"), {
      agent: { tools: { allow: [] } },
      channels: { discord: { enabled: !o.disabled, apiBaseUrl: `https://${o.discord ?? `ok-${label()}.discord.test`}/api/v10` } },
    }),
  );
}

const send = (app: ReturnType<typeof appFor>, raw: string, headers: Record<string, string>, e: object = discordEnv) =>
  app.request(
    "https://gateway.test/webhooks/discord/main",
    { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: raw },
    e,
  );

/** A slash command `/ask message:<text>` in a guild channel (or a DM without `guild`). */
function command(o: { id?: string; text?: string; channelId?: string; userId?: string; dm?: boolean; token?: string } = {}) {
  const user = { id: o.userId ?? snowflake(), username: "ada", bot: false };
  return {
    id: o.id ?? snowflake(),
    application_id: APP_ID,
    type: 2,
    token: o.token ?? `aW50ZXJhY3Rpb246${label()}${label()}`,
    version: 1,
    channel_id: o.channelId ?? snowflake(),
    ...(o.dm ? { user } : { guild_id: "1300000000000000001", member: { user, roles: [] } }),
    data: { id: "1400000000000000001", name: "ask", type: 1, options: [{ name: "message", type: 3, value: o.text ?? "hello discord" }] },
  };
}

async function postsAt(host: string): Promise<PlatformPost[]> {
  return (await fetch(`https://mock.control/platform?host=${host}`)).json();
}

async function runsOf(sessionKey: string): Promise<{ id: string; dispatch_key: string; status: string }[]> {
  return runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
    state.storage.sql.exec("SELECT id, dispatch_key, status FROM runs ORDER BY message_seq").toArray(),
  ) as never;
}

/** Every table of the session except the reply outbox, as text (where the interaction token must never be). */
async function sessionTextOutsideOutbox(sessionKey: string): Promise<string> {
  return runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) => {
    const tables = state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'")
      .toArray()
      .map((t) => t.name)
      .filter((n) => n !== "reply_outbox" && !n.startsWith("sqlite_"));
    return tables.map((t) => JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t}"`).toArray())).join("\n");
  });
}

describe("Discord interactions endpoint", () => {
  it("ISSUE24-4 a PING is answered PONG ({type: 1}) and runs nothing", async () => {
    const dc = `ok-${label()}.discord.test`;
    const raw = JSON.stringify({ id: snowflake(), application_id: APP_ID, type: 1, token: "tok", version: 1 });
    const res = await send(discordApp({ discord: dc }), raw, await sign(raw));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ type: 1 });
    await new Promise((r) => setTimeout(r, 200));
    expect(await postsAt(dc)).toEqual([]);
  });

  it("ISSUE24-4 a slash command → deferred ack in the request, one run, one follow-up POST with the answer; the token stays out of events and transcript", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const interaction = command({ text: "what is up?" });
    const raw = JSON.stringify(interaction);
    const res = await send(app, raw, await sign(raw));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ type: 5 });
    await until(async () => (await postsAt(dc)).length === 1);
    expect(await postsAt(dc)).toEqual([
      {
        host: dc,
        method: "followup",
        body: { content: "pong", allowed_mentions: { parse: [] } },
        authorized: true,
        answered: 200,
        path: `/api/v10/webhooks/${APP_ID}/${interaction.token}`,
      },
    ]);
    const key = `agent:main:discord:${APP_ID}:group:${interaction.channel_id}`;
    expect((await runsOf(key)).map((r) => [r.dispatch_key, r.status])).toEqual([[`discord:${interaction.id}`, "completed"]]);
    const stored = await sessionTextOutsideOutbox(key);
    expect(stored).toContain("what is up?");
    expect(stored).not.toContain(interaction.token);
    await new Promise((r) => setTimeout(r, 300));
    expect(await postsAt(dc)).toHaveLength(1);
  });

  it("ISSUE24-4 a 4,500-character answer from a model slower than 3 s → the ack at once, then 3 follow-ups of 2,000, 2,000 and 500 characters, in order", async () => {
    const provider = uniqueHost("script");
    const dc = `ok-${label()}.discord.test`;
    const answer = `${"a".repeat(2000)}${"b".repeat(2000)}${"c".repeat(500)}`;
    // The model takes longer than Discord's 3 seconds: the deferred ack does not wait for it.
    await scriptProvider(provider, [{ content: answer, delay_ms: 3_500 }]);
    const raw = JSON.stringify(command());
    const started = Date.now();
    expect(await (await send(discordApp({ provider, discord: dc }), raw, await sign(raw))).json()).toEqual({ type: 5 });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(await postsAt(dc)).toEqual([]);
    await until(async () => (await postsAt(dc)).length === 3, 15_000);
    const contents = (await postsAt(dc)).map((p) => p.body.content as string);
    expect(contents).toEqual(["a".repeat(2000), "b".repeat(2000), "c".repeat(500)]);
    expect(contents.join("")).toBe(answer);
  }, 20_000);

  it("ISSUE24-4 the same interaction id twice (a retried delivery) → one run and one follow-up", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const interaction = command();
    const raw = JSON.stringify(interaction);
    const answers = await Promise.all([send(app, raw, await sign(raw)), send(app, raw, await sign(raw))]);
    expect(answers.map((r) => r.status)).toEqual([200, 200]);
    expect(await Promise.all(answers.map((r) => r.json()))).toEqual([{ type: 5 }, { type: 5 }]);
    const again = await send(app, raw, await sign(raw));
    expect(await again.json()).toEqual({ type: 5 });
    await until(async () => (await postsAt(dc)).length === 1);
    await new Promise((r) => setTimeout(r, 300));
    expect(await postsAt(dc)).toHaveLength(1);
    expect(await runsOf(`agent:main:discord:${APP_ID}:group:${interaction.channel_id}`)).toHaveLength(1);
  });

  it("ISSUE24-4 a DM command runs in …:dm:{user}; a button (type 3) is a turn with its custom_id as the message", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const userId = snowflake();
    const dm = command({ dm: true, userId });
    let raw = JSON.stringify(dm);
    expect(await (await send(app, raw, await sign(raw))).json()).toEqual({ type: 5 });
    const button = { ...command({ dm: true, userId }), type: 3, data: { custom_id: "show_more", component_type: 2 } };
    raw = JSON.stringify(button);
    expect(await (await send(app, raw, await sign(raw))).json()).toEqual({ type: 5 });
    await until(async () => (await postsAt(dc)).length === 2);
    const runs = await runsOf(`agent:main:discord:${APP_ID}:dm:${userId}`);
    expect(runs.map((r) => r.dispatch_key)).toEqual([`discord:${dm.id}`, `discord:${button.id}`]);
    expect(parseDiscordInteraction(button)).toMatchObject({ kind: "turn", text: "show_more", guildId: null });
  });

  it("ISSUE24-4 a 429 from the follow-up endpoint is retried and the answer delivered once", async () => {
    const dc = `flaky1-${label()}.discord.test`;
    const raw = JSON.stringify(command());
    await send(discordApp({ discord: dc }), raw, await sign(raw));
    await until(async () => (await postsAt(dc)).length === 2, 15_000);
    await new Promise((r) => setTimeout(r, 300));
    const posts = await postsAt(dc);
    expect(posts.map((p) => [p.answered, p.body.content])).toEqual([
      [429, "pong"],
      [200, "pong"],
    ]);
  }, 20_000);

  it("ISSUE24-4 adversarial signatures are all 401 with the S3 envelope, and nothing runs", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const interaction = command();
    const raw = JSON.stringify(interaction);
    const now = Math.floor(Date.now() / 1000);
    const good = await sign(raw, now);
    const sig = good["X-Signature-Ed25519"] as string;
    const ts = good["X-Signature-Timestamp"] as string;
    const altered = raw.replace("hello discord", "hello discorD");
    const cases: [string, string, Record<string, string>][] = [
      ["wrong key", raw, await sign(raw, now, other.privateKey)],
      ["stale timestamp (301 s old)", raw, await sign(raw, now - 301)],
      ["timestamp 301 s in the future", raw, await sign(raw, now + 301)],
      ["altered body", altered, good],
      ["signature for another timestamp", raw, { "X-Signature-Ed25519": sig, "X-Signature-Timestamp": String(now - 1) }],
      ["missing signature header", raw, { "X-Signature-Timestamp": ts }],
      ["missing timestamp header", raw, { "X-Signature-Ed25519": sig }],
      ["both headers missing", raw, {}],
      ["empty signature header", raw, { "X-Signature-Ed25519": "", "X-Signature-Timestamp": ts }],
      ["non-numeric timestamp", raw, { "X-Signature-Ed25519": sig, "X-Signature-Timestamp": `${ts}x` }],
      ["malformed hex (non-hex characters, right length)", raw, { ...good, "X-Signature-Ed25519": `zz${sig.slice(2)}` }],
      ["signature as base64", raw, { ...good, "X-Signature-Ed25519": btoa(sig).slice(0, 128) }],
      ["wrong-length signature (63 bytes)", raw, { ...good, "X-Signature-Ed25519": sig.slice(0, 126) }],
      ["wrong-length signature (65 bytes)", raw, { ...good, "X-Signature-Ed25519": `${sig}00` }],
      ["odd-length hex", raw, { ...good, "X-Signature-Ed25519": sig.slice(0, 127) }],
      ["empty body", "", await sign("", now)],
      ["empty body with the body's signature", "", good],
    ];
    const results: [string, number, unknown][] = [];
    for (const [name, body, headers] of cases) {
      const res = await send(app, body, headers);
      results.push([name, res.status, await res.json()]);
    }
    expect(results).toEqual(cases.map(([name]) => [name, 401, E401]));
    expect(cases).toHaveLength(17);
    await new Promise((r) => setTimeout(r, 200));
    expect(await postsAt(dc)).toEqual([]);
    expect(await runsOf(`agent:main:discord:${APP_ID}:group:${interaction.channel_id}`)).toEqual([]);
  });

  it("ISSUE24-4 fails closed: no public key, a malformed key, no application id, another application → 401; disabled → 404", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const raw = JSON.stringify(command());
    const headers = await sign(raw);
    const envs: [string, object][] = [
      ["no public key", { ...discordEnv, DISCORD_PUBLIC_KEY: undefined }],
      ["public key not hex", { ...discordEnv, DISCORD_PUBLIC_KEY: `${PUBLIC_KEY.slice(0, 62)}zz` }],
      ["public key too short", { ...discordEnv, DISCORD_PUBLIC_KEY: PUBLIC_KEY.slice(0, 62) }],
      ["no application id", { ...discordEnv, DISCORD_APPLICATION_ID: undefined }],
      ["another application", { ...discordEnv, DISCORD_APPLICATION_ID: "1100000000000000002" }],
    ];
    const results: [string, number, unknown][] = [];
    for (const [name, e] of envs) {
      const res = await send(app, raw, headers, e);
      results.push([name, res.status, await res.json()]);
    }
    expect(results).toEqual(envs.map(([name]) => [name, 401, E401]));
    const disabled = await send(discordApp({ disabled: true }), raw, headers);
    expect(disabled.status).toBe(404);
    expect(await disabled.json()).toEqual({ error: { code: "resource.not_found", message: "the discord channel is not enabled" } });
    await new Promise((r) => setTimeout(r, 200));
    expect(await postsAt(dc)).toEqual([]);
  });

  it("ISSUE24-4 a verified interaction the gateway does not take (no message option, a bot) gets an ephemeral hint, no run", async () => {
    const dc = `ok-${label()}.discord.test`;
    const app = discordApp({ discord: dc });
    const noText = { ...command(), data: { id: "1", name: "ask", type: 1, options: [] } };
    const bot = command() as { member?: { user: { bot: boolean } } };
    (bot.member as { user: { bot: boolean } }).user.bot = true;
    for (const body of [noText, bot]) {
      const raw = JSON.stringify(body);
      const res = await send(app, raw, await sign(raw));
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ type: 4, data: { content: "Use /ask message:<your question>.", flags: 64 } });
    }
    const notJson = "{not json";
    const res = await send(app, notJson, await sign(notJson));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: { code: "invalid.request", message: "the Discord payload is not JSON" } });
    await new Promise((r) => setTimeout(r, 200));
    expect(await postsAt(dc)).toEqual([]);
  });
});

describe("Discord adapter", () => {
  it("ISSUE24-4 verifyDiscordSignature gives one reason per refusal and never throws", async () => {
    const raw = '{"type":1}';
    const now = 1_800_000_000;
    const h = await sign(raw, now);
    const headers = { signature: h["X-Signature-Ed25519"] as string, timestamp: h["X-Signature-Timestamp"] as string };
    expect(await verifyDiscordSignature(PUBLIC_KEY, headers, raw, now)).toEqual({ ok: true });
    expect(await verifyDiscordSignature(PUBLIC_KEY, headers, raw, now + 300)).toEqual({ ok: true });
    expect(await verifyDiscordSignature(PUBLIC_KEY, headers, raw, now + 301)).toEqual({ ok: false, reason: "timestamp" });
    expect(await verifyDiscordSignature(undefined, headers, raw, now)).toEqual({ ok: false, reason: "no_key" });
    expect(await verifyDiscordSignature(PUBLIC_KEY, { ...headers, signature: null }, raw, now)).toEqual({
      ok: false,
      reason: "missing_headers",
    });
    expect(await verifyDiscordSignature(PUBLIC_KEY, headers, "", now)).toEqual({ ok: false, reason: "empty_body" });
    expect(await verifyDiscordSignature(PUBLIC_KEY, headers, raw, Number.NaN)).toEqual({ ok: false, reason: "timestamp" });
    // A 32-byte value that is not a valid curve point: refused, not thrown.
    expect(await verifyDiscordSignature("f".repeat(64), headers, raw, now)).toEqual({ ok: false, reason: "signature" });
  });

  it("ISSUE24-4 channels.discord: defaults, unknown keys rejected, public https only (ISSUE33: no loopback http either)", () => {
    const config = (channels?: Record<string, unknown>) => runConfig(uniqueHost("ok"), channels ? { channels } : {});
    expect(config({ discord: { enabled: true } }).channels.discord).toEqual({ enabled: true, apiBaseUrl: "https://discord.com/api/v10" });
    expect(config().channels.discord).toEqual({ enabled: false, apiBaseUrl: "https://discord.com/api/v10" });
    // Issue 33 (D-088) withdrew the loopback exception this line used to accept: a bot token is never sent to a
    // loopback or private address, over http or https.
    expect(() => config({ discord: { enabled: true, apiBaseUrl: "http://127.0.0.1:8787/api/v10/" } })).toThrow(
      '[{"path":"channels.discord.apiBaseUrl","message":"must use the default https port"}]',
    );
    expect(config({ discord: { enabled: true, apiBaseUrl: "https://discord.com/api/v10/" } }).channels.discord.apiBaseUrl).toBe(
      "https://discord.com/api/v10",
    );
    expect(() => config({ discord: { enabled: true, botToken: "x" } })).toThrow(/channels\.discord.*botToken|botToken.*channels\.discord/);
    expect(() => config({ discord: { enabled: true, apiBaseUrl: "http://discord.example/api" } })).toThrow(/channels\.discord\.apiBaseUrl/);
  });

  it("ISSUE24-4 OpenAPI documents POST /webhooks/discord/{agent_id} (signature auth, 200 interaction response, 401, 404)", async () => {
    const doc = (await (await discordApp().request("https://gateway.test/openapi.json", {}, env)).json()) as any;
    const op = doc.paths["/webhooks/discord/{agent_id}"].post;
    expect(op["x-auth"]).toBe("signature");
    expect(Object.keys(op.responses).sort()).toEqual(["200", "400", "401", "404"]);
    expect(op.responses["200"].content["application/json"].schema.properties.type).toEqual({ type: "integer" });
  });
});
