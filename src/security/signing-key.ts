/**
 * The gateway's own signing key (issue 33, D-089): one Ed25519 key pair that says "this came from this gateway",
 * which anyone can check with the public half and nobody but the deployment can produce. Outbound webhooks carry a
 * `v1a` signature made with it (src/scheduler/webhook-keys.ts); a later issue signs run receipts with it too, so
 * this module only signs bytes and publishes the public keys — it knows nothing about what is signed.
 *
 *   GATEWAY_SIGNING_KEY           the private key: an Ed25519 private JWK `{kty:"OKP", crv:"Ed25519", kid, x, d}`
 *                                 (`npm run -s signing-key` makes one). A Worker secret only (deployment-only,
 *                                 src/security/stored-secrets.ts): whoever can replace it can sign as the gateway.
 *   GATEWAY_SIGNING_KEYS_RETIRED  optional: a JSON array (or JWKS `{keys: […]}`) of earlier public JWKs
 *                                 `{kty, crv, kid, x}`, still published so signatures made before a rotation
 *                                 keep verifying. Public values, never a `d`.
 *
 * Fail closed: a key that is missing, not a JWK of that shape, whose `x` is not the public half of its `d`, or a
 * retired list that is malformed or repeats a kid, makes every feature that signs refuse with `problem` — one line
 * that names the variable and the rule, never a value. The outcome is kept per isolate for the secrets it was
 * read from, so the key is imported and checked once, not per webhook.
 */

/** A published key, as RFC 7517/8037 write it for EdDSA. */
export interface PublicJwk {
  kty: "OKP";
  crv: "Ed25519";
  kid: string;
  x: string;
  use: "sig";
  alg: "EdDSA";
}

/** What a JWKS endpoint serves: the key in use first, then the retired ones in the order listed. */
export interface Jwks {
  keys: PublicJwk[];
}

/** Signs bytes with the current key; `kid` names it in the JWKS. */
export interface GatewaySigner {
  readonly kid: string;
  sign(data: Uint8Array): Promise<Uint8Array<ArrayBuffer>>;
}

export type SigningKeys = { ok: true; signer: GatewaySigner; jwks: Jwks } | { ok: false; problem: string };

export interface SigningEnv {
  GATEWAY_SIGNING_KEY?: string | undefined;
  GATEWAY_SIGNING_KEYS_RETIRED?: string | undefined;
}

/** A key id: what a verifier matches on, so short and plain. */
const KID = /^[A-Za-z0-9._-]{1,64}$/;
/** 32 bytes in unpadded base64url: an Ed25519 public key (`x`) or seed (`d`). */
const KEY_BYTES = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;
const MAKE_ONE = "npm run -s signing-key makes one";

type Parsed<T> = { ok: true; value: T } | { ok: false; problem: string };
type PrivateJwk = { kid: string; x: string; d: string };

/** The outcome for the secrets it was read from; the settled value, not a promise, so no request awaits another's. */
let cached: { source: string; keys: SigningKeys } | undefined;

/** The gateway's signer and JWKS, or why it has none. Never throws. */
export async function gatewaySigningKeys(env: SigningEnv): Promise<SigningKeys> {
  const source = JSON.stringify([env.GATEWAY_SIGNING_KEY ?? null, env.GATEWAY_SIGNING_KEYS_RETIRED ?? null]);
  if (cached?.source === source) return cached.keys;
  const keys = await loadKeys(env);
  cached = { source, keys };
  return keys;
}

/**
 * The private `d` of a signing key's text, for literal redaction (src/security/redact.ts) — even when the key is
 * otherwise malformed, since a `d` is private whatever else is wrong; none when there is no string `d`.
 */
export function privateKeyParts(text: string): string[] {
  const d = jsonObject(text)?.d;
  return typeof d === "string" && d !== "" ? [d] : [];
}

async function loadKeys(env: SigningEnv): Promise<SigningKeys> {
  if (!env.GATEWAY_SIGNING_KEY) return { ok: false, problem: `GATEWAY_SIGNING_KEY is not set on this gateway (${MAKE_ONE})` };
  const current = parsePrivateJwk(env.GATEWAY_SIGNING_KEY);
  if (!current.ok) return current;
  const retired = parseRetired(env.GATEWAY_SIGNING_KEYS_RETIRED);
  if (!retired.ok) return retired;
  if (retired.value.some((k) => k.kid === current.value.kid))
    return { ok: false, problem: "GATEWAY_SIGNING_KEYS_RETIRED lists the kid of GATEWAY_SIGNING_KEY; a kid names one key" };
  const signer = await importSigner(current.value);
  if (!signer) return { ok: false, problem: "GATEWAY_SIGNING_KEY: x is not the public key of d (or not an Ed25519 key)" };
  return { ok: true, signer, jwks: { keys: [publicJwk(current.value), ...retired.value] } };
}

const publicJwk = (k: { kid: string; x: string }): PublicJwk => ({
  kty: "OKP",
  crv: "Ed25519",
  kid: k.kid,
  x: k.x,
  use: "sig",
  alg: "EdDSA",
});

/** The JSON of an object, or null. */
function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(text);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Why `jwk` is not an Ed25519 JWK with a usable kid and `x` (the members a public key needs), or null. */
function publicRule(jwk: Record<string, unknown>): string | null {
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519") return 'must be an Ed25519 JWK (kty "OKP", crv "Ed25519")';
  if (typeof jwk.kid !== "string" || !KID.test(jwk.kid)) return "needs a kid of 1–64 letters, digits, . _ -";
  if (typeof jwk.x !== "string" || !KEY_BYTES.test(jwk.x)) return "needs x: 32 bytes in unpadded base64url";
  if (jwk.alg !== undefined && jwk.alg !== "EdDSA") return 'alg, when given, must be "EdDSA"';
  if (jwk.use !== undefined && jwk.use !== "sig") return 'use, when given, must be "sig"';
  return null;
}

function parsePrivateJwk(text: string): Parsed<PrivateJwk> {
  const jwk = jsonObject(text);
  const bad = (rule: string) => ({ ok: false as const, problem: `GATEWAY_SIGNING_KEY ${rule} (${MAKE_ONE})` });
  if (!jwk) return bad("is not a JSON object (an Ed25519 private JWK)");
  const rule = publicRule(jwk);
  if (rule) return bad(rule);
  if (typeof jwk.d !== "string" || !KEY_BYTES.test(jwk.d)) return bad("needs d: the private key, 32 bytes in unpadded base64url");
  return { ok: true, value: { kid: jwk.kid as string, x: jwk.x as string, d: jwk.d } };
}

function parseRetired(text: string | undefined): Parsed<PublicJwk[]> {
  if (text === undefined || text.trim() === "") return { ok: true, value: [] };
  const bad = (rule: string) => ({ ok: false as const, problem: `GATEWAY_SIGNING_KEYS_RETIRED ${rule}` });
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    return bad("is not JSON (a JSON array of Ed25519 public JWKs, or a JWKS)");
  }
  if (list !== null && typeof list === "object" && !Array.isArray(list)) list = (list as { keys?: unknown }).keys;
  if (!Array.isArray(list)) return bad("must be a JSON array of Ed25519 public JWKs, or a JWKS {keys: […]}");
  const keys: PublicJwk[] = [];
  for (const [i, item] of list.entries()) {
    const jwk = item !== null && typeof item === "object" && !Array.isArray(item) ? (item as Record<string, unknown>) : {};
    const rule = publicRule(jwk) ?? ("d" in jwk ? "must hold public keys only: remove d" : null);
    if (rule) return bad(`[${i}] ${rule}`);
    if (keys.some((k) => k.kid === jwk.kid)) return bad(`[${i}] repeats the kid of an earlier key`);
    keys.push(publicJwk(jwk as { kid: string; x: string }));
  }
  return { ok: true, value: keys };
}

/**
 * The key imported for signing, checked against its own `x` by signing a probe and verifying it with the public
 * key alone — a JWK whose `x` belongs to another key would publish a key that verifies nothing. Null when it fails.
 */
async function importSigner(k: PrivateJwk): Promise<GatewaySigner | null> {
  try {
    const jwk = { kty: "OKP", crv: "Ed25519", x: k.x, d: k.d };
    const privateKey = await crypto.subtle.importKey("jwk", jwk, { name: "Ed25519" }, false, ["sign"]);
    const publicKey = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: k.x }, { name: "Ed25519" }, false, ["verify"]);
    const probe = new TextEncoder().encode("sophie-gateway signing key probe");
    const signature = await crypto.subtle.sign("Ed25519", privateKey, probe);
    if (!(await crypto.subtle.verify("Ed25519", publicKey, signature, probe))) return null;
    // The copy gives WebCrypto a view of a plain ArrayBuffer, whatever buffer the caller's bytes sit in.
    return { kid: k.kid, sign: async (data) => new Uint8Array(await crypto.subtle.sign("Ed25519", privateKey, new Uint8Array(data))) };
  } catch {
    return null;
  }
}
