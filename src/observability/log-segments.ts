/**
 * Log segments in R2 (S1 §4.4, DESIGN "Logging"): the logger's JSON lines are
 * buffered in memory and written, on `flush()`, as create-only JSONL objects
 *
 *   {prefix}/{YYYY-MM-DD}/{timestamp-ms, 13 digits}-{8 hex}.jsonl
 *
 * under `logs/gateway/` and, for lines that concern a provider, also under
 * `logs/{providerId}/`. Caps: no segment is larger than `maxSegmentBytes`
 * (a longer line is replaced by a `log.truncated` line), and after a flush
 * that wrote something the prefix keeps its newest `maxSegments` segments only
 * (oldest by key order deleted, across days). The prefix is listed only when
 * needed (issue 12: a list per flush — per run, from the SessionDO — was a
 * large part of a turn): at the first write, when the count known from the
 * last listing plus this sink's writes since goes over `maxSegments`, and
 * after every `RELIST_EVERY` writes anyway, which bounds what other isolates
 * writing the same prefix can add in between. Audit segments live under
 * `agents/{agentId}/audit/` and are never touched: a sink only accepts a
 * `logs/…` prefix and only deletes keys of the segment shape.
 *
 * Failure handling: a segment whose put failed keeps its key and body and is
 * retried first on the next flush, so a put that failed after R2 stored it is
 * recognised (same key, same body) and its lines are never written twice. The
 * memory kept is bounded (4 × maxSegmentBytes of lines); beyond that the oldest
 * lines are dropped and the next segment starts with a `log.dropped` line
 * counting them. `flush()` never throws: logging must not fail a request.
 *
 * The sink writes what the logger gives it; the logger's closed set of typed
 * events is what keeps prompts, user bodies and credentials out (S1 §4.2).
 */
import type { LogLevel, LogSink } from "./logger";

/** A sink's R2 prefix: `logs/gateway` or `logs/{providerId}` (tests may nest deeper under `logs/`). */
export type LogPrefix = "logs/gateway" | `logs/${string}`;

/** The R2 calls a sink makes (an `R2Bucket` fits; tests wrap one to inject failures). */
export interface LogBucket {
  put(key: string, value: string, options: R2PutOptions & { onlyIf: R2Conditional }): Promise<R2Object | null>;
  get(key: string): Promise<R2ObjectBody | null>;
  list(options: R2ListOptions): Promise<R2Objects>;
  delete(keys: string[]): Promise<void>;
}

export interface SegmentSinkOptions {
  prefix: LogPrefix;
  /** Largest segment object, in bytes (UTF-8, newlines included). Default 256 KiB; at least 1 KiB. */
  maxSegmentBytes?: number;
  /** Segments kept under the prefix after rotation. Default 100. */
  maxSegments?: number;
  /** Clock for segment keys and marker lines (tests). */
  now?: () => Date;
  /** The 8 lower-case hex characters of a segment key (tests); random by default. */
  random?: () => string;
}

export interface SegmentSinkStats {
  /** Lines waiting in memory (not yet in a segment). */
  bufferedLines: number;
  /** Segments cut but not yet written (their put failed). */
  pendingSegments: number;
  /** Bytes held in memory: buffered lines plus pending segments. */
  heldBytes: number;
  writtenSegments: number;
  /** Lines longer than the cap, written as `log.truncated` lines. */
  truncatedLines: number;
  /** Lines dropped because the memory bound was reached. */
  droppedLines: number;
  putFailures: number;
  /** Keys found taken by another object (a new random suffix was drawn). */
  keyCollisions: number;
  rotatedSegments: number;
  rotationFailures: number;
}

export interface SegmentSink {
  /** The logger sink: buffers one line (synchronous, never throws). */
  sink: LogSink;
  /** Writes buffered lines as segments, then rotates. Serialised; never throws. */
  flush(): Promise<void>;
  stats(): SegmentSinkStats;
}

export const DEFAULT_MAX_SEGMENT_BYTES = 256 * 1024;
export const DEFAULT_MAX_SEGMENTS = 100;
/** Smallest accepted segment cap: room for a `log.truncated` line with some of the original. */
export const MIN_SEGMENT_BYTES = 1024;
/** Memory bound, in segments' worth of lines, while puts fail. */
const BUFFER_SEGMENTS = 4;
/** Random suffixes tried when a key is already taken by a different object. */
/** A sink lists its prefix again after this many writes even when its own count says there is room. */
export const RELIST_EVERY = 16;
const KEY_ATTEMPTS = 3;
/** The largest number of keys one R2 delete call takes. */
const DELETE_BATCH = 1000;

const PREFIX = /^logs(?:\/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$/;
/** What a segment key looks like below its prefix; rotation deletes nothing else. */
const SEGMENT_NAME = /^\d{4}-\d{2}-\d{2}\/\d{13}-[0-9a-f]{8}\.jsonl$/;
const RANDOM_SUFFIX = /^[0-9a-f]{8}$/;
/** The start every logger line has: `{"ts":…,"level":…,"event":…`. */
const LINE_HEAD = /^\{"ts":"([^"\\]{0,40})","level":"([a-z]{1,8})","event":"([a-z0-9_.]{1,64})"/;

function randomHex8(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** UTF-8 length of a string without encoding it (lone surrogates count 3, as TextEncoder writes U+FFFD). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2;
      i++;
    } else n += 2;
  }
  return n;
}

/** The key of a segment written at `ts` (ms since the epoch) with an 8-hex suffix. */
export function segmentKey(prefix: LogPrefix, ts: number, suffix: string): string {
  const day = new Date(ts).toISOString().slice(0, 10);
  return `${prefix}/${day}/${String(ts).padStart(13, "0")}-${suffix}.jsonl`;
}

interface Line {
  text: string;
  /** UTF-8 bytes including the newline. */
  bytes: number;
}

interface Segment {
  key: string;
  ts: number;
  body: string;
  bytes: number;
  /** Log lines in the body (a leading `log.dropped` line not included). */
  lines: number;
  /** The count a leading `log.dropped` line carries (0: none). */
  carriedDropped: number;
}

/** A buffer of log lines written to R2 as capped, create-only, rotated segments. */
export function createSegmentSink(bucket: LogBucket, o: SegmentSinkOptions): SegmentSink {
  const prefix = o.prefix;
  if (!PREFIX.test(prefix) || prefix.split("/").includes("..")) throw new RangeError(`log prefix must be logs/<name>: ${prefix}`);
  const cap = o.maxSegmentBytes ?? DEFAULT_MAX_SEGMENT_BYTES;
  const maxSegments = o.maxSegments ?? DEFAULT_MAX_SEGMENTS;
  if (!Number.isInteger(cap) || cap < MIN_SEGMENT_BYTES) throw new RangeError(`maxSegmentBytes must be an integer ≥ ${MIN_SEGMENT_BYTES}`);
  if (!Number.isInteger(maxSegments) || maxSegments < 1) throw new RangeError("maxSegments must be an integer ≥ 1");
  const bound = BUFFER_SEGMENTS * cap;
  const now = o.now ?? (() => new Date());
  const random = o.random ?? randomHex8;

  let buffer: Line[] = [];
  let bufferBytes = 0;
  const pending: Segment[] = [];
  let pendingBytes = 0;
  /** The segment a put is in flight for: never dropped from under the writer. */
  let inFlight: Segment | null = null;
  /** Lines dropped and not yet reported by a written `log.dropped` line. */
  let droppedUnreported = 0;
  let lastTs = 0;
  let chain: Promise<void> = Promise.resolve();
  /** Segments in the prefix as of the last listing plus this sink's writes since; null: list at the next write. */
  let known: number | null = null;
  let writesSinceList = 0;
  const stats = {
    writtenSegments: 0,
    truncatedLines: 0,
    droppedLines: 0,
    putFailures: 0,
    keyCollisions: 0,
    rotatedSegments: 0,
    rotationFailures: 0,
  };

  function suffix(): string {
    const s = random();
    if (!RANDOM_SUFFIX.test(s)) throw new RangeError("random() must return 8 lower-case hex characters");
    return s;
  }

  /** A line over the cap becomes a valid JSON `log.truncated` line holding as much of its start as fits. */
  function truncate(line: string, bytes: number, level: LogLevel): string {
    const head = LINE_HEAD.exec(line);
    const base = {
      ts: head?.[1] ?? now().toISOString(),
      level: head?.[2] ?? level,
      event: "log.truncated",
      original_event: head?.[3] ?? null,
      original_bytes: bytes,
    };
    const limit = cap - 1;
    const render = (keep: number) => {
      const end = keep > 0 && (line.charCodeAt(keep - 1) & 0xfc00) === 0xd800 ? keep - 1 : keep;
      return JSON.stringify({ ...base, truncated_head: line.slice(0, end) });
    };
    // The longest start of the line whose wrapped, escaped form still fits (binary search; rare path).
    let lo = 0;
    let hi = Math.min(line.length, limit);
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (utf8Length(render(mid)) <= limit) lo = mid;
      else hi = mid - 1;
    }
    const out = render(lo);
    return utf8Length(out) <= limit ? out : JSON.stringify(base);
  }

  function dropOldest(): boolean {
    const victimIndex = pending[0] === inFlight ? 1 : 0;
    const victim = pending[victimIndex];
    if (victim) {
      pending.splice(victimIndex, 1);
      pendingBytes -= victim.bytes;
      droppedUnreported += victim.lines + victim.carriedDropped;
      stats.droppedLines += victim.lines;
      return true;
    }
    const line = buffer.shift();
    if (!line) return false;
    bufferBytes -= line.bytes;
    droppedUnreported++;
    stats.droppedLines++;
    return true;
  }

  const sink: LogSink = (line, level) => {
    let text = /[\r\n]/.test(line) ? line.replace(/\r\n|\r|\n/g, "\\n") : line;
    let bytes = utf8Length(text) + 1;
    if (bytes > cap) {
      text = truncate(text, bytes - 1, level);
      bytes = utf8Length(text) + 1;
      stats.truncatedLines++;
    }
    buffer.push({ text, bytes });
    bufferBytes += bytes;
    while (bufferBytes + pendingBytes > bound && dropOldest()) {}
  };

  function freeze(lines: string[], bytes: number, count: number, carried: number): void {
    const ts = Math.max(now().getTime(), lastTs + 1);
    lastTs = ts;
    const segment = {
      key: segmentKey(prefix, ts, suffix()),
      ts,
      body: `${lines.join("\n")}\n`,
      bytes,
      lines: count,
      carriedDropped: carried,
    };
    pending.push(segment);
    pendingBytes += bytes;
  }

  /** Cuts the buffer into segments of at most `cap` bytes, the first led by a `log.dropped` line if lines were lost. */
  function cut(): void {
    if (buffer.length === 0 && droppedUnreported === 0) return;
    let lines: string[] = [];
    let bytes = 0;
    let count = 0;
    let carried = 0;
    if (droppedUnreported > 0) {
      const notice = JSON.stringify({ ts: now().toISOString(), level: "warn", event: "log.dropped", dropped_lines: droppedUnreported });
      lines.push(notice);
      bytes += utf8Length(notice) + 1;
      carried = droppedUnreported;
      droppedUnreported = 0;
    }
    for (const line of buffer) {
      if (bytes + line.bytes > cap && lines.length > 0) {
        freeze(lines, bytes, count, carried);
        lines = [];
        bytes = 0;
        count = 0;
        carried = 0;
      }
      lines.push(line.text);
      bytes += line.bytes;
      count++;
    }
    if (lines.length > 0) freeze(lines, bytes, count, carried);
    buffer = [];
    bufferBytes = 0;
  }

  /** True once the segment is in R2 (written now, or by an earlier attempt whose answer was lost). */
  async function write(segment: Segment): Promise<boolean> {
    for (let attempt = 0; attempt < KEY_ATTEMPTS; attempt++) {
      try {
        const created = await bucket.put(segment.key, segment.body, {
          onlyIf: { etagDoesNotMatch: "*" },
          httpMetadata: { contentType: "application/x-ndjson" },
        });
        if (created) return true;
        const existing = await bucket.get(segment.key);
        if (existing && (await existing.text()) === segment.body) return true;
      } catch {
        stats.putFailures++;
        return false;
      }
      stats.keyCollisions++;
      segment.key = segmentKey(prefix, segment.ts, suffix());
    }
    stats.putFailures++;
    return false;
  }

  async function rotate(): Promise<void> {
    try {
      const keys: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await bucket.list({ prefix: `${prefix}/`, limit: 1000, ...(cursor ? { cursor } : {}) });
        for (const object of page.objects) if (SEGMENT_NAME.test(object.key.slice(prefix.length + 1))) keys.push(object.key);
        cursor = page.truncated ? page.cursor : undefined;
      } while (cursor);
      keys.sort();
      const victims = keys.slice(0, Math.max(0, keys.length - maxSegments));
      for (let i = 0; i < victims.length; i += DELETE_BATCH) {
        const batch = victims.slice(i, i + DELETE_BATCH);
        await bucket.delete(batch);
        stats.rotatedSegments += batch.length;
      }
      known = keys.length - victims.length;
      writesSinceList = 0;
    } catch {
      stats.rotationFailures++;
      known = null; // list again at the next write
    }
  }

  async function flushOnce(): Promise<void> {
    cut();
    let wrote = 0;
    for (let segment = pending[0]; segment; segment = pending[0]) {
      inFlight = segment;
      const ok = await write(segment);
      inFlight = null;
      if (!ok) break;
      const at = pending.indexOf(segment);
      if (at >= 0) {
        pending.splice(at, 1);
        pendingBytes -= segment.bytes;
      }
      stats.writtenSegments++;
      wrote++;
    }
    if (wrote === 0) return;
    writesSinceList += wrote;
    if (known !== null) known += wrote;
    if (known === null || known > maxSegments || writesSinceList >= RELIST_EVERY) await rotate();
  }

  return {
    sink,
    flush() {
      const run = chain.then(flushOnce).catch(() => {});
      chain = run;
      return run;
    },
    stats: () => ({
      bufferedLines: buffer.length,
      pendingSegments: pending.length,
      heldBytes: bufferBytes + pendingBytes,
      ...stats,
    }),
  };
}

/** Events that concern one provider: their lines also go to `logs/{provider}/`. */
const PROVIDER_EVENTS = new Set(["model.call", "run.turn", "run.round", "startup.validation"]);
/** Provider ids as the config allows them (S1 §1; src/config/schema.ts). */
const PROVIDER_ID = /^[a-z][a-z0-9_]{0,31}$/;

/**
 * The prefixes a log line goes to: always `{root}/gateway`; for `model.call`,
 * `run.turn`, `run.round` and `startup.validation` lines that name a provider
 * also `{root}/{provider}` (read from the line's
 * `provider` field). A provider id that is not provider-shaped, or is
 * `gateway` itself, gets no prefix of its own.
 */
export function routeLogLine(line: string, root: "logs" | `logs/${string}` = "logs"): LogPrefix[] {
  const prefixes: LogPrefix[] = [`${root}/gateway`];
  if (!line.includes('"provider"')) return prefixes;
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return prefixes;
  }
  if (typeof parsed !== "object" || parsed === null) return prefixes;
  const { event, provider } = parsed as { event?: unknown; provider?: unknown };
  if (typeof event !== "string" || !PROVIDER_EVENTS.has(event)) return prefixes;
  if (typeof provider !== "string" || !PROVIDER_ID.test(provider) || provider === "gateway") return prefixes;
  prefixes.push(`${root}/${provider}`);
  return prefixes;
}

export interface R2LogSinksOptions {
  maxSegmentBytes?: number;
  maxSegments?: number;
  now?: () => Date;
  random?: () => string;
  /** Where the `gateway` and provider prefixes live; `logs` in production (tests use `logs/<unique>`). */
  root?: "logs" | `logs/${string}`;
}

export interface R2LogSinks {
  /** Logger sink: each line to the gateway segments, provider lines also to their provider's. */
  sink: LogSink;
  /** Flushes every prefix (gateway and each provider seen). Never throws. */
  flush(): Promise<void>;
  /** Stats per prefix. */
  stats(): Record<string, SegmentSinkStats>;
}

/** The gateway's R2 log sinks: `logs/gateway/` plus one `logs/{providerId}/` per provider seen. */
export function createR2LogSinks(bucket: LogBucket, options: R2LogSinksOptions = {}): R2LogSinks {
  const root = options.root ?? "logs";
  const sinks = new Map<LogPrefix, SegmentSink>();
  const sinkFor = (prefix: LogPrefix): SegmentSink => {
    let s = sinks.get(prefix);
    if (!s) {
      s = createSegmentSink(bucket, {
        prefix,
        ...(options.maxSegmentBytes !== undefined ? { maxSegmentBytes: options.maxSegmentBytes } : {}),
        ...(options.maxSegments !== undefined ? { maxSegments: options.maxSegments } : {}),
        ...(options.now ? { now: options.now } : {}),
        ...(options.random ? { random: options.random } : {}),
      });
      sinks.set(prefix, s);
    }
    return s;
  };
  sinkFor(`${root}/gateway`);
  return {
    sink(line, level) {
      for (const prefix of routeLogLine(line, root)) sinkFor(prefix).sink(line, level);
    },
    async flush() {
      await Promise.all([...sinks.values()].map((s) => s.flush()));
    },
    stats: () => Object.fromEntries([...sinks].map(([prefix, s]) => [prefix, s.stats()])),
  };
}
