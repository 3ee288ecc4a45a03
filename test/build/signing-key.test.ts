/**
 * Issue 33 (D-089): `npm run -s signing-key` (scripts/signing-key.mjs, node:crypto) makes a GATEWAY_SIGNING_KEY the
 * gateway's own loader (src/security/signing-key.ts, WebCrypto) accepts: the private JWK on stdout, its public half on
 * stderr, a kid that is the key's RFC 7638 thumbprint. Runs in Node.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { gatewaySigningKeys } from "../../src/security/signing-key.ts";

const root = join(import.meta.dirname, "..", "..");

function generate(): { jwk: Record<string, string>; stderr: string } {
  const out = spawnSync(process.execPath, [join(root, "scripts", "signing-key.mjs")], { encoding: "utf8" });
  expect(out.status).toBe(0);
  return { jwk: JSON.parse(out.stdout) as Record<string, string>, stderr: out.stderr };
}

describe("ISSUE33 webhooks: npm run signing-key", () => {
  it("ISSUE33 webhooks: prints an Ed25519 private JWK with a thumbprint kid, its public half on stderr, a new key each time", () => {
    const { jwk, stderr } = generate();
    expect(Object.keys(jwk)).toEqual(["kty", "crv", "kid", "x", "d"]);
    expect([jwk.kty, jwk.crv]).toEqual(["OKP", "Ed25519"]);
    expect(jwk.x).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(jwk.d).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const thumbprint = createHash("sha256").update(`{"crv":"Ed25519","kty":"OKP","x":"${jwk.x}"}`).digest("base64url");
    expect(jwk.kid).toBe(thumbprint);
    const { d: _private, ...publicJwk } = jwk;
    expect(stderr.split("\n")).toEqual([
      "signing-key: the line above is GATEWAY_SIGNING_KEY (private: a Worker secret only).",
      "signing-key: its public JWK, for GATEWAY_SIGNING_KEYS_RETIRED once you replace it:",
      JSON.stringify(publicJwk),
      "",
    ]);
    expect(stderr.includes(jwk.d as string)).toBe(false);
    expect(generate().jwk.x).not.toBe(jwk.x);
  });

  it("ISSUE33 webhooks: the gateway's loader accepts the key: its JWKS lists the public half, and what it signs verifies with it", async () => {
    const { jwk } = generate();
    const keys = await gatewaySigningKeys({ GATEWAY_SIGNING_KEY: JSON.stringify(jwk) });
    if (!keys.ok) throw new Error(keys.problem);
    expect(keys.jwks).toEqual({ keys: [{ kty: "OKP", crv: "Ed25519", kid: jwk.kid, x: jwk.x, use: "sig", alg: "EdDSA" }] });
    const data = new TextEncoder().encode("msg_1.1893456000.{}");
    const signature = await keys.signer.sign(data);
    const publicKey = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: jwk.x }, { name: "Ed25519" }, false, [
      "verify",
    ]);
    expect(await crypto.subtle.verify("Ed25519", publicKey, signature, data)).toBe(true);
  });
});
