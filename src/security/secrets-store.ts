/**
 * The admin secrets store (S3 §5: `POST /api/admin/secrets` is one-way ingestion; DESIGN §4: AES-GCM in D1,
 * key from `SECRETS_ENCRYPTION_KEY`). A value is encrypted before it reaches D1 — AES-256-GCM, a fresh
 * random 96-bit IV per write, the secret's name as additional authenticated data (so a ciphertext cannot be
 * moved to another name) — and no route ever returns it: listing shows names and timestamps only.
 * `decryptSecret` exists for the gateway's own use of stored secrets. Without a valid key nothing is stored
 * or read (fail closed).
 */
import { bumpSecretsGeneration } from "../storage/admin-generation";

export const SECRET_NAME = /^[A-Z][A-Z0-9_]{0,127}$/;
export const MAX_SECRET_VALUE_CHARS = 16_384;

const b64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
const unb64 = (text: string) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

/** The AES-256-GCM key from `SECRETS_ENCRYPTION_KEY` (base64 of exactly 32 bytes), or null when it is missing or malformed. */
export async function secretsKey(raw: string | undefined): Promise<CryptoKey | null> {
  if (!raw || !/^[A-Za-z0-9+/]{43}=$/.test(raw.trim())) return null;
  let bytes: Uint8Array;
  try {
    bytes = unb64(raw.trim());
  } catch {
    return null;
  }
  if (bytes.length !== 32) return null;
  return crypto.subtle.importKey("raw", bytes, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
}

export interface SecretListing {
  name: string;
  created_at: string;
  updated_at: string;
}

/** Encrypts and stores `value` under `name` (replacing an earlier value); returns whether it was new. */
export async function putSecret(
  db: D1Database,
  key: CryptoKey,
  name: string,
  value: string,
  now: Date,
): Promise<{ created: boolean; secret: SecretListing }> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ciphertext = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: new TextEncoder().encode(name) },
      key,
      new TextEncoder().encode(value),
    ),
  );
  const at = now.toISOString();
  const existing = await db.prepare("SELECT created_at FROM admin_secrets WHERE name = ?1").bind(name).first<{ created_at: string }>();
  // The write and the generation bump commit together, so every isolate that sees the bump reads the new value.
  await db.batch([
    db
      .prepare(
        `INSERT INTO admin_secrets (name, iv, ciphertext, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (name) DO UPDATE SET iv = excluded.iv, ciphertext = excluded.ciphertext, updated_at = excluded.updated_at`,
      )
      .bind(name, b64(iv), b64(ciphertext), at),
    bumpSecretsGeneration(db),
  ]);
  return { created: !existing, secret: { name, created_at: existing?.created_at ?? at, updated_at: at } };
}

/** Names and timestamps, in name order — never values. */
export async function listSecrets(db: D1Database): Promise<SecretListing[]> {
  return (await db.prepare("SELECT name, created_at, updated_at FROM admin_secrets ORDER BY name").all<SecretListing>()).results;
}

export async function deleteSecret(db: D1Database, name: string): Promise<boolean> {
  const [r] = await db.batch([db.prepare("DELETE FROM admin_secrets WHERE name = ?1").bind(name), bumpSecretsGeneration(db)]);
  return r?.meta.changes === 1;
}

/** A stored value, for the gateway's own use; null when absent or when it does not decrypt under this key and name. */
export async function decryptSecret(db: D1Database, key: CryptoKey, name: string): Promise<string | null> {
  const row = await db.prepare("SELECT name, iv, ciphertext FROM admin_secrets WHERE name = ?1").bind(name).first<StoredRow>();
  return row ? decryptRow(key, row) : null;
}

/** Every stored value that decrypts under this key, by name (for the gateway's own use, never a response). */
export async function decryptAllSecrets(db: D1Database, key: CryptoKey): Promise<Record<string, string>> {
  const rows = await db.prepare("SELECT name, iv, ciphertext FROM admin_secrets ORDER BY name").all<StoredRow>();
  const values: Record<string, string> = {};
  for (const row of rows.results) {
    const value = await decryptRow(key, row);
    if (value !== null) values[row.name] = value;
  }
  return values;
}

interface StoredRow {
  name: string;
  iv: string;
  ciphertext: string;
}

/** A row's plaintext, or null when it does not authenticate under this key and its own name. */
async function decryptRow(key: CryptoKey, row: StoredRow): Promise<string | null> {
  try {
    const plain = await crypto.subtle.decrypt(
      { name: "AES-GCM", iv: unb64(row.iv), additionalData: new TextEncoder().encode(row.name) },
      key,
      unb64(row.ciphertext),
    );
    return new TextDecoder().decode(plain);
  } catch {
    return null;
  }
}
