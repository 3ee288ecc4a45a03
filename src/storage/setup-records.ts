/**
 * Reads of the S5 setup records (migrations/0009_setup_records.sql) that decide an agent's prompt mode.
 */

/**
 * Whether the agent is a configured coding agent: a setup session saved the commands that start its
 * services (`save_service_commands`). Env-file specs alone do not make a runnable project.
 */
export async function hasServiceCommands(db: D1Database, agentId: string): Promise<boolean> {
  const row = await db
    .prepare("SELECT 1 AS one FROM setup_records WHERE agent_id = ?1 AND kind = 'service_commands' LIMIT 1")
    .bind(agentId)
    .first<{ one: number }>();
  return row !== null;
}
