/**
 * Reads of the S5 setup records (migrations/0009_setup_records.sql) that decide an agent's prompt mode.
 *
 * Every run asks whether its agent is configured (L5 coding vs scratch), so each isolate keeps the answers it
 * read (issue 23): "configured" for good — a setup record is upserted, never deleted — and "not configured" for
 * `SETUP_CACHE_MS`, the same bound as the approvals backlog (D-055). A save through this isolate
 * (`noteServiceCommandsSaved`) is seen at once; a save through another isolate at most `SETUP_CACHE_MS` late.
 */

/** How long an isolate trusts a "not configured" it read from D1. */
export const SETUP_CACHE_MS = 2_000;
/** Entries kept before the isolate's copy is dropped whole (an isolate serves a bounded set of agents). */
const MAX_ENTRIES = 4_096;

/** Per agent: true, or the time "not configured" was read. */
const seen = new Map<string, true | number>();

/**
 * Whether the agent is a configured coding agent: a setup session saved the commands that start its
 * services (`save_service_commands`). Env-file specs alone do not make a runnable project.
 */
export async function hasServiceCommands(db: D1Database, agentId: string, now = Date.now()): Promise<boolean> {
  const known = seen.get(agentId);
  if (known === true) return true;
  if (known !== undefined && now >= known && now - known < SETUP_CACHE_MS) return false;
  const row = await db
    .prepare("SELECT 1 AS one FROM setup_records WHERE agent_id = ?1 AND kind = 'service_commands' LIMIT 1")
    .bind(agentId)
    .first<{ one: number }>();
  if (seen.size >= MAX_ENTRIES) seen.clear();
  seen.set(agentId, row !== null ? true : now);
  return row !== null;
}

/** The agent's service commands were just saved through this isolate: its next run is a coding run. */
export function noteServiceCommandsSaved(agentId: string): void {
  seen.set(agentId, true);
}
