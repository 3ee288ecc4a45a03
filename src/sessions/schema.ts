/**
 * The SessionDO's SQLite schema, as ordered migrations (see docs/storage.md).
 * Append new entries; never edit one that has shipped.
 */
import type { Migrations } from "../storage/sql";

export const SESSION_MIGRATIONS: Migrations = [
  // v1: what the object knows about itself.
  `CREATE TABLE session_meta (
     key TEXT PRIMARY KEY,
     value TEXT NOT NULL
   );`,
  // v2: the prompt manifest of every turn (S2 §3), hash-only, for admins.
  `CREATE TABLE prompt_manifests (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     turn_id TEXT NOT NULL UNIQUE,
     stack_sha256 TEXT NOT NULL,
     manifest TEXT NOT NULL,
     created_at TEXT NOT NULL
   );`,
];
