/**
 * Prompt manifests stored per turn in the SessionDO (S2 §3 "recorded with the
 * session"): hash-only, written once per turn id, read back by admins.
 */
import { PromptManifest } from "../prompts/manifest";
import type { Sql } from "../storage/sql";

export interface StoredManifest {
  seq: number;
  turnId: string;
  createdAt: string;
  manifest: PromptManifest;
}

export type RecordResult = { ok: true; stored: StoredManifest } | { ok: false; reason: "different_manifest" };

/**
 * Records the manifest of `turnId`. Idempotent: a retried turn with the same
 * manifest is a no-op; a different manifest under the same turn id is refused
 * (a turn's prompt is fixed once it has been sent).
 */
export function recordManifest(sql: Sql, turnId: string, manifest: PromptManifest, now: Date): RecordResult {
  const valid = PromptManifest.parse(manifest);
  const json = JSON.stringify(valid);
  sql.run`INSERT INTO prompt_manifests (turn_id, stack_sha256, manifest, created_at)
          VALUES (${turnId}, ${valid.stack_sha256}, ${json}, ${now.toISOString()})
          ON CONFLICT (turn_id) DO NOTHING`;
  const stored = getManifest(sql, turnId);
  if (!stored) throw new Error(`manifest for turn ${turnId} was not stored`);
  if (JSON.stringify(stored.manifest) !== json) return { ok: false, reason: "different_manifest" };
  return { ok: true, stored };
}

type Row = { seq: number; turn_id: string; manifest: string; created_at: string };

function fromRow(row: Row): StoredManifest {
  return { seq: row.seq, turnId: row.turn_id, createdAt: row.created_at, manifest: PromptManifest.parse(JSON.parse(row.manifest)) };
}

/** The manifest of one turn, if recorded. */
export function getManifest(sql: Sql, turnId: string): StoredManifest | undefined {
  const row = sql.one<Row>`SELECT seq, turn_id, manifest, created_at FROM prompt_manifests WHERE turn_id = ${turnId}`;
  return row ? fromRow(row) : undefined;
}

/** The most recent manifests, newest first. */
export function listManifests(sql: Sql, limit: number): StoredManifest[] {
  const n = Math.max(1, Math.min(500, Math.floor(limit)));
  return sql.all<Row>`SELECT seq, turn_id, manifest, created_at FROM prompt_manifests ORDER BY seq DESC LIMIT ${n}`.map(fromRow);
}

/** The manifests of one run's model calls (turn ids `<runId>:…`), oldest first. */
export function runManifests(sql: Sql, runId: string): StoredManifest[] {
  return sql.all<{
    turn_id: string;
  }>`SELECT turn_id FROM prompt_manifests WHERE turn_id >= ${`${runId}:`} AND turn_id < ${`${runId};`} ORDER BY seq`
    .map((r) => getManifest(sql, r.turn_id))
    .filter((m): m is StoredManifest => m !== undefined);
}
