/**
 * Configuration versions (S3 §5 `POST /api/admin/config` "persist validated config"; DESIGN §4).
 *
 * The configuration in force is the newest admin-posted version in D1 (migrations/0011_config_versions.sql),
 * or the bundled config/gateway.json5 when there is none. A posted config replaces the whole file (no merge)
 * and passes exactly the validation the bundled file passes at build time (`parseGatewayConfig`).
 *
 * Which wins, deploy or POST: the later change. Each version records the hash of the bundled file in force
 * when it was posted; a deploy that changes the bundled file therefore supersedes every earlier POST (the
 * bundled file is in force again until an admin posts anew). A stored version that no longer validates (a
 * deploy tightened the schema) is never used: the bundled file stays in force and `problem` says why.
 *
 * Every isolate follows the newest version within `ADMIN_REFRESH_MS` (src/storage/admin-generation.ts).
 */
import { BUNDLED_CONFIG } from "../generated/config";
import { sha256Hex } from "../prompts/hash";
import { adminGenerations } from "../storage/admin-generation";
import type { ConfigIssue } from "./issues";
import { bundledConfig } from "./load";
import { parseGatewayConfig } from "./parse";
import type { GatewayConfig } from "./schema";

export interface ConfigInForce {
  config: GatewayConfig;
  /** `admin`: a posted version; `bundled`: config/gateway.json5 as deployed. */
  source: "bundled" | "admin";
  /** The version in force (0 for the bundled file). */
  version: number;
  /** sha256 of the JSON in force (the posted body, or the bundled file's JSON). */
  sha256: string;
  /** Why the newest posted version is not in force, when it is not. */
  problem?: string;
}

export interface ConfigVersionRecord {
  version: number;
  sha256: string;
  bundled_sha256: string;
  actor: string;
  created_at: string;
}

let bundledHash: Promise<string> | undefined;

/** sha256 of the bundled configuration's JSON (fixed per deploy). */
export function bundledConfigSha256(): Promise<string> {
  bundledHash ??= sha256Hex(JSON.stringify(BUNDLED_CONFIG));
  return bundledHash;
}

/** This isolate's copy of the version in force, keyed by the newest version number it was read for. */
let cached: { newest: number; inForce: ConfigInForce } | undefined;

/** The configuration in force: the bundled file or the newest posted version (see the module comment). */
export async function configInForce(db: D1Database, now = Date.now()): Promise<ConfigInForce> {
  const { config: newest } = await adminGenerations(db, now);
  if (cached && cached.newest === newest) return cached.inForce;
  const inForce = await readInForce(db, newest);
  cached = { newest, inForce };
  return inForce;
}

async function readInForce(db: D1Database, newest: number): Promise<ConfigInForce> {
  const bundled: ConfigInForce = { config: bundledConfig(), source: "bundled", version: 0, sha256: await bundledConfigSha256() };
  if (newest === 0) return bundled;
  const row = await db
    .prepare("SELECT version, body, sha256, bundled_sha256 FROM config_versions WHERE version = ?1")
    .bind(newest)
    .first<{ version: number; body: string; sha256: string; bundled_sha256: string }>();
  if (!row) return bundled;
  if (row.bundled_sha256 !== bundled.sha256)
    return {
      ...bundled,
      problem: `version ${row.version} was posted before the deployed config/gateway.json5 changed; the deploy is newer`,
    };
  const parsed = parseGatewayConfig(JSON.parse(row.body));
  if (!parsed.ok)
    return {
      ...bundled,
      problem: `version ${row.version} no longer validates (${parsed.issues.length} issue(s), first: ${parsed.issues[0]?.path}: ${parsed.issues[0]?.message})`,
    };
  return { config: parsed.value, source: "admin", version: row.version, sha256: row.sha256 };
}

export type PostConfigResult =
  | { ok: true; record: ConfigVersionRecord }
  | { ok: false; reason: "invalid"; issues: ConfigIssue[] }
  | { ok: false; reason: "stale"; newest: number };

/**
 * Validates `raw` and stores it as the next version. With `expectedNewest` (from `If-Match`), stores only if
 * the newest version is still that one (0 = none yet), so two admins editing at once cannot lose a change.
 * `refuse` adds the caller's own rules: a config it names issues for is not stored.
 */
export async function postConfigVersion(
  db: D1Database,
  raw: unknown,
  o: { actor: string; now: Date; expectedNewest?: number; refuse?: (config: GatewayConfig) => ConfigIssue[] },
): Promise<PostConfigResult> {
  const parsed = parseGatewayConfig(raw);
  if (!parsed.ok) return { ok: false, reason: "invalid", issues: parsed.issues };
  // The caller's rules beyond the schema (secrets bound to origins, issue 20 §5).
  const refused = o.refuse?.(parsed.value) ?? [];
  if (refused.length > 0) return { ok: false, reason: "invalid", issues: refused };
  const body = JSON.stringify(raw);
  const sha256 = await sha256Hex(body);
  const bundledSha = await bundledConfigSha256();
  const createdAt = o.now.toISOString();
  // One statement: the next number and the If-Match check are decided where the row is written (D1 runs
  // statements one at a time, so two concurrent posts cannot both take the same number or both pass the check).
  const inserted = await db
    .prepare(
      `INSERT INTO config_versions (version, body, sha256, bundled_sha256, actor, created_at)
       SELECT COALESCE(MAX(version), 0) + 1, ?1, ?2, ?3, ?4, ?5 FROM config_versions
       HAVING ?6 IS NULL OR COALESCE(MAX(version), 0) = ?6
       RETURNING version`,
    )
    .bind(body, sha256, bundledSha, o.actor, createdAt, o.expectedNewest ?? null)
    .first<{ version: number }>();
  if (!inserted) {
    const newest = await db.prepare("SELECT COALESCE(MAX(version), 0) AS v FROM config_versions").first<{ v: number }>();
    return { ok: false, reason: "stale", newest: newest?.v ?? 0 };
  }
  return { ok: true, record: { version: inserted.version, sha256, bundled_sha256: bundledSha, actor: o.actor, created_at: createdAt } };
}

/** Posted versions, newest first. */
export async function listConfigVersions(db: D1Database, o: { limit: number; before?: number }): Promise<ConfigVersionRecord[]> {
  const rows = await db
    .prepare(
      `SELECT version, sha256, bundled_sha256, actor, created_at FROM config_versions
       WHERE ?1 IS NULL OR version < ?1 ORDER BY version DESC LIMIT ?2`,
    )
    .bind(o.before ?? null, o.limit)
    .all<ConfigVersionRecord>();
  return rows.results;
}

/** One posted version's body (as posted), or null. */
export async function configVersionBody(db: D1Database, version: number): Promise<unknown | null> {
  const row = await db.prepare("SELECT body FROM config_versions WHERE version = ?1").bind(version).first<{ body: string }>();
  return row ? JSON.parse(row.body) : null;
}

/** Forgets this isolate's copy (tests; the next call reads D1). */
export function forgetConfigInForce(): void {
  cached = undefined;
}
