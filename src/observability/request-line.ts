/**
 * The Worker's `http.request` line (D-068): one per request. A request that waited for its run in the SessionDO and
 * got it back ended or paused carries that run's own lines (`run_lines`: `run.round`, `run.turn`, `tool.gate`,
 * exactly as the SessionDO would have printed them), so the console shows one event per turn instead of two or
 * three. Only the console's line carries them: the R2 archive's `http.request` line stays the plain one, the run's
 * lines being archived on their own by the SessionDO (src/observability/run-lines.ts).
 */
import { atLeast, consoleSink, createLogger, highestLevel, type LogEvents, type Logger, type LogSink, type RunLine } from "./logger";

/** The request line's own fields. */
export type RequestFields = Omit<LogEvents["http.request"], "run_lines">;

/**
 * Writes the request line to `logger`, or — with `archive`, the R2 segments alone — to the console with its run's
 * lines and to `archive` without them. With run lines its level is theirs at the highest, at least info; when the
 * logger's level would drop that line, the run's lines are printed alone, as the SessionDO would have printed them:
 * the console never loses them.
 */
export function logRequest(logger: Logger, fields: RequestFields, runLines?: readonly RunLine[], archive?: LogSink): void {
  if (!runLines?.length) {
    logger.log("info", "http.request", fields);
    return;
  }
  const level = highestLevel(runLines.map((l) => l.level));
  if (!atLeast(level, logger.minLevel)) {
    for (const line of runLines) consoleSink(JSON.stringify(line), line.level);
    logger.log("info", "http.request", fields);
    return;
  }
  const carried = { ...fields, run_lines: [...runLines] };
  if (!archive) {
    logger.log(level, "http.request", carried);
    return;
  }
  createLogger(logger.minLevel, consoleSink).log(level, "http.request", carried);
  createLogger(logger.minLevel, archive).log("info", "http.request", fields);
}
