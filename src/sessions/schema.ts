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
];
