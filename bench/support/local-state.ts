/**
 * Reads `wrangler dev`'s local state straight from its `--persist-to` directory (miniflare keeps each D1
 * database and each R2 bucket's index as a SQLite file, and R2 bodies as blob files), so a bench can watch what
 * the gateway has written without asking the gateway — a read through the admin API costs the gateway time and,
 * on a busy machine, takes seconds. Read-only; the files' layout is miniflare's, so a caller falls back to the API
 * when `open` finds nothing.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";

/** Every file under `dir` whose name ends with `suffix`. */
function filesUnder(dir: string, suffix: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name), suffix) : e.name.endsWith(suffix) ? [join(dir, e.name)] : [],
  );
}

/** The local D1 database that has a `runs` table, and the R2 bucket indexes (tables `_mf_objects`). */
export interface LocalState {
  /** Run ids the D1 run index holds with status `completed`. */
  completedRuns(): string[];
  /** R2 objects under `prefix` not returned before: key, upload time (ms since the epoch), body. */
  newObjects(prefix: string): { key: string; uploaded: number; body: string }[];
}

/** Opens the local state under `persist`; null if its layout is not the one expected. */
export function openLocalState(persist: string): LocalState | null {
  const dbs = filesUnder(join(persist, "v3"), ".sqlite").map((path) => new DatabaseSync(path, { readOnly: true }));
  const has = (db: DatabaseSync, table: string) =>
    db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) !== undefined;
  const d1 = dbs.find((db) => has(db, "runs"));
  const buckets = dbs.filter((db) => has(db, "_mf_objects"));
  if (!d1 || buckets.length === 0) return null;
  const seen = new Set<string>();
  const blobPath = (id: string) => filesUnder(join(persist, "v3", "r2"), id).find((p) => p.endsWith(`/${id}`));
  return {
    completedRuns: () =>
      (d1.prepare("SELECT run_id FROM runs WHERE status = 'completed'").all() as { run_id: string }[]).map((r) => r.run_id),
    newObjects(prefix) {
      const out: { key: string; uploaded: number; body: string }[] = [];
      for (const db of buckets)
        for (const row of db
          .prepare("SELECT key, blob_id, uploaded FROM _mf_objects WHERE key >= ? AND key < ?")
          .all(prefix, `${prefix}\uffff`) as {
          key: string;
          blob_id: string | null;
          uploaded: number;
        }[]) {
          if (seen.has(row.key) || !row.blob_id) continue;
          const path = blobPath(row.blob_id);
          if (!path) continue; // written to the index, body not found yet: next time
          seen.add(row.key);
          out.push({ key: row.key, uploaded: row.uploaded, body: readFileSync(path, "utf8") });
        }
      return out;
    },
  };
}
