/**
 * Archived transcripts in R2 `AUDIT` (DESIGN §4):
 *   agents/{agentId}/sessions/{sessionKey}/{session_id}.jsonl           a whole generation (/new)
 *   agents/{agentId}/sessions/{sessionKey}/{session_id}.part-{first}-{last}.jsonl   oldest turns over maxTurns/maxBytes
 * Writes are create-only: an existing object is never overwritten.
 */

/** Where a whole generation is archived. */
export function generationArchiveKey(agentId: string, sessionKey: string, sessionId: string): string {
  return `agents/${agentId}/sessions/${sessionKey}/${sessionId}.jsonl`;
}

/** Where trimmed oldest turns of a generation are archived. */
export function partArchiveKey(agentId: string, sessionKey: string, sessionId: string, firstSeq: number, lastSeq: number): string {
  const pad = (n: number) => String(n).padStart(12, "0");
  return `agents/${agentId}/sessions/${sessionKey}/${sessionId}.part-${pad(firstSeq)}-${pad(lastSeq)}.jsonl`;
}

/**
 * Writes `body` at `key` unless something is already there. Returns true when
 * this call created it or an identical object already existed (a retry).
 */
export async function putCreateOnly(bucket: R2Bucket, key: string, body: string): Promise<boolean> {
  const created = await bucket.put(key, body, { onlyIf: { etagDoesNotMatch: "*" }, httpMetadata: { contentType: "application/x-ndjson" } });
  if (created) return true;
  const existing = await bucket.get(key);
  return existing !== null && (await existing.text()) === body;
}

/** Where a compaction summary (a derived artifact with its evidence pointers) is archived. */
export function summaryArchiveKey(agentId: string, sessionKey: string, sessionId: string, fromSeq: number, toSeq: number): string {
  const pad = (n: number) => String(n).padStart(12, "0");
  return `agents/${agentId}/sessions/${sessionKey}/${sessionId}.summary-${pad(fromSeq)}-${pad(toSeq)}.json`;
}
