/**
 * A streaming caller's reads of a run's released text (issue 23, D-054, D-060), wired to this object's storage and
 * waiters: one long poll (`releasedText`), or the whole stream in one RPC (`releaseStream`). The release state
 * itself lives in src/runs/stream-release.ts, the frames in src/runs/release-stream.ts.
 */
import { type ReleaseStreamOptions, releaseFrames } from "../runs/release-stream";
import { awaitRelease, type ReleasedSlice } from "../runs/stream-release";
import type { Sql } from "../storage/sql";
import { type AwaitedRun, awaitRun } from "./run-queries";
import type { RunWaiters } from "./run-waiters";

/** A streamed run stops being followed once it has ended or paused for an approval. */
const settled = (r: AwaitedRun): boolean => r.finished || r.paused;

/** One long poll of run `runId`: text released past `after` (waiting up to `waitMs` for some), and the run. */
export function releasedSlice(
  sql: Sql,
  waiters: RunWaiters,
  runId: string,
  after: number,
  waitMs: number,
): Promise<ReleasedSlice<AwaitedRun>> {
  const run = () => awaitRun(sql, waiters, runId, 0, { untilPaused: true });
  const wake = () => waiters.wake(runId);
  return awaitRelease(runId, after, waitMs, { wake, next: (ms) => waiters.next(runId, ms), run, settled });
}

/** The whole guarded stream of run `runId` as one byte stream of frames, each one in-object long poll. */
export function releaseStream(sql: Sql, waiters: RunWaiters, runId: string, o: ReleaseStreamOptions): ReadableStream<Uint8Array> {
  return releaseFrames((after, ms) => releasedSlice(sql, waiters, runId, after, ms), settled, o);
}
