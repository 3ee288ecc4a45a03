/**
 * Issue 24 §4 with issue 20 §5: DISCORD_PUBLIC_KEY and DISCORD_APPLICATION_ID can be stored through
 * POST /api/admin/secrets, and a replaced public key stays accepted for `channels.secretRotationOverlapSeconds`,
 * as the other inbound webhook secrets do; after the overlap only the new key verifies.
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { forgetStoredSecrets } from "../../src/security/stored-secrets";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, appFor, call } from "../support/runs";

const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const keyPair = async () => (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
const publicHex = async (p: CryptoKeyPair) => toHex(new Uint8Array((await crypto.subtle.exportKey("raw", p.publicKey)) as ArrayBuffer));

afterEach(async () => {
  await env.DB.prepare("DELETE FROM admin_secrets").run();
  forgetAdminGenerations();
  forgetStoredSecrets();
});

it("ISSUE24-4 a rotated DISCORD_PUBLIC_KEY: old and new verify within the overlap, only the new one after it", async () => {
  const app = appFor(
    runConfig(uniqueHost("ok"), { channels: { discord: { enabled: true, apiBaseUrl: "https://ok-rot.discord.test/api/v10" } } }),
  );
  const [oldPair, newPair] = [await keyPair(), await keyPair()];
  const stored: number[] = [];
  for (const [name, value] of [
    ["DISCORD_APPLICATION_ID", "1100000000000000001"],
    ["DISCORD_PUBLIC_KEY", await publicHex(oldPair)],
    ["DISCORD_PUBLIC_KEY", await publicHex(newPair)],
  ]) {
    stored.push((await call(app, "POST", "/api/admin/secrets", { name, value }, ADMIN)).status);
  }
  expect(stored).toEqual([201, 201, 200]); // the third replaces the second
  const ping = async (p: CryptoKeyPair) => {
    const raw = JSON.stringify({ id: "1", application_id: "1100000000000000001", type: 1, token: "t", version: 1 });
    const at = Math.floor(Date.now() / 1000);
    const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", p.privateKey, new TextEncoder().encode(`${at}${raw}`)));
    const headers = { "Content-Type": "application/json", "X-Signature-Ed25519": toHex(sig), "X-Signature-Timestamp": String(at) };
    const res = await app.request("https://gateway.test/webhooks/discord/main", { method: "POST", headers, body: raw }, env);
    return [res.status, await res.json()];
  };
  expect([await ping(oldPair), await ping(newPair)]).toEqual([
    [200, { type: 1 }],
    [200, { type: 1 }],
  ]);
  // A day (the default overlap) and a second later.
  const at = new Date(Date.now() - 86_401_000).toISOString();
  await env.DB.prepare("UPDATE admin_secrets SET rotated_at = ?1 WHERE name = 'DISCORD_PUBLIC_KEY'").bind(at).run();
  forgetAdminGenerations();
  forgetStoredSecrets();
  expect([await ping(oldPair), await ping(newPair)]).toEqual([
    [401, { error: { code: "auth.unauthorized", message: "the discord webhook could not be verified" } }],
    [200, { type: 1 }],
  ]);
});
