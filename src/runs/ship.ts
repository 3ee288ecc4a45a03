/**
 * What a run ships outside its SessionDO after a commit: the D1 index rows of runs and approvals. Neither is
 * needed to answer the turn (the run's own rows are the truth; the index is for listing and the pending limits),
 * so neither is written here (issue 23): the commit that changed the run or approval queued its index row in the
 * index outbox (a trigger, same transaction: src/sessions/index-outbox-store.ts), and these calls open a shipping
 * window, whose pass sends every queued row in one D1 batch, retried until D1 takes it.
 */
import { queueIndexRow } from "../sessions/index-outbox-store";
import { openShippingWindow } from "../sessions/ship-window";
import type { RunHost } from "./host";
import { getRun } from "./store";

/**
 * The run's D1 index row is shipped within the shipping window. A run that waits for an approval or has ended was
 * queued by that commit; a running one is queued here (`status`: the run's, when the caller has just read it) (the announcement of a run still running after
 * RUNNING_INDEX_DELAY_MS: best effort, its end is queued with the commit that ends it).
 */
export async function shipRunIndex(host: RunHost, runId: string, status = getRun(host.sql, runId)?.status): Promise<void> {
  if (status === "running") queueIndexRow(host.sql, "run", runId);
  await openShippingWindow(host.storage);
}

/** The approval's D1 index row is shipped within the shipping window (its state change already queued it). */
export async function shipApprovalIndex(host: RunHost, _approvalId: string): Promise<void> {
  await openShippingWindow(host.storage);
}
