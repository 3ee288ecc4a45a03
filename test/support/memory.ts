/** Reading a session's memory from a test: the module's `recall` inside the SessionDO (no RPC serves it; runs call it). */
import { runInDurableObject } from "cloudflare:test";
import { type RetrievedItem, recall } from "../../src/sessions/memory";
import { createSql } from "../../src/storage/sql";

/** The best `k` memory items of the session behind `stub` for `query` (S4 §5), best first. */
export function recallIn(stub: DurableObjectStub, query: string, k = 5): Promise<RetrievedItem[]> {
  return runInDurableObject(stub, (_instance: unknown, state: DurableObjectState) => recall(createSql(state.storage.sql), query, k));
}
