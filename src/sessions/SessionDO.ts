/**
 * SessionDO: one Durable Object per session key (DESIGN §1), SQLite-backed.
 *
 * A coordinator only: it owns the storage and the single-threaded execution
 * of one session, and calls plain modules for the logic. Public methods are
 * its typed RPC surface; everything else is `#private` so nothing leaks onto it.
 */
import { DurableObject } from "cloudflare:workers";
import type { PromptManifest } from "../prompts/manifest";
import { createSql, migrate, type Sql } from "../storage/sql";
import { getManifest, listManifests, type RecordResult, recordManifest, type StoredManifest } from "./manifests";
import { SESSION_MIGRATIONS } from "./schema";

export class SessionDO extends DurableObject<Env> {
  readonly #sql: Sql;
  #schemaVersion = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage.sql);
    // Apply the schema before any RPC runs; blockConcurrencyWhile holds every other event until done.
    ctx.blockConcurrencyWhile(async () => {
      this.#schemaVersion = migrate(ctx.storage, this.#sql, SESSION_MIGRATIONS);
      this.#sql.run`INSERT INTO session_meta (key, value) VALUES ('created_at', ${new Date().toISOString()}) ON CONFLICT (key) DO NOTHING`;
    });
  }

  /** The storage schema version in force and when this session's storage was first created. */
  async describe(): Promise<{ schemaVersion: number; createdAt: string }> {
    const row = this.#sql.one<{ value: string }>`SELECT value FROM session_meta WHERE key = 'created_at'`;
    return { schemaVersion: this.#schemaVersion, createdAt: row?.value ?? "" };
  }

  /** Stores the hash-only prompt manifest of a turn (idempotent per turn id; a different one is refused). */
  async recordPromptManifest(turnId: string, manifest: PromptManifest): Promise<RecordResult> {
    return recordManifest(this.#sql, turnId, manifest, new Date());
  }

  /** The prompt manifest of one turn, for admins. */
  async promptManifest(turnId: string): Promise<StoredManifest | null> {
    return getManifest(this.#sql, turnId) ?? null;
  }

  /** The session's most recent prompt manifests, newest first. */
  async promptManifests(limit = 50): Promise<StoredManifest[]> {
    return listManifests(this.#sql, limit);
  }
}
