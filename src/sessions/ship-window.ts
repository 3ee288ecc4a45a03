/**
 * The shipping window of each SessionDO (issue 23, see shipping.ts): at most one shipping pass per SHIP_WINDOW_MS.
 * A change queued when the last pass is a window old or more is shipped at once (an idle session's turn shows in
 * R2 and D1 straight away); one queued sooner waits for the window to end, together with every other change of
 * that window. A timer in this instance runs the pass; an alarm set for a window later is the backup across an
 * eviction. In memory, per object (by its storage): a new instance has no window open and ships at once.
 */
/**
 * The shipping window: a busy session (tens of turns a second) ships one audit segment, its pending bundles and
 * one D1 batch per second, and R2/D1 lag a turn by at most this much (twice this after an eviction: the backup
 * alarm) — within the "couple of seconds". Not a config key: no operator need for another value is known.
 */
export const SHIP_WINDOW_MS = 1_000;

/** The open window of each object (by its storage), and the shipper its SessionDO registered. */
const windows = new WeakMap<DurableObjectStorage, ShipWindow>();

/** When the open window closes (null: none open), when the last pass began, and the pass (the Shipping capability's). */
export interface ShipWindow {
  dueAt: number | null;
  lastPassAt: number;
  ship?: () => Promise<void>;
  /** After a pass the timer ran: the SessionDO settles its alarm (cleared when nothing is left; see SessionDO). */
  afterTimerPass?: () => Promise<void>;
}

/** The window state of the object behind `storage`. */
export function windowOf(storage: DurableObjectStorage): ShipWindow {
  let w = windows.get(storage);
  if (!w) {
    w = { dueAt: null, lastPassAt: 0 };
    windows.set(storage, w);
  }
  return w;
}

/**
 * Something was queued for shipping: makes sure a pass ships it — at once, or a window after the last pass. A timer
 * runs the pass; an alarm set for a window later ships it even if this instance is evicted first. No storage I/O
 * when a window is open already.
 */
export async function openShippingWindow(storage: DurableObjectStorage): Promise<void> {
  const w = windowOf(storage);
  const now = Date.now();
  const dueAt = Math.max(now, w.lastPassAt + SHIP_WINDOW_MS);
  if (w.dueAt !== null) return;
  w.dueAt = dueAt;
  // A pass that fails here (R2 or D1 down) leaves its rows queued; the backup alarm below ships them, and rethrows to
  // the runtime if it fails too. Caught so that a failed timer pass is not an unhandled rejection in the isolate.
  setTimeout(
    () =>
      void w
        .ship?.()
        .then(() => w.afterTimerPass?.())
        .catch(() => {}),
    dueAt - now,
  );
  const backup = dueAt + SHIP_WINDOW_MS;
  const at = await storage.getAlarm();
  // Every alarm ships, so one already due about then (the run's watchdog, set a moment earlier) is the backup: moving
  // it a few milliseconds earlier would be one more alarm write per turn for nothing.
  if (at === null || at > backup + BACKUP_SLACK_MS) await storage.setAlarm(backup);
}

/** How much later than the backup an existing alarm may be and still serve as it. */
const BACKUP_SLACK_MS = 100;
