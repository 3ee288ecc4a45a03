/**
 * The SessionDO's logger (D-068). Its lines go to the console (Workers Logs) and to this isolate's R2 segments, as
 * every line does — except a run's own lines (`run.round`, `run.turn`, `tool.gate`) while an HTTP caller waits for
 * that run: those are archived at once, as always, and HELD for the caller instead of printed, so that the Worker
 * prints them inside its one `http.request` line (issue 23: one console line per request; Workers Logs bills per
 * event, and under `wrangler dev` each console line costs about 2.8 ms of workerd CPU).
 *
 * Nothing held is dropped from the console: a caller that stops waiting (its wait expired, a pause it does not stop
 * at) releases what was held — printed at once — and the run's later lines print as before. The held lines live in
 * the isolate, not the object, so that an object evicted mid-run (its caller's call failed with it) leaves them to
 * the instance that resumes the run here: that one prints them before its own lines. Held lines die with the isolate
 * only (a crash or a deploy between a run's `run.round` and its end), as the R2 segments' unflushed lines do.
 */
import {
  consoleSink,
  createLogger,
  type LogEvents,
  type Logger,
  type LogLevel,
  type LogSink,
  logLine,
  type RunLine,
  type RunLineEvent,
} from "./logger";

/** Lines held per run id, with the logger holding them (another one's are an evicted instance's: printed by the next). */
const held = new Map<string, { owner: RunLogger; lines: RunLine[]; since: number }>();
/**
 * Held this long, lines are printed whoever holds them: a run waited for longer than any wait (Prefer: wait and a
 * chat completion wait 60 s per call) was left by an evicted instance whose run did not resume in this isolate.
 */
const HOLD_MAX_MS = 5 * 60_000;

/** A logger that holds a run's own lines for a waiting caller; see the module comment. */
export class RunLogger implements Logger {
  readonly minLevel = "info";
  readonly #archive: LogSink;
  readonly #print: LogSink;
  readonly #both: Logger;

  /** Lines to `archive` (R2) and `print` (the console, by default). */
  constructor(archive: LogSink, print: LogSink = consoleSink) {
    this.#archive = archive;
    this.#print = print;
    this.#both = createLogger("info", (line, level) => {
      print(line, level);
      archive(line, level);
    });
  }

  /** Any line but a run's own: to the console and the archive at once (info and above). */
  log<E extends keyof LogEvents>(level: LogLevel, event: E, fields: LogEvents[E]): void {
    this.#both.log(level, event, fields);
  }

  /** A run's own line: archived now; printed now unless a caller holds the run's lines. */
  runLine<E extends RunLineEvent>(level: LogLevel, event: E, fields: LogEvents[E]): void {
    const line = logLine(level, event, fields) as RunLine;
    const text = JSON.stringify(line);
    this.#archive(text, level);
    const mine = this.#heldHere(line.run_id);
    if (mine) mine.push(line);
    else this.#print(text, level);
  }

  /** A caller waits for run `runId`: its lines are held from now until `take` or `release`. */
  hold(runId: string): void {
    this.#heldHere(runId);
    const now = Date.now();
    for (const [id, entry] of held)
      if (now - entry.since > HOLD_MAX_MS) {
        held.delete(id);
        this.print(entry.lines);
      }
    held.set(runId, { owner: this, lines: [], since: now });
  }

  /** The run stopped: the lines held for its caller, no longer held (its later lines print as before). */
  take(runId: string): RunLine[] {
    const lines = this.#heldHere(runId) ?? [];
    held.delete(runId);
    return lines;
  }

  /** The caller stopped waiting (or never collected `taken`): what was held, and `taken`, printed now. */
  release(runId: string, taken: readonly RunLine[] = []): void {
    this.print([...this.take(runId), ...taken]);
  }

  /** Prints lines that were held, as they would have been printed when written. */
  print(lines: readonly RunLine[]): void {
    for (const line of lines) this.#print(JSON.stringify(line), line.level);
  }

  /** This logger's held lines of `runId`, if it holds them; lines another (evicted) instance held are printed first. */
  #heldHere(runId: string): RunLine[] | undefined {
    const entry = held.get(runId);
    if (!entry) return undefined;
    if (entry.owner === this) return entry.lines;
    held.delete(runId);
    this.print(entry.lines);
    return undefined;
  }
}
