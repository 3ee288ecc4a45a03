/**
 * The cap on open event streams per API caller (issue 20 §4, `limits.maxOpenStreamsPerCaller`). What counts as
 * an open event stream: a response that stays open to push events — `GET /v1/runs/{run_id}/events` and
 * `POST /v1/chat/completions` with `stream: true`. One caller's streams at the cap answer its next one
 * `429 rate.limited` (with `retry_after_seconds`); other callers are not affected.
 *
 * The count lives in the caller's Durable Object (src/idempotency/stream-leases.ts), so it holds across isolates.
 * A stream takes a lease before its response opens, renews it while it runs, and gives it back when it ends or
 * its client disconnects; an isolate that dies mid-stream stops renewing, and its lease lapses after the TTL.
 */
import type { Context } from "hono";
import { GatewayError } from "../../errors";
import { STREAM_LEASE_RENEW_MS, STREAM_LEASE_TTL_MS } from "../../idempotency/stream-leases";
import type { AppEnv } from "../router";
import { idempotencyObjectName } from "./idempotency-key";

/** The retry hint of a refused stream: a slot frees as soon as one of the caller's streams ends. */
export const STREAM_RETRY_AFTER_SECONDS = 5;

/** One held slot: renew it while the stream runs, release it once when the stream ends. */
export interface StreamLease {
  /** The lease's id in the caller's object (a WebSocket hands it to the session object, which renews and releases it). */
  readonly id: string;
  /** Renews the lease when due; false when the slot was lost (the stream should end). */
  renew(): Promise<boolean>;
  /** Gives the slot back; safe to call more than once. */
  release(): Promise<void>;
}

/** Takes one of the caller's open-stream slots, or throws 429 `rate.limited` when the caller is at its cap. */
export async function openStreamLease(c: Context<AppEnv>): Promise<StreamLease> {
  const principal = c.get("principal");
  const callerId = principal?.scope === "api" ? principal.callerId : "admin";
  const max = c.get("config").limits.maxOpenStreamsPerCaller;
  const stub = c.env.IDEMPOTENCY.getByName(idempotencyObjectName(callerId));
  const leaseId = crypto.randomUUID();
  let taken: Awaited<ReturnType<typeof stub.acquireStream>>;
  try {
    taken = await stub.acquireStream(leaseId, Date.now(), max, STREAM_LEASE_TTL_MS);
  } catch {
    // Fail closed: without the count the cap cannot be held.
    throw new GatewayError("internal.error", "could not check the open-stream limit; try again", { status: 503 });
  }
  if (!taken.ok) {
    throw new GatewayError(
      "rate.limited",
      `this caller already has ${taken.open} event streams open (limit ${max}); close one before opening another`,
      { retryAfterSeconds: STREAM_RETRY_AFTER_SECONDS },
    );
  }
  let renewed = Date.now();
  let released = false;
  return {
    id: leaseId,
    async renew() {
      const now = Date.now();
      if (released) return false;
      if (now - renewed < STREAM_LEASE_RENEW_MS) return true;
      try {
        const r = await stub.acquireStream(leaseId, now, max, STREAM_LEASE_TTL_MS);
        if (r.ok) renewed = now;
        return r.ok;
      } catch {
        return now - renewed < STREAM_LEASE_TTL_MS; // the object is briefly unreachable: the lease still counts
      }
    },
    async release() {
      if (released) return;
      released = true;
      try {
        await stub.releaseStream(leaseId);
      } catch {
        // The lease lapses by itself after STREAM_LEASE_TTL_MS.
      }
    },
  };
}

/** Releases `lease` in the background (its client went away), where the platform allows background work. */
export function releaseInBackground(c: Context<AppEnv>, lease: StreamLease): void {
  const done = lease.release();
  try {
    c.executionCtx.waitUntil(done);
  } catch {
    // No execution context (the app called directly, as in tests): the promise runs on its own.
  }
}
