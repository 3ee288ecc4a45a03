/**
 * Issue 24 §4 with issue 20 §5: the Discord interaction token authorizes follow-ups for 15 minutes, so it goes
 * only to the origin the deployment's own config names for `channels.discord.apiBaseUrl`. A config version posted
 * by an admin that points Discord elsewhere gets the interaction acknowledged, but the follow-up withheld — the
 * server at the new origin never sees the token.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { DISCORD_WITHHELD } from "../../src/channels/replies";
import { bundledConfig } from "../../src/config/load";
import { forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { mockProvider, requestsTo, uniqueHost } from "../support/config";
import { until } from "../support/runs";

const app = createApp({ logger: createLogger("error") });
const APP_ID = "1100000000000000001";
const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
const PUBLIC_KEY = toHex(new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer));

afterEach(async () => {
  await env.DB.prepare("DELETE FROM config_versions").run();
  forgetAdminGenerations();
  forgetConfigInForce();
});

it("ISSUE24-4 an admin-posted config moving Discord to another origin: acknowledged, the follow-up withheld, the new origin never sees the token", async () => {
  const dc = `ok-${crypto.randomUUID().slice(0, 8)}.discord.test`;
  const doc = JSON.parse(JSON.stringify(bundledConfig()));
  doc.models = { default: "lm:kimi-k1-128k", providers: { lm: { ...mockProvider(uniqueHost("ok")), local: true } } };
  doc.agents = { main: { tools: { allow: [] } } };
  doc.channels.discord = { enabled: true, apiBaseUrl: `https://${dc}/api/v10` };
  const stored = await postConfigVersion(env.DB, doc, { actor: "admin", now: new Date() });
  expect(stored.ok).toBe(true);
  forgetAdminGenerations();
  forgetConfigInForce();

  const channelId = String(1_500_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e15)));
  const raw = JSON.stringify({
    id: String(1_600_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e15))),
    application_id: APP_ID,
    type: 2,
    token: "aW50ZXJhY3Rpb246c2VjcmV0",
    channel_id: channelId,
    guild_id: "1300000000000000001",
    member: { user: { id: "1700000000000000001" } },
    data: { name: "ask", options: [{ name: "message", type: 3, value: "hi" }] },
  });
  const at = Math.floor(Date.now() / 1000);
  const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", pair.privateKey, new TextEncoder().encode(`${at}${raw}`)));
  const res = await app.request(
    "https://gateway.test/webhooks/discord/main",
    {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Signature-Ed25519": toHex(sig), "X-Signature-Timestamp": String(at) },
      body: raw,
    },
    { ...env, DISCORD_PUBLIC_KEY: PUBLIC_KEY, DISCORD_APPLICATION_ID: APP_ID },
  );
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ type: 5 });
  const session = env.SESSIONS.getByName(`agent:main:discord:${APP_ID}:group:${channelId}`);
  const row = () =>
    runInDurableObject(session, (_, state) => {
      const rows = state.storage.sql
        .exec<{ status: string; last_error: string | null }>("SELECT status, last_error FROM reply_outbox")
        .toArray();
      return rows[0] ?? null;
    });
  await until(async () => (await row())?.status === "failed");
  expect(await row()).toEqual({ status: "failed", last_error: DISCORD_WITHHELD });
  expect(DISCORD_WITHHELD).toBe(
    `the Discord interaction token is withheld: channel "discord" is configured at another origin than the deployment's own config names; deploy the new channels.discord.apiBaseUrl instead`,
  );
  expect(await requestsTo(dc)).toEqual([]);
});
