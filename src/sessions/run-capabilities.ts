/**
 * The run-side background work, as capabilities run from the alarm: expiring overdue approvals, resuming runs
 * whose execution was lost (runs start inline, in the call that queued them — issue 23 — or in the call that
 * decided their approval — D-059; the alarm is their watchdog), writing each finished run's R2 bundle, and
 * reporting finished job runs to their D1 firing rows.
 */
import { writeRunBundle } from "../audit/bundles";
import { createLogger } from "../observability/logger";
import { gatewayLogSink } from "../observability/r2-logs";
import { nextExpiry } from "../runs/approvals";
import { FIRING_REPORT_RETRY_MS, hasUnreportedFirings, reportFirings } from "../runs/completion";
import type { RunEngine, Stopped } from "../runs/engine";
import { nextRunnable } from "../runs/store";
import { secretValuesFromEnv } from "../security/redact";
import { type AlarmCapability, armWatchdog, WATCHDOG_MS } from "./capabilities";
import type { SessionContext } from "./context";
import { type Enqueued, type EnqueueInput, enqueueMessage } from "./enqueue";
import { runDetail } from "./run-queries";
import { unbundledFinishedRuns } from "./session-runs-store";
import type { SessionIdentity } from "./session-state";

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

/**
 * Capability: the runs' watchdog. While this instance executes runs it only keeps the alarm a heartbeat ahead;
 * a runnable run with no live drain here (its execution lost to eviction or a crash) is executed at once.
 */
export function runDrain(cx: SessionContext, engine: RunEngine): AlarmCapability {
  return {
    name: "run-drain",
    nextAlarmAt: (now) => (engine.busy ? now + WATCHDOG_MS : nextRunnable(cx.sql) ? now : null),
    onAlarm: async () => {
      if (!engine.busy) await engine.drain();
    },
  };
}

/**
 * Starts the queued runs inline, under the object's ordering (one drain at a time), with the watchdog armed;
 * `ended` runs when the drain ends (to bring deliveries forward). The drain goes on after the caller answers; one
 * that throws is logged (against `runId` when the caller knows it) and the watchdog alarm retries what it left.
 */
export async function startRuns(cx: SessionContext, engine: RunEngine, ended: () => Promise<void>, runId?: string): Promise<void> {
  await armWatchdog(cx.storage);
  void engine
    .drain()
    .then(ended)
    .catch((err: unknown) => {
      const logger = createLogger("info", gatewayLogSink(cx.env.AUDIT));
      logger.log("error", "run.internal_error", { run_id: runId ?? "unknown", error_name: err instanceof Error ? err.name : "unknown" });
    });
}

/**
 * D-059: starts the run an approval decision (or the expiry found by it) put back to `running`, inline, as
 * enqueue starts a new run — not from the alarm. It joins the live drain if there is one (a run is never executed
 * twice at once: the drain is one per instance, and the watchdog only starts one when none is live here). Not
 * awaited: the approver is answered while the run goes on, covered by the watchdog. False when no run is runnable
 * (the run was cancelled meanwhile, or had already ended).
 */
export async function resumeDecided(
  cx: SessionContext,
  engine: RunEngine,
  ended: () => Promise<void>,
  runId: string | undefined,
): Promise<boolean> {
  if (!nextRunnable(cx.sql)) return false;
  await startRuns(cx, engine, ended, runId);
  return true;
}

/**
 * Stores a message (enqueue.ts) and, for a run with a spec, starts it inline (D-051): the engine starts it in the
 * storing transaction when nothing runs before it (D-061). With `waits` (the caller waits for the run in this call),
 * `stopped` resolves with the run's row when it stops here, and its log lines, held for the caller until then
 * (D-068): the caller must print them or hand them back to the engine's `forget`.
 */
export async function enqueueInline(
  cx: SessionContext,
  engine: RunEngine,
  identity: SessionIdentity,
  input: EnqueueInput,
  ended: () => Promise<void>,
  waits = false,
): Promise<{ queued: Enqueued; stopped: Promise<Stopped> | null }> {
  const start = input.spec ? (runId: string) => engine.startInline(runId) : undefined;
  const queued = await enqueueMessage(cx, identity, input, (id) => engine.prefetch(id, input.spec), start);
  if (queued.duplicate || !input.spec) return { queued, stopped: null };
  const stopped = waits ? engine.whenStopped(queued.runId) : null;
  try {
    await startRuns(cx, engine, ended, queued.runId);
  } catch (err) {
    engine.forget(queued.runId); // no one will wait: the run's lines print as they come
    throw err;
  }
  return { queued, stopped };
}

/** Writes the R2 bundle of every finished run that has none yet, for the shipping pass (create-only; retried after a failure). */
export class RunBundles {
  readonly #cx: SessionContext;
  /** When unwritten run bundles are tried again (after an R2 failure). In memory: a new instance tries at once. */
  #retryAt: number | null = null;

  /** Bundles of the runs in `cx`'s storage. */
  constructor(cx: SessionContext) {
    this.#cx = cx;
  }

  /** When a failed put is tried again (null: no failure waits); otherwise the shipping pass writes them at once. */
  nextAlarmAt(): number | null {
    return this.#retryAt;
  }

  /**
   * Writes the bundles still missing, oldest first; stops at the first R2 failure. Answers the runs written, for the
   * caller to mark in its one commit (issue 23); a crash before it only means those bundles are put again, and a
   * create-only put of a bundle already there is a success.
   */
  async put(): Promise<string[]> {
    const cx = this.#cx;
    this.#retryAt = null;
    const written: string[] = [];
    try {
      for (const id of unbundledFinishedRuns(cx.sql)) {
        const detail = runDetail(cx.sql, id);
        if (!detail) continue;
        await writeRunBundle(cx.env.AUDIT, detail, secretValuesFromEnv(cx.env));
        written.push(id);
      }
    } catch {
      this.#retryAt = Date.now() + BUNDLE_RETRY_MS;
    }
    return written;
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
