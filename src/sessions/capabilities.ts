/**
 * Background work of a session as *capabilities*, and the runner that drives them from the object's one alarm.
 *
 * A capability is an object that knows when it next has work (`nextAlarmAt`) and does it (`onAlarm`): the audit
 * outbox, run bundles, job notifications, channel replies, approval expiry, the idempotency purge, firing reports,
 * the run drain and the open sockets' upkeep are each one (they live beside their domain: session-audit.ts,
 * run-capabilities.ts, deliveries.ts, tool-callbacks.ts, websocket.ts). The runner is the whole of the alarm: it holds a watchdog alarm while it
 * works, runs every capability in the order given, then sets the alarm to the earliest `nextAlarmAt` (or clears
 * it). A new subsystem adds a capability to the list; it never edits `alarm()`.
 *
 * Every capability runs on every alarm, in declaration order, like cloudflare/agents' CapabilityRunner: each one
 * does nothing when it has nothing due, and some work only exists because an earlier one ran (a drained run leaves
 * audit events, a bundle and a notification). Running only those "due" beforehand would miss that work (D-046).
 */

/** One kind of background work of a session object. */
export interface AlarmCapability {
  /** For logs and tests. */
  readonly name: string;
  /** When this capability next has work: `now` or earlier for "at once", null for "nothing pending". */
  nextAlarmAt(now: number): number | null;
  /** Does the work due now. A throw aborts this alarm; the watchdog alarm set before it retries it. */
  onAlarm(now: number): Promise<void>;
  /**
   * Work someone is waiting for (a chat reply, a job notification): due as soon as a run ends, not at the next
   * watchdog — see `AlarmRunner.expedite`. Other work (audit, bundles, index rows) ships with the watchdog.
   */
  readonly expedite?: boolean;
}

/**
 * While a run or the capabilities run, the alarm stays set this far ahead: if the object is evicted or
 * redeployed mid-run, that alarm wakes it and the work resumes (DESIGN "SessionDO"). While the work is still
 * live the alarm only re-arms itself (a heartbeat, like cloudflare/agents' keepAlive), which also keeps the
 * object from idle eviction. Issue 23: a second, not 60 — also the window in which a turn's rows are shipped.
 */
export const WATCHDOG_MS = 1_000;

/**
 * Arms the watchdog for work starting now (an inline run): the alarm fires within WATCHDOG_MS unless it already
 * will sooner. One alarm write per turn at most; none when an earlier turn's watchdog is still pending.
 */
export async function armWatchdog(storage: DurableObjectStorage): Promise<void> {
  const at = Date.now() + WATCHDOG_MS;
  const current = await storage.getAlarm();
  if (current === null || current > at) await storage.setAlarm(at);
}

/**
 * Makes the alarm fire now unless it already will: an alarm set for later (an approval expiry, a stored
 * answer's expiry, a notification retry) must not hold back work queued now.
 */
export async function alarmNow(storage: DurableObjectStorage): Promise<void> {
  const now = Date.now();
  const at = await storage.getAlarm();
  if (at === null || at > now) await storage.setAlarm(now);
}

/**
 * Makes the alarm fire by `at` at the latest: brought forward if it is set later (or not at all), never put back —
 * work due then (a socket's lease renewal) is found by the pass, whatever else set the alarm.
 */
export async function alarmBy(storage: DurableObjectStorage, at: number): Promise<void> {
  const current = await storage.getAlarm();
  if (current === null || current > at) await storage.setAlarm(at);
}

/** How much earlier than the time asked for an alarm already set may fire and be kept (no write). */
const RESCHEDULE_SLACK_MS = 100;

/** Drives a session object's capabilities from its alarm. */
export class AlarmRunner {
  readonly #storage: DurableObjectStorage;
  readonly #capabilities: readonly AlarmCapability[];
  /** Whether this instance is running capabilities now (in memory: an evicted instance's work is resumed by the next). */
  #running = false;

  /** `capabilities` in the order they run on each alarm. */
  constructor(storage: DurableObjectStorage, capabilities: readonly AlarmCapability[]) {
    this.#storage = storage;
    this.#capabilities = capabilities;
  }

  /**
   * The alarm: `prepare` (e.g. refresh secrets), then every capability in order, then the next alarm. A throw
   * leaves the watchdog alarm in place (and the platform retries the alarm), so failed work is tried again.
   */
  async run(prepare: () => Promise<void>): Promise<void> {
    // The watchdog may fire while this instance is still executing a long run: only one pass per instance.
    if (this.#running) {
      await this.#storage.setAlarm(Date.now() + WATCHDOG_MS);
      return;
    }
    this.#running = true;
    try {
      await this.#storage.setAlarm(Date.now() + WATCHDOG_MS);
      await prepare();
      for (const capability of this.#capabilities) await capability.onAlarm(Date.now());
    } finally {
      this.#running = false;
    }
    await this.reschedule();
  }

  /**
   * When a shipping pass its timer ran ends, with no run live and no alarm pass under way: the alarm is set to the
   * next work or cleared, instead of the turn's watchdog firing to find nothing to do (issue 23: an idle object's
   * turn leaves no alarm fire behind). While a run is live its watchdog stays as it is.
   */
  async settle(busy: boolean): Promise<void> {
    if (!busy && !this.#running) await this.reschedule();
  }

  /**
   * Brings the alarm forward to the earliest work of an `expedite` capability, if that is sooner than the alarm
   * set (called when an inline run ends; no alarm write when nothing waits).
   */
  async expedite(): Promise<void> {
    const now = Date.now();
    const times = this.#capabilities.flatMap((c) => (c.expedite ? [c.nextAlarmAt(now)] : [])).filter((t): t is number => t !== null);
    if (times.length === 0) return;
    const at = Math.max(now, Math.min(...times));
    const current = await this.#storage.getAlarm();
    if (current === null || current > at) await this.#storage.setAlarm(at);
  }

  /**
   * Sets the alarm to the earliest time any capability has work, or clears it when none has. No write when the
   * alarm already fires at most RESCHEDULE_SLACK_MS before that time (it finds the work all the same).
   */
  async reschedule(): Promise<void> {
    const now = Date.now();
    const times = this.#capabilities.map((c) => c.nextAlarmAt(now)).filter((t): t is number => t !== null);
    const current = await this.#storage.getAlarm();
    if (times.length === 0) return current === null ? undefined : this.#storage.deleteAlarm();
    // A capability may answer "due since long ago" (0): the runtime refuses an alarm time <= 0, so it is due now.
    const at = Math.max(now, Math.min(...times));
    if (current !== null && current <= at && at - current <= RESCHEDULE_SLACK_MS) return;
    return this.#storage.setAlarm(at);
  }
}
