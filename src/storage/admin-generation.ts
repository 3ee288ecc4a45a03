/**
 * How an isolate learns that an admin changed the configuration, the stored secrets or an API key: one D1 query for
 * three counters — the newest config version, the secrets generation and the keys generation (D-077) — made at most once per
 * `ADMIN_REFRESH_MS` per isolate (the Worker's and a Durable Object's requests in one isolate share it).
 * Every isolate therefore sees a change within `ADMIN_REFRESH_MS` of its commit; the isolate that made the
 * change calls `forgetAdminGenerations()` and sees it at once.
 */

/** The longest an isolate keeps using what it last read before asking D1 again. */
export const ADMIN_REFRESH_MS = 5_000;

export interface AdminGenerations {
  /** The newest posted config version (0: none, the bundled file is in force). */
  config: number;
  /** Bumped on every stored-secret write or delete (0: never written). */
  secrets: number;
  /** Bumped on every API key rotation or revocation (0: never), so isolates drop their cached key lookups. */
  keys: number;
}

let last: { at: number; value: AdminGenerations } | undefined;

/**
 * The counters, from this isolate's copy when it is fresh enough, else from D1. (Concurrent callers do not
 * share one in-flight query: workerd does not let a request wait on a promise another request's I/O settles.)
 */
export async function adminGenerations(db: D1Database, now = Date.now()): Promise<AdminGenerations> {
  if (last && now - last.at < ADMIN_REFRESH_MS) return last.value;
  const row = await db
    .prepare(
      `SELECT (SELECT COALESCE(MAX(version), 0) FROM config_versions) AS config,
              (SELECT COALESCE(MAX(value), 0) FROM admin_generation WHERE name = 'secrets') AS secrets,
              (SELECT COALESCE(MAX(value), 0) FROM admin_generation WHERE name = 'keys') AS keys`,
    )
    .first<AdminGenerations>();
  const value = { config: row?.config ?? 0, secrets: row?.secrets ?? 0, keys: row?.keys ?? 0 };
  last = { at: now, value };
  return value;
}

/** Drops this isolate's copy: the next call asks D1 (after this isolate changed something, and in tests). */
export function forgetAdminGenerations(): void {
  last = undefined;
}

/** The statement that bumps the secrets generation; run it in the same batch as the secret write. */
export function bumpSecretsGeneration(db: D1Database): D1PreparedStatement {
  return db.prepare("INSERT INTO admin_generation (name, value) VALUES ('secrets', 1) ON CONFLICT (name) DO UPDATE SET value = value + 1");
}

/** The statement that bumps the keys generation (a key rotated or revoked); run it in the same batch as the change. */
export function bumpKeysGeneration(db: D1Database): D1PreparedStatement {
  return db.prepare("INSERT INTO admin_generation (name, value) VALUES ('keys', 1) ON CONFLICT (name) DO UPDATE SET value = value + 1");
}
