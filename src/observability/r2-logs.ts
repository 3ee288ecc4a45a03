/**
 * Where log lines go (S1 §4, DESIGN "Logging"): JSON to the console (Workers Logs, `wrangler tail`) and the
 * same lines, already free of secrets by construction (the typed logger), to R2 segments under
 * `logs/gateway/` and `logs/{providerId}/` with a size cap per segment and a maximum segment count
 * (`log-segments.ts`). One set of R2 sinks per isolate, so a segment gathers the lines of many requests;
 * the Worker flushes it at most every FLUSH_INTERVAL_MS (after a response, without delaying it), the
 * SessionDO at the end of every alarm. Lines of an isolate that is torn down before its next flush are lost
 * from R2 — they were on the console already, and the audit log, not the log, is the record of what happened.
 */
import { createR2LogSinks, type R2LogSinks } from "./log-segments";
import { consoleSink, type LogSink } from "./logger";

export const FLUSH_INTERVAL_MS = 10_000;

let isolate: { bucket: R2Bucket; sinks: R2LogSinks; lastFlush: number } | undefined;

/** This isolate's R2 log sinks for `bucket`. */
export function isolateLogSinks(bucket: R2Bucket): {
  sinks: R2LogSinks;
  due(now?: number): boolean;
  flushIfDue(now?: number): Promise<void>;
} {
  if (!isolate || isolate.bucket !== bucket) isolate = { bucket, sinks: createR2LogSinks(bucket), lastFlush: 0 };
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
  return teeSink(consoleSink, isolateLogSinks(bucket).sinks.sink);
}
