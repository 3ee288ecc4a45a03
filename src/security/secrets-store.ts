/**
 * The admin secrets store (S3 §5: `POST /api/admin/secrets` is one-way ingestion; DESIGN §4: AES-GCM in D1,
 * key from `SECRETS_ENCRYPTION_KEY`). A value is encrypted before it reaches D1 — AES-256-GCM, a fresh
 * random 96-bit IV per write, the secret's name (and the origin it is bound to, if any) as additional
 * authenticated data (so a ciphertext cannot be moved to another name or origin) — and no route ever returns it: listing shows names and timestamps only.
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
  /** The origin a provider key or bot token may be sent to; absent: where the deployed config sends it. */
  origin?: string;
  /** When the value before the last write was replaced (inbound secrets keep it for the rotation overlap). */
  rotated_at?: string;
}

/** Additional authenticated data: the name, and the origin when the value is bound to one (neither can be moved). */
const aad = (name: string, origin: string | null) => new TextEncoder().encode(origin ? `${name}\n${origin}` : name);

async function encrypt(key: CryptoKey, name: string, origin: string | null, value: string): Promise<{ iv: string; ciphertext: string }> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ciphertext = new Uint8Array(
    await crypto.subtle.encrypt({ name: "AES-GCM", iv, additionalData: aad(name, origin) }, key, new TextEncoder().encode(value)),
  );
  return { iv: b64(iv), ciphertext: b64(ciphertext) };
}

export interface PutOptions {
  /** The origin the value is bound to (null: bound like a Worker secret, to the deployed config's origin). */
  origin?: string | null;
  /**
   * Keep the value in force before this write as the previous value (inbound webhook secrets): the replaced
   * stored value, or — on the first store — `deployedValue`, the Worker secret it overrides.
   */
  keepPrevious?: boolean;
  deployedValue?: string | undefined;
}

/** Encrypts and stores `value` under `name` (replacing an earlier value); returns whether it was new. */
export async function putSecret(
  db: D1Database,
  key: CryptoKey,
  name: string,
  value: string,
  now: Date,
  o: PutOptions = {},
): Promise<{ created: boolean; secret: SecretListing }> {
  const origin = o.origin ?? null;
  const { iv, ciphertext } = await encrypt(key, name, origin, value);
  const at = now.toISOString();
  const existing = await db.prepare("SELECT created_at FROM admin_secrets WHERE name = ?1").bind(name).first<{ created_at: string }>();
  const first = o.keepPrevious && !existing && o.deployedValue ? await encrypt(key, name, null, o.deployedValue) : null;
  // On replace, the previous value is the row's own ciphertext, moved in the same statement (no read-then-write
  // race). Only unbound (origin NULL) values are kept, so the moved ciphertext still authenticates under its name.
  const keep = o.keepPrevious && origin === null ? 1 : 0;
  // The write and the generation bump commit together, so every isolate that sees the bump reads the new value.
  await db.batch([
    db
      .prepare(
        `INSERT INTO admin_secrets (name, iv, ciphertext, created_at, updated_at, origin, previous_iv, previous_ciphertext, rotated_at)
         VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, CASE WHEN ?6 IS NULL THEN NULL ELSE ?4 END)
         ON CONFLICT (name) DO UPDATE SET
           previous_iv = CASE WHEN ?8 = 1 AND admin_secrets.origin IS NULL THEN admin_secrets.iv END,
           previous_ciphertext = CASE WHEN ?8 = 1 AND admin_secrets.origin IS NULL THEN admin_secrets.ciphertext END,
           rotated_at = CASE WHEN ?8 = 1 AND admin_secrets.origin IS NULL THEN excluded.updated_at END,
           iv = excluded.iv, ciphertext = excluded.ciphertext, updated_at = excluded.updated_at, origin = excluded.origin`,
      )
      .bind(name, iv, ciphertext, at, origin, first?.iv ?? null, first?.ciphertext ?? null, keep),
    bumpSecretsGeneration(db),
  ]);
  const rotated = (existing && keep) || first ? { rotated_at: at } : {};
  return {
    created: !existing,
    secret: { name, created_at: existing?.created_at ?? at, updated_at: at, ...(origin ? { origin } : {}), ...rotated },
  };
}

/** Names, timestamps and bound origins, in name order — never values. */
export async function listSecrets(db: D1Database): Promise<SecretListing[]> {
  const rows = await db
    .prepare("SELECT name, created_at, updated_at, origin, rotated_at FROM admin_secrets ORDER BY name")
    .all<{ name: string; created_at: string; updated_at: string; origin: string | null; rotated_at: string | null }>();
  return rows.results.map(({ origin, rotated_at, ...r }) => ({
    ...r,
    ...(origin ? { origin } : {}),
    ...(rotated_at ? { rotated_at } : {}),
  }));
}

export async function deleteSecret(db: D1Database, name: string): Promise<boolean> {
  const [r] = await db.batch([db.prepare("DELETE FROM admin_secrets WHERE name = ?1").bind(name), bumpSecretsGeneration(db)]);
  return r?.meta.changes === 1;
}

/** A stored value, for the gateway's own use; null when absent or when it does not decrypt under this key and name. */
export async function decryptSecret(db: D1Database, key: CryptoKey, name: string): Promise<string | null> {
  const row = await db.prepare("SELECT name, iv, ciphertext, origin FROM admin_secrets WHERE name = ?1").bind(name).first<StoredRow>();
  return row ? decryptValue(key, row.name, row.origin, row.iv, row.ciphertext) : null;
}

/** One stored secret as the gateway uses it: its value, the origin it is bound to, and the previous value. */
export interface StoredSecret {
  value: string;
  origin: string | null;
  previous?: { value: string; rotatedAt: number };
}

/**
 * Every stored value that decrypts under this key, by name (for the gateway's own use, never a response). One
 * query, so a value and the origin it is bound to always come from the same write.
 */
export async function decryptAllSecrets(db: D1Database, key: CryptoKey): Promise<Record<string, StoredSecret>> {
  const rows = await db
    .prepare("SELECT name, iv, ciphertext, origin, previous_iv, previous_ciphertext, rotated_at FROM admin_secrets ORDER BY name")
    .all<StoredRow>();
  const secrets: Record<string, StoredSecret> = {};
  for (const row of rows.results) {
    const value = await decryptValue(key, row.name, row.origin, row.iv, row.ciphertext);
    if (value === null) continue;
    const previous =
      row.previous_iv && row.previous_ciphertext && row.rotated_at
        ? await decryptValue(key, row.name, null, row.previous_iv, row.previous_ciphertext)
        : null;
    secrets[row.name] = {
      value,
      origin: row.origin,
      ...(previous !== null ? { previous: { value: previous, rotatedAt: Date.parse(row.rotated_at as string) } } : {}),
    };
  }
  return secrets;
}

/** Encrypts a value kept outside `admin_secrets` (env-request values), bound to `name` as additional data. */
export function sealValue(key: CryptoKey, name: string, value: string): Promise<{ iv: string; ciphertext: string }> {
  return encrypt(key, name, null, value);
}

/** The plaintext of what `sealValue` stored under `name`; null when it does not authenticate. */
export function openValue(key: CryptoKey, name: string, iv: string, ciphertext: string): Promise<string | null> {
  return decryptValue(key, name, null, iv, ciphertext);
}

interface StoredRow {
  name: string;
  iv: string;
  ciphertext: string;
  origin: string | null;
  previous_iv?: string | null;
  previous_ciphertext?: string | null;
  rotated_at?: string | null;
}

/** A ciphertext's plaintext, or null when it does not authenticate under this key, its name and its origin. */
async function decryptValue(key: CryptoKey, name: string, origin: string | null, iv: string, ciphertext: string): Promise<string | null> {
  try {
    const plain = await crypto.subtle.decrypt(
      { name: "AES-GCM", iv: unb64(iv), additionalData: aad(name, origin) },
      key,
      unb64(ciphertext),
    );
    return new TextDecoder().decode(plain);
  } catch {
    return null;
  }
}
