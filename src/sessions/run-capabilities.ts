/**
 * The run-side background work, as capabilities run from the alarm: expiring overdue approvals, draining queued
 * runs (the runs execute here, one at a time; the runner's watchdog alarm resumes one cut off by an eviction),
 * writing each finished run's R2 bundle, and reporting finished job runs to their D1 firing rows.
 * Issue 23 moves plain turns inline into the enqueue call; the drain then stays as the watchdog.
 */
import { writeRunBundle } from "../audit/bundles";
import { nextExpiry } from "../runs/approvals";
import { FIRING_REPORT_RETRY_MS, hasUnreportedFirings, reportFirings } from "../runs/completion";
import type { RunEngine } from "../runs/engine";
import { nextRunnable } from "../runs/store";
import { secretValuesFromEnv } from "../security/redact";
import type { AlarmCapability } from "./capabilities";
import type { SessionContext } from "./context";
import { runDetail } from "./run-queries";
import { markBundled, unbundledFinishedRuns } from "./session-runs-store";

/** How long after an R2 failure unwritten bundles are tried again. */
const BUNDLE_RETRY_MS = 30_000;

/** Capability: marks pending approvals past their expiry as expired (their runs then fail or go on). */
export function approvalExpiry(cx: SessionContext, engine: RunEngine): AlarmCapability {
  return {
    name: "approval-expiry",
    nextAlarmAt: () => nextExpiry(cx.sql),
    onAlarm: async () => {
      engine.expireOverdue();
    },
  };
}

/** Capability: executes queued (and resumable) runs; due at once whenever one is runnable. */
export function runDrain(cx: SessionContext, engine: RunEngine): AlarmCapability {
  return {
    name: "run-drain",
    nextAlarmAt: (now) => (nextRunnable(cx.sql) ? now : null),
    onAlarm: () => engine.drain(),
  };
}

/** Capability: writes the R2 bundle of every finished run that has none yet (create-only; retried after a failure). */
export class RunBundles implements AlarmCapability {
  readonly name = "run-bundles";
  readonly #cx: SessionContext;
  /** When unwritten run bundles are tried again (after an R2 failure). In memory: a new instance tries at once. */
  #retryAt: number | null = null;

  /** Bundles of the runs in `cx`'s storage. */
  constructor(cx: SessionContext) {
    this.#cx = cx;
  }

  /** Only a retry after a failure: a run's bundle is otherwise written on the alarm that finished it. */
  nextAlarmAt(): number | null {
    return this.#retryAt;
  }

  /** Writes the bundles still missing, oldest first; stops at the first R2 failure. */
  async onAlarm(): Promise<void> {
    const cx = this.#cx;
    this.#retryAt = null;
    for (const id of unbundledFinishedRuns(cx.sql)) {
      const detail = runDetail(cx.sql, id);
      if (!detail) continue;
      try {
        await writeRunBundle(cx.env.AUDIT, detail, secretValuesFromEnv(cx.env));
        markBundled(cx.sql, id);
      } catch {
        this.#retryAt = Date.now() + BUNDLE_RETRY_MS;
        return;
      }
    }
  }
}

/** Capability: writes finished job runs' status and completion to their D1 firing rows; retried while D1 refuses. */
export function firingReports(cx: SessionContext): AlarmCapability {
  return {
    name: "firing-reports",
    nextAlarmAt: (now) => (hasUnreportedFirings(cx.sql) ? now + FIRING_REPORT_RETRY_MS : null),
    onAlarm: () => reportFirings(cx.sql, cx.env.DB),
  };
}
