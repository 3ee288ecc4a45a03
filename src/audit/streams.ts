/** The D1 index of audit streams per agent/day (migrations/0007_audit_streams.sql), for verification. */

/** Lists a stream for an agent/day (idempotent). */
export async function recordAuditStream(db: D1Database, agentId: string, day: string, stream: string): Promise<void> {
  await auditStreamStatement(db, agentId, day, stream).run();
}

/** The insert that lists a stream for an agent/day, for a batch (idempotent). */
export function auditStreamStatement(db: D1Database, agentId: string, day: string, stream: string): D1PreparedStatement {
  return db
    .prepare("INSERT INTO audit_streams (agent_id, day, stream) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")
    .bind(agentId, day, stream);
}

/** The streams that wrote segments for an agent/day. */
export async function auditStreams(db: D1Database, agentId: string, day: string): Promise<string[]> {
  const rows = await db
    .prepare("SELECT stream FROM audit_streams WHERE agent_id = ?1 AND day = ?2 ORDER BY stream")
    .bind(agentId, day)
    .all<{ stream: string }>();
  return rows.results.map((r) => r.stream);
}
