/**
 * Long-poll waiters: callers waiting for a run's next event (`runEvents` with a wait, `awaitRun`), woken when the
 * run engine writes one. In memory: a waiter lost to eviction just re-asks.
 */

/** Who is waiting for which run's next event. */
export class RunWaiters {
  readonly #waiters = new Map<string, Set<() => void>>();
  readonly #listeners: ((runId: string) => void)[] = [];

  /** Calls `fn` at every event written, in the writing transaction (the WebSocket route pushes events from it). */
  listen(fn: (runId: string) => void): void {
    this.#listeners.push(fn);
  }

  /** Wakes every caller waiting on `runId` (a lifecycle event was written). */
  wake(runId: string): void {
    for (const fn of this.#listeners) fn(runId);
    const waiting = this.#waiters.get(runId);
    if (!waiting) return;
    this.#waiters.delete(runId);
    for (const resolve of waiting) resolve();
  }

  /** Resolves at the run's next event or after `ms`, whichever comes first. */
  async next(runId: string, ms: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let resolve = () => {};
    const woken = new Promise<void>((r) => {
      resolve = r;
    });
    const set = this.#waiters.get(runId) ?? new Set();
    set.add(resolve);
    this.#waiters.set(runId, set);
    await Promise.race([woken, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
    this.#waiters.get(runId)?.delete(resolve);
  }
}
