/**
 * Shipping in windows (issue 23): what a turn leaves for the outside world — audit events for R2, index rows for
 * D1, finished runs' bundles for R2 — is already durable in this object's SQLite when the turn replies, so it is
 * shipped later, together: at most one pass per shipping window (ship-window.ts), and ONE pass writes one audit
 * segment (per day), ONE D1 batch of index rows and every pending run bundle, however many turns the window saw,
 * and records all of it in ONE commit.
 * A timer in this instance runs the pass; an alarm is the backup that resumes the shipping after an eviction
 * (nothing is lost: the outboxes are only emptied after R2/D1 answered). Each part keeps its own retry: R2
 * segments back off in `audit_pending`, the index batch and bundles in memory (a new instance tries at once).
 */
import { nextFlushAt, outboxSize, recordAuditShipment } from "../audit/outbox";
import type { AlarmCapability } from "./capabilities";
import type { SessionContext } from "./context";
import { deleteSentRows, deleteSentStreams, IndexShipper, listingSettled } from "./index-outbox";
import { indexBacklog } from "./index-outbox-store";
import type { RunBundles } from "./run-capabilities";
import { putSessionAudit } from "./session-audit";
import { markBundled, unbundledFinishedRuns } from "./session-runs-store";
import { SHIP_WINDOW_MS, windowOf } from "./ship-window";

/** Capability: the shipping pass (audit segment, run bundles, index batch) when the window closes or a retry is due. */
export class Shipping implements AlarmCapability {
  readonly name = "shipping";
  readonly #cx: SessionContext;
  readonly #bundles: RunBundles;
  /** The D1 side (exposed for the measurements in tests). */
  readonly index: IndexShipper;
  #inFlight: Promise<void> | null = null;

  /** Ships `cx`'s outboxes, with `bundles` writing the run bundles. */
  constructor(cx: SessionContext, bundles: RunBundles) {
    this.#cx = cx;
    this.#bundles = bundles;
    this.index = new IndexShipper(cx);
    windowOf(cx.storage).ship = () => this.ship();
  }

  /**
   * The earliest time a part has work, for the alarm: with a window open, a window after its end (its timer ships at
   * the end; the alarm is the backup across an eviction, as openShippingWindow sets it); with none, at once; or a
   * part's retry.
   */
  nextAlarmAt(now: number): number | null {
    const { sql, storage } = this.#cx;
    const open = windowOf(storage).dueAt;
    const due = Math.max(now, open === null ? now : open + SHIP_WINDOW_MS);
    const times: number[] = [];
    const audit = nextFlushAt(sql, now);
    if (audit !== null) times.push(Math.max(due, audit));
    if (unbundledFinishedRuns(sql).length > 0) times.push(Math.max(due, this.#bundles.nextAlarmAt() ?? due));
    if (indexBacklog(sql) > 0) times.push(Math.max(due, this.index.retryAt() ?? due));
    return times.length > 0 ? Math.min(...times) : null;
  }

  /** From the alarm: ships unless a window is open and not yet closed (its timer will). */
  async onAlarm(now: number): Promise<void> {
    const dueAt = windowOf(this.#cx.storage).dueAt;
    if (dueAt !== null && now < dueAt) return;
    await this.ship();
  }

  /** One shipping pass; a pass already under way is awaited instead of run twice. */
  ship(): Promise<void> {
    this.#inFlight ??= this.#pass().finally(() => {
      this.#inFlight = null;
    });
    return this.#inFlight;
  }

  /**
   * R2 and D1 first, then ONE commit that records all of it (D-064): the audit segments written (outbox rows gone,
   * chain heads moved, or a failure's backoff), the index rows D1 has, the bundles written. A crash before that
   * commit loses nothing and duplicates nothing: the next pass prepares the same segment keys and adopts what is
   * there (audit/outbox.ts), re-sends the same upserts, and re-puts the same create-only bundles.
   */
  async #pass(): Promise<void> {
    const cx = this.#cx;
    // Closed first: what is queued from here on opens the next window (a window after this pass).
    const w = windowOf(cx.storage);
    w.dueAt = null;
    w.lastPassAt = Date.now();
    const audit = outboxSize(cx.sql) > 0 || nextFlushAt(cx.sql, Date.now()) !== null ? await putSessionAudit(cx) : null;
    // A day's first segment: its stream's index row goes in this batch (its head, which queues it, is not in yet),
    // unless a new session's listing sent it; that listing, if under way, is waited for, not sent again (D-069).
    const firstDays = (audit?.written ?? []).filter((s) => s.counter === 1).map((s) => s.day);
    await listingSettled(cx.storage);
    const index = await this.index.send(Date.now(), firstDays);
    const bundleRetry = this.#bundles.nextAlarmAt();
    const bundled = bundleRetry === null || bundleRetry <= Date.now() ? await this.#bundles.put() : [];
    if ((audit?.written.length ?? 0) === 0 && !audit?.failed && index.ids.length === 0 && bundled.length === 0) return;
    // One event-loop turn, so one commit (a transactionSync is a savepoint of the turn's implicit transaction, D-066).
    // The index rows outside the transaction: a row D1 has is deleted rightly even if the rest rolled back.
    deleteSentRows(cx, index);
    if ((audit?.written.length ?? 0) > 0 || audit?.failed || bundled.length > 0)
      cx.storage.transactionSync(() => {
        if (audit) recordAuditShipment(cx.sql, audit);
        deleteSentStreams(cx, index);
        if (bundled.length > 0) markBundled(cx.sql, bundled);
      });
  }
}
