/**
 * Where log lines go (S1 §4, DESIGN "Logging"): JSON to the console (Workers Logs, `wrangler tail`) and the
 * same lines, already free of secrets by construction (the typed logger), to R2 segments under
 * `logs/gateway/` and `logs/{providerId}/` with a size cap per segment and a maximum segment count
 * (`log-segments.ts`). One set of R2 sinks per isolate, so a segment gathers the lines of many requests;
 * the Worker flushes it at most every FLUSH_INTERVAL_MS (after a response, without delaying it), the
 * SessionDO after an alarm at most every OBJECT_FLUSH_INTERVAL_MS (`flushSoon`: at once when the last flush
 * is that old, else on a timer when it will be), so that under load a segment carries many turns' lines
 * instead of one put per alarm (issue 12). Lines of an isolate that is torn down before its next flush are
 * lost from R2 — they were on the console already, and the audit log, not the log, is the record of what happened.
 */
import { createR2LogSinks, type R2LogSinks } from "./log-segments";
import { consoleSink, type LogSink } from "./logger";

export const FLUSH_INTERVAL_MS = 10_000;
/** The SessionDO's cadence: a run's lines reach R2 within this long of its alarm (one put per interval under load). */
export const OBJECT_FLUSH_INTERVAL_MS = 2_000;
/** A flush timer that has not fired this long after its time died with its object (evicted): arm another. */
const TIMER_GRACE_MS = 1_000;

let isolate: { bucket: R2Bucket; sinks: R2LogSinks; lastFlush: number; timerAt: number | null } | undefined;

/** This isolate's R2 log sinks for `bucket`. */
export function isolateLogSinks(bucket: R2Bucket): {
  sinks: R2LogSinks;
  due(now?: number): boolean;
  flushIfDue(now?: number): Promise<void>;
  flushSoon(now?: number): void;
} {
  if (!isolate || isolate.bucket !== bucket) isolate = { bucket, sinks: createR2LogSinks(bucket), lastFlush: 0, timerAt: null };
  const state = isolate;
  return {
    sinks: state.sinks,
    /** Whether `flushIfDue` would flush now: callers skip `waitUntil` when it would not (issue 12: a per-request cost). */
    due: (now = Date.now()) => now - state.lastFlush >= FLUSH_INTERVAL_MS,
    async flushIfDue(now = Date.now()) {
      if (now - state.lastFlush < FLUSH_INTERVAL_MS) return;
      state.lastFlush = now;
      await state.sinks.flush();
    },
    /**
     * Flushes now if the last flush is OBJECT_FLUSH_INTERVAL_MS old, else makes sure one happens when it is
     * (one timer per isolate). Not awaited by design: the sinks are the isolate's, shared by every object in it,
     * so a flush may chain onto another object's, and awaiting that would resume in the other object's I/O
     * context ("Cannot perform I/O on behalf of a different Durable Object"; test/http/load.test.ts).
     */
    flushSoon(now = Date.now()) {
      if (state.timerAt !== null && now < state.timerAt + TIMER_GRACE_MS) return; // one is on its way
      const wait = state.lastFlush + OBJECT_FLUSH_INTERVAL_MS - now;
      if (wait <= 0) {
        state.timerAt = null;
        state.lastFlush = now;
        void state.sinks.flush();
        return;
      }
      state.timerAt = now + wait;
      setTimeout(() => {
        state.timerAt = null;
        state.lastFlush = Date.now();
        void state.sinks.flush();
      }, wait);
    },
  };
}

/** A sink writing each line to all of `sinks`. */
export function teeSink(...sinks: LogSink[]): LogSink {
  return (line, level) => {
    for (const sink of sinks) sink(line, level);
  };
}

/** Console plus this isolate's R2 segments. */
export function gatewayLogSink(bucket: R2Bucket): LogSink {
  return teeSink(consoleSink, archiveLogSink(bucket));
}

/** This isolate's R2 segments alone: the archive half of `gatewayLogSink`, for lines the console gets otherwise (D-068). */
export function archiveLogSink(bucket: R2Bucket): LogSink {
  return isolateLogSinks(bucket).sinks.sink;
}
