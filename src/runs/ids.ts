/**
 * Run ids name the SessionDO that holds the run: `run_` + the object's id
 * (64 hex) + 16 random hex. Reading, cancelling or streaming a run goes
 * straight to its object — no index lookup, no scan — and works even while
 * the D1 run index is unavailable.
 */

export const RUN_ID = /^run_([0-9a-f]{64})([0-9a-f]{16})$/;

/** A new run id inside the object `objectId` (`ctx.id.toString()`). */
export function mintRunId(objectId: string): string {
  if (!/^[0-9a-f]{64}$/.test(objectId)) throw new Error("Durable Object ids are 64 hex characters");
  const random = crypto.getRandomValues(new Uint8Array(8));
  return `run_${objectId}${[...random].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The object id inside a run id, or null when the text is not a run id. */
export function runObjectId(runId: string): string | null {
  return RUN_ID.exec(runId)?.[1] ?? null;
}
