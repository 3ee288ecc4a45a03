#!/usr/bin/env node
// `npm run -s signing-key`: a new Ed25519 signing key for the gateway (GATEWAY_SIGNING_KEY, docs/configuration.md,
// D-089), made with node:crypto on this machine — it never leaves it except where you put it.
//
//   stdout: the private JWK {kty, crv, kid, x, d}, one line, the value of the GATEWAY_SIGNING_KEY secret:
//             npm run -s signing-key | npx wrangler secret put GATEWAY_SIGNING_KEY
//   stderr: its public JWK, to keep for GATEWAY_SIGNING_KEYS_RETIRED when this key is replaced one day.
//
// The kid is the key's RFC 7638 thumbprint (SHA-256 of its canonical public JWK, base64url): it names the key
// and nothing else, so two keys never share one. scripts/start.mjs uses `signingJwk` for a development key.
import { createHash, generateKeyPairSync } from "node:crypto";
import { fileURLToPath } from "node:url";

/** A fresh Ed25519 private JWK with a thumbprint kid, members in the order the docs show. */
export function signingJwk() {
  const { x, d } = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });
  const kid = createHash("sha256")
    .update(JSON.stringify({ crv: "Ed25519", kty: "OKP", x }))
    .digest("base64url");
  return { kty: "OKP", crv: "Ed25519", kid, x, d };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const jwk = signingJwk();
  const { d: _private, ...publicJwk } = jwk;
  process.stdout.write(`${JSON.stringify(jwk)}\n`);
  process.stderr.write(
    `signing-key: the line above is GATEWAY_SIGNING_KEY (private: a Worker secret only).\n` +
      `signing-key: its public JWK, for GATEWAY_SIGNING_KEYS_RETIRED once you replace it:\n${JSON.stringify(publicJwk)}\n`,
  );
}
