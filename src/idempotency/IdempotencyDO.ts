/**
 * IdempotencyDO: the durable store behind the `Idempotency-Key` header
 * (DESIGN "Idempotency"; draft-ietf-httpapi-idempotency-key-header), one
 * Durable Object per caller, addressed `getByName("api:<callerId>")`.
 *
 * A key must be found whatever the body of the request that repeats it (a
 * different body is 422, not a new request), so HTTP keys cannot live in the
 * SessionDO the body names: they live here, in their own object, and the
 * logic is the shared store of `./store` (begin / complete / abandon / purge).
 *
 * What this object adds on top of the store:
 *
 * - **Stale in-flight keys.** A Worker that dies after doing the work but
 *   before `complete` leaves its key `in_flight` for ever. An in-flight entry
 *   older than `STALE_IN_FLIGHT_MS` is taken over: the repeat runs again.
 * - **Attempt tokens.** Every use of a key gets an `attempt` token (32 hex),
 *   kept while the key is in flight or was abandoned, and dropped once it
 *   completes. The route derives its dispatch key (and, for `POST /v1/runs`,
 *   the run session's nonce) from it, so a re-attempt — after a stale
 *   in-flight entry or a released 5xx — lands on the run the first attempt may
 *   already have queued (SessionDO `enqueueMessage` + `dispatchKey`), while a
 *   key reused after its retention gets a fresh token, hence a new run.
 * - **The alarm** removes expired answers and tokens; it is set to the next
 *   expiry after each `complete`.
 * - **Open-stream leases** (`./stream-leases`): the caller's open event streams,
 *   counted here so `limits.maxOpenStreamsPerCaller` holds across isolates.
 *
 * RPC methods take `now` from the caller, so tests can move time.
 */
import { DurableObject } from "cloudflare:workers";
import { createSql, migrate, type Sql } from "../storage/sql";
import * as store from "./store";
import * as streams from "./stream-leases";

/** An in-flight entry older than this is taken to be a crashed attempt, and may be taken over. */
export const STALE_IN_FLIGHT_MS = 60_000;

/** How long an answer is kept when the caller names no retention (`http.idempotency.retentionSeconds`' default). */
const DEFAULT_RETENTION_MS = 86_400_000;

/** Rows removed per alarm before it goes round again. */
const PURGE_BATCH = 500;

export const IDEMPOTENCY_MIGRATIONS = [
  store.IDEMPOTENCY_SCHEMA,
  `CREATE TABLE idempotency_attempt (
     scope TEXT NOT NULL,
     key TEXT NOT NULL,
     request_sha256 TEXT NOT NULL,
     attempt TEXT NOT NULL,
     expires_at INTEGER NOT NULL,
     PRIMARY KEY (scope, key)
   ) WITHOUT ROWID;
   CREATE INDEX idempotency_attempt_expiry ON idempotency_attempt (expires_at);`,
  streams.STREAM_LEASES_SCHEMA,
] as const;

export type BeginResult =
  /** Recorded as in flight: do the work under `attempt`, then `complete` (or `abandon`). `resumed`: an earlier attempt may have done it. */
  | { kind: "new"; attempt: string; resumed: boolean }
  /** Done within the retention: answer with this. */
  | { kind: "replay"; response: string; completedAt: number }
  /** The first request with this key has not finished. */
  | { kind: "in_flight"; since: number }
  /** The key was used for a different request. */
  | { kind: "mismatch" };

export class IdempotencyDO extends DurableObject<Env> {
  readonly #sql: Sql;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage.sql);
    // Apply the schema before any RPC runs; blockConcurrencyWhile holds every other event until done.
    ctx.blockConcurrencyWhile(async () => {
      migrate(ctx.storage, this.#sql, IDEMPOTENCY_MIGRATIONS);
    });
  }

  /**
   * Looks `key` up for a request whose hash is `hash`; when it is free (or its in-flight
   * entry is stale) records it as in flight and hands out the attempt token.
   * `retentionMs` bounds how long an abandoned attempt's token is kept for a retry.
   */
  async begin(scope: string, key: string, hash: string, now: number, retentionMs = DEFAULT_RETENTION_MS): Promise<BeginResult> {
    // Synchronous from the lookup to the writes: no other call can slip in between.
    const result = this.ctx.storage.transactionSync((): BeginResult => {
      let r = store.begin(this.#sql, scope, key, hash, now);
      let takenOver = false;
      if (r.kind === "in_flight" && now - r.since >= STALE_IN_FLIGHT_MS) {
        // The attempt that recorded it is gone (the Worker died before `complete`): this one takes over.
        store.abandon(this.#sql, scope, key);
        r = store.begin(this.#sql, scope, key, hash, now);
        takenOver = true;
      }
      if (r.kind !== "new") return r;
      const prior = this.#sql.one<{ request_sha256: string; attempt: string; expires_at: number }>`
        SELECT request_sha256, attempt, expires_at FROM idempotency_attempt WHERE scope = ${scope} AND key = ${key}`;
      const resumed = prior !== undefined && prior.request_sha256 === hash && (takenOver || prior.expires_at > now);
      const attempt = resumed ? prior.attempt : crypto.randomUUID().replaceAll("-", "");
      this.#sql.run`INSERT INTO idempotency_attempt (scope, key, request_sha256, attempt, expires_at)
                    VALUES (${scope}, ${key}, ${hash}, ${attempt}, ${now + retentionMs})
                    ON CONFLICT (scope, key) DO UPDATE SET request_sha256 = excluded.request_sha256, attempt = excluded.attempt,
                      expires_at = excluded.expires_at`;
      return { kind: "new", attempt, resumed };
    });
    if (result.kind === "new") await this.#scheduleAlarm();
    return result;
  }

  /** Stores the answer of an in-flight key, replayed until `now + retentionMs`; its attempt token is no longer needed. */
  async complete(scope: string, key: string, response: string, now: number, retentionMs: number): Promise<void> {
    this.ctx.storage.transactionSync(() => {
      store.complete(this.#sql, scope, key, response, now, retentionMs);
      this.#sql.run`DELETE FROM idempotency_attempt WHERE scope = ${scope} AND key = ${key}`;
    });
    await this.#scheduleAlarm();
  }

  /**
   * Releases an in-flight key whose request failed (5xx or thrown), so the client may retry.
   * The attempt token stays: the retry lands on whatever the failed attempt managed to queue.
   */
  async abandon(scope: string, key: string): Promise<void> {
    store.abandon(this.#sql, scope, key);
    await this.#scheduleAlarm();
  }

  /**
   * Takes (or renews) one of this caller's open-stream slots for `leaseId` until `now + ttlMs`, while fewer than
   * `max` unexpired leases are held (issue 20 §4). Renewing a live lease always succeeds.
   */
  async acquireStream(leaseId: string, now: number, max: number, ttlMs: number): Promise<streams.AcquireResult> {
    return this.ctx.storage.transactionSync(() => streams.acquire(this.#sql, leaseId, now, max, ttlMs));
  }

  /** Gives an open-stream slot back: its stream ended or its client went away. */
  async releaseStream(leaseId: string): Promise<void> {
    streams.release(this.#sql, leaseId);
  }

  /** Removes expired answers and expired tokens of keys no longer in flight. */
  override async alarm(): Promise<void> {
    const now = Date.now();
    const answers = store.purgeExpired(this.#sql, now, PURGE_BATCH);
    const tokens = this.#sql.all<{ scope: string; key: string }>`
      SELECT a.scope, a.key FROM idempotency_attempt a
      WHERE a.expires_at <= ${now}
        AND NOT EXISTS (SELECT 1 FROM idempotency i WHERE i.scope = a.scope AND i.key = a.key AND i.status = 'in_flight')
      ORDER BY a.expires_at LIMIT ${PURGE_BATCH}`;
    for (const t of tokens) this.#sql.run`DELETE FROM idempotency_attempt WHERE scope = ${t.scope} AND key = ${t.key}`;
    if (answers === PURGE_BATCH || tokens.length === PURGE_BATCH) return this.ctx.storage.setAlarm(now);
    const next = this.#nextExpiry(now);
    if (next === null) return this.ctx.storage.deleteAlarm();
    return this.ctx.storage.setAlarm(next);
  }

  /** The earliest expiry of an answer or of a token not held by an in-flight key (never before `after`). */
  #nextExpiry(after = 0): number | null {
    const tokens = this.#sql.one<{ at: number | null }>`
      SELECT MIN(a.expires_at) AS at FROM idempotency_attempt a
      WHERE a.expires_at > ${after}
         OR NOT EXISTS (SELECT 1 FROM idempotency i WHERE i.scope = a.scope AND i.key = a.key AND i.status = 'in_flight')`?.at;
    const times = [store.nextExpiry(this.#sql), tokens ?? null].filter((t): t is number => t !== null);
    return times.length > 0 ? Math.max(after, Math.min(...times)) : null;
  }

  /** Brings the alarm forward to the next expiry (it never moves it later). */
  async #scheduleAlarm(): Promise<void> {
    const next = this.#nextExpiry();
    if (next === null) return;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || next < current) await this.ctx.storage.setAlarm(next);
  }
}
