/**
 * Operator views and the secrets store (S3 §5 "Dashboard Admin APIs"; DESIGN §3, §4): status, the config in
 * force with sensitive values blanked, and one-way secret ingestion — AES-GCM at rest, never retrievable.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { blankSensitive } from "../../src/http/admin/config";
import { decryptSecret, secretsKey } from "../../src/security/secrets-store";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, call } from "../support/runs";

const app = appFor(runConfig(uniqueHost("ok")));
// Provider-key names: the store takes only the secrets the gateway reads (src/security/stored-secrets.ts).
const name = () => `T${crypto.randomUUID().slice(0, 8).toUpperCase()}_API_KEY`;

describe("S3 §5 GET /api/admin/status and /api/admin/config", () => {
  it("status: the default model, its provider's readiness and recent runs", async () => {
    const res = await call(app, "GET", "/api/admin/status", undefined, ADMIN);
    expect(res.status).toBe(200);
    expect(res.body.model).toEqual({ ref: "moonshot:kimi-k1-128k", provider: "moonshot", api_model_id: "kimi-k1-128k", local: false });
    expect(res.body.provider_status).toMatchObject({ mode: "warn", status: "ok" });
    expect(Array.isArray(res.body.runs)).toBe(true);
  });

  it("config: the configuration in force, with every credential-looking value blanked; api tokens are refused", async () => {
    const res = await call(app, "GET", "/api/admin/config", undefined, ADMIN);
    expect(res.status).toBe(200);
    expect(res.body.models.default).toBe("moonshot:kimi-k1-128k");
    expect(res.body.scheduler.maxFiringsPerTick).toBe(200);
    expect((await call(app, "GET", "/api/admin/config", undefined, ALICE)).status).toBe(403);
    expect(
      blankSensitive({ a: { apiKey: "x", token: "y", url: "https://x.test" }, b: ["sk-abcdefghijklmnopqrstuvwxyz0123456789"] }),
    ).toEqual({
      a: { apiKey: "", token: "", url: "https://x.test" },
      b: [""],
    });
  });
});

describe("S3 §5 secrets: one-way ingestion", () => {
  it("POST stores (201), a second POST replaces (200); the value is never echoed, listed or logged", async () => {
    const n = name();
    const value = `super-secret-${crypto.randomUUID()}`;
    const created = await call(app, "POST", "/api/admin/secrets", { name: n, value }, ADMIN);
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ name: n, created_at: expect.any(String), updated_at: created.body.created_at });
    const replaced = await call(app, "POST", "/api/admin/secrets", { name: n, value: `${value}-2` }, ADMIN);
    expect(replaced.status).toBe(200);
    expect(replaced.body.created_at).toBe(created.body.created_at);
    const list = await call(app, "GET", "/api/admin/secrets", undefined, ADMIN);
    expect(list.body.secrets.find((s: { name: string }) => s.name === n)).toEqual(replaced.body);
    for (const text of [created.text, replaced.text, list.text]) expect(text).not.toContain(value);
  });

  it("at rest it is AES-GCM ciphertext bound to its name; only the gateway's key decrypts it", async () => {
    const n = name();
    const value = `at-rest-${crypto.randomUUID()}`;
    await call(app, "POST", "/api/admin/secrets", { name: n, value }, ADMIN);
    const row = await env.DB.prepare("SELECT iv, ciphertext FROM admin_secrets WHERE name = ?1")
      .bind(n)
      .first<{ iv: string; ciphertext: string }>();
    expect(JSON.stringify(row)).not.toContain(value);
    expect(atob(row?.iv ?? "").length).toBe(12);
    expect(atob(row?.ciphertext ?? "").length).toBe(value.length + 16);
    const key = (await secretsKey(env.SECRETS_ENCRYPTION_KEY)) as CryptoKey;
    expect(await decryptSecret(env.DB, key, n)).toBe(value);
    // Moved to another name, the ciphertext no longer decrypts (the name is authenticated data).
    const other = name();
    await env.DB.prepare(
      "INSERT INTO admin_secrets (name, iv, ciphertext, created_at, updated_at) SELECT ?2, iv, ciphertext, created_at, updated_at FROM admin_secrets WHERE name = ?1",
    )
      .bind(n, other)
      .run();
    expect(await decryptSecret(env.DB, key, other)).toBeNull();
    const wrong = (await secretsKey(btoa("x".repeat(32)))) as CryptoKey;
    expect(await decryptSecret(env.DB, wrong, n)).toBeNull();
  });

  it("DELETE removes it (200), then 404; bad names and unknown fields are 400", async () => {
    const n = name();
    await call(app, "POST", "/api/admin/secrets", { name: n, value: "v" }, ADMIN);
    expect(await call(app, "DELETE", `/api/admin/secrets/${n}`, undefined, ADMIN)).toMatchObject({ status: 200, body: { deleted: n } });
    expect((await call(app, "DELETE", `/api/admin/secrets/${n}`, undefined, ADMIN)).status).toBe(404);
    expect((await call(app, "POST", "/api/admin/secrets", { name: "lower", value: "v" }, ADMIN)).status).toBe(400);
    expect((await call(app, "POST", "/api/admin/secrets", { name: n, value: "" }, ADMIN)).status).toBe(400);
    expect((await call(app, "POST", "/api/admin/secrets", { name: n, value: "v", echo: true }, ADMIN)).body).toEqual({
      error: { code: "invalid.request", message: "unknown field echo" },
    });
  });

  it("without a valid SECRETS_ENCRYPTION_KEY nothing is stored or listed: 503 secrets.unavailable", async () => {
    for (const key of [undefined, "short", btoa("x".repeat(31))]) {
      const res = await app.request(
        "https://gateway.test/api/admin/secrets",
        {
          method: "POST",
          headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" },
          body: JSON.stringify({ name: name(), value: "v" }),
        },
        { ...env, SECRETS_ENCRYPTION_KEY: key },
      );
      expect({ status: res.status, body: await res.json() }).toEqual({
        status: 503,
        body: {
          error: {
            code: "secrets.unavailable",
            message: "the secrets store needs SECRETS_ENCRYPTION_KEY (base64 of 32 bytes), which is not set",
          },
        },
      });
    }
  });
});
