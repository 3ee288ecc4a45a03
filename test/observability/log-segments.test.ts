/**
 * Log segments in R2 (S1 §4.4, §6.4; DESIGN "Logging"): create-only segments
 * under `logs/gateway/` and `logs/{providerId}/`, a size cap per segment, a
 * maximum segment count (oldest deleted, across days), nothing lost or written
 * twice when R2 fails, a bounded buffer that says what it dropped — and the
 * logging contract tests: no raw prompts, hashes present, rotation caps obeyed.
 * Every test writes under its own `logs/test-…` prefix of the real local bucket.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
  createR2LogSinks,
  createSegmentSink,
  type LogBucket,
  type LogPrefix,
  RELIST_EVERY,
  routeLogLine,
  segmentKey,
} from "../../src/observability/log-segments";
import { createLogger } from "../../src/observability/logger";
import { isolateLogSinks, OBJECT_FLUSH_INTERVAL_MS } from "../../src/observability/r2-logs";
import { assemblePromptStack, logPromptAssembly } from "../../src/prompts/assemble";
import { sha256Hex } from "../../src/prompts/hash";
import { until } from "../support/runs";

const uniquePrefix = (): LogPrefix => `logs/test-${crypto.randomUUID().slice(0, 8)}`;

async function listKeys(prefix: string): Promise<{ key: string; size: number }[]> {
  const out: { key: string; size: number }[] = [];
  let cursor: string | undefined;
  do {
    const page = await env.AUDIT.list({ prefix: `${prefix}/`, ...(cursor ? { cursor } : {}) });
    out.push(...page.objects.map((o) => ({ key: o.key, size: o.size })));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out.sort((a, b) => (a.key < b.key ? -1 : 1));
}

async function readText(key: string): Promise<string> {
  const object = await env.AUDIT.get(key);
  if (!object) throw new Error(`missing ${key}`);
  return object.text();
}

/** Every line under a prefix, segments in key order. */
async function readLines(prefix: string): Promise<string[]> {
  const lines: string[] = [];
  for (const { key } of await listKeys(prefix))
    if (key.endsWith(".jsonl")) lines.push(...(await readText(key)).split("\n").filter(Boolean));
  return lines;
}

/** A clock the test moves. */
function clock(iso: string) {
  let t = Date.parse(iso);
  return {
    now: () => new Date(t),
    advance(ms: number) {
      t += ms;
    },
  };
}

/** Random suffixes from a list, then a counter. */
function suffixes(...fixed: string[]): () => string {
  let n = 0;
  return () => fixed.shift() ?? (++n).toString(16).padStart(8, "0");
}

/** A bucket whose first `failures` puts throw: before reaching R2, or after R2 stored the object (a lost answer). */
function flakyBucket(failures: number, mode: "before" | "after" = "before"): LogBucket & { fail(n: number): void; puts: number } {
  let left = failures;
  const wrapper = {
    puts: 0,
    fail(n: number) {
      left = n;
    },
    async put(key: string, value: string, options: R2PutOptions & { onlyIf: R2Conditional }) {
      wrapper.puts++;
      if (left > 0) {
        left--;
        if (mode === "after") await env.AUDIT.put(key, value, options);
        throw new Error("injected R2 failure");
      }
      return env.AUDIT.put(key, value, options);
    },
    get: (key: string) => env.AUDIT.get(key),
    list: (options: R2ListOptions) => env.AUDIT.list(options),
    delete: (keys: string[]) => env.AUDIT.delete(keys),
  };
  return wrapper;
}

/** A typed request line from the real logger, `n` identifying it. */
function logRequests(sink: ReturnType<typeof createSegmentSink>["sink"], from: number, to: number, route = "/v1/chat/completions") {
  const logger = createLogger("debug", sink);
  for (let n = from; n < to; n++)
    logger.log("info", "http.request", { request_id: `req_${n}`, method: "POST", route, status: 200, latency_ms: n });
}
const requestIds = (lines: string[]) => lines.map((l) => JSON.parse(l)).flatMap((e) => (e.event === "http.request" ? [e.request_id] : []));
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `req_${from + i}`);

describe("segments in R2", () => {
  it("are written at {prefix}/{YYYY-MM-DD}/{ms, 13 digits}-{8 hex}.jsonl as JSON lines", async () => {
    const prefix = uniquePrefix();
    const c = clock("2025-03-04T05:06:07.089Z");
    const s = createSegmentSink(env.AUDIT, { prefix, now: c.now, random: suffixes("0a1b2c3d") });
    logRequests(s.sink, 0, 3);
    expect(await listKeys(prefix)).toEqual([]); // buffered until flushed
    await s.flush();
    const key = `${prefix}/2025-03-04/1741064767089-0a1b2c3d.jsonl`;
    expect(segmentKey(prefix, Date.parse("2025-03-04T05:06:07.089Z"), "0a1b2c3d")).toBe(key);
    expect((await listKeys(prefix)).map((o) => o.key)).toEqual([key]);
    const object = await env.AUDIT.get(key);
    expect(object?.httpMetadata?.contentType).toBe("application/x-ndjson");
    const body = (await object?.text()) ?? "";
    expect(body.endsWith("\n")).toBe(true);
    expect(requestIds(body.split("\n").filter(Boolean))).toEqual(range(0, 3));
    // Nothing new, nothing written.
    await s.flush();
    expect(await listKeys(prefix)).toHaveLength(1);
    expect(s.stats()).toMatchObject({ writtenSegments: 1, bufferedLines: 0, pendingSegments: 0, heldBytes: 0 });
  });

  it("are create-only: an object already at the key is never overwritten", async () => {
    const prefix = uniquePrefix();
    const c = clock("2025-03-04T05:06:07.089Z");
    const taken = segmentKey(prefix, c.now().getTime(), "deadbeef");
    await env.AUDIT.put(taken, "precious\n");
    const s = createSegmentSink(env.AUDIT, { prefix, now: c.now, random: suffixes("deadbeef", "cafef00d") });
    logRequests(s.sink, 0, 2);
    await s.flush();
    expect(await readText(taken)).toBe("precious\n");
    expect(requestIds((await readText(segmentKey(prefix, c.now().getTime(), "cafef00d"))).split("\n").filter(Boolean))).toEqual(
      range(0, 2),
    );
    expect(s.stats().keyCollisions).toBe(1);
  });

  it("when every key drawn is taken, the lines wait in memory and the taken object stays as it was", async () => {
    const prefix = uniquePrefix();
    const c = clock("2025-03-04T05:06:07.089Z");
    const taken = segmentKey(prefix, c.now().getTime(), "deadbeef");
    await env.AUDIT.put(taken, "precious\n");
    const s = createSegmentSink(env.AUDIT, { prefix, now: c.now, random: () => "deadbeef" });
    logRequests(s.sink, 0, 2);
    await s.flush();
    expect((await listKeys(prefix)).map((o) => o.key)).toEqual([taken]);
    expect(await readText(taken)).toBe("precious\n");
    expect(s.stats()).toMatchObject({ pendingSegments: 1, writtenSegments: 0, putFailures: 1 });
  });

  it("no segment is larger than maxSegmentBytes, multi-byte text included; every line arrives once, in order", async () => {
    const prefix = uniquePrefix();
    const s = createSegmentSink(env.AUDIT, { prefix, maxSegmentBytes: 1024 });
    const logger = createLogger("debug", s.sink);
    for (let n = 0; n < 120; n++) {
      // Routes of varying length with 2-, 3- and 4-byte UTF-8 characters.
      const route = `/r/${"é€😀".repeat(n % 13)}`;
      logger.log("info", "http.request", { request_id: `req_${n}`, method: "GET", route, status: 200, latency_ms: 1 });
      if (n % 10 === 9) await s.flush(); // well within the 4 × cap held between flushes
    }
    expect(s.stats().droppedLines).toBe(0);
    const objects = await listKeys(prefix);
    expect(objects.length).toBeGreaterThan(5);
    for (const { key, size } of objects) {
      expect(size).toBeLessThanOrEqual(1024);
      expect(new TextEncoder().encode(await readText(key)).length).toBe(size);
    }
    expect(requestIds(await readLines(prefix))).toEqual(range(0, 120));
  });

  it("a single line over the cap is replaced by a valid, capped log.truncated line and counted", async () => {
    const prefix = uniquePrefix();
    const s = createSegmentSink(env.AUDIT, { prefix, maxSegmentBytes: 1024 });
    const logger = createLogger("debug", s.sink);
    logger.log("info", "http.request", { request_id: "req_before", method: "GET", route: "/", status: 200, latency_ms: 1 });
    logger.log("error", "http.error", {
      request_id: "req_big",
      code: "internal.error",
      status: 500,
      error_message: `"q" ${"ü".repeat(3000)}`,
    });
    logger.log("info", "http.request", { request_id: "req_after", method: "GET", route: "/", status: 200, latency_ms: 1 });
    await s.flush();
    for (const { size } of await listKeys(prefix)) expect(size).toBeLessThanOrEqual(1024);
    const entries = (await readLines(prefix)).map((l) => JSON.parse(l));
    expect(entries.map((e) => e.event)).toEqual(["http.request", "log.truncated", "http.request"]);
    const marker = entries[1];
    expect(marker).toMatchObject({ level: "error", event: "log.truncated", original_event: "http.error" });
    expect(marker.original_bytes).toBeGreaterThan(6000);
    expect(marker.truncated_head.startsWith('{"ts":')).toBe(true);
    expect(marker.truncated_head).toContain('"event":"http.error","request_id":"req_big"');
    expect(marker.truncated_head.length).toBeGreaterThan(300);
    expect(s.stats().truncatedLines).toBe(1);
  });

  it("refuses prefixes outside logs/ (audit segments are never a log sink's to rotate) and caps below 1 KiB", () => {
    expect(() => createSegmentSink(env.AUDIT, { prefix: "agents/main/audit" as LogPrefix })).toThrow(RangeError);
    expect(() => createSegmentSink(env.AUDIT, { prefix: "logs/../agents" })).toThrow(RangeError);
    expect(() => createSegmentSink(env.AUDIT, { prefix: "logs/gateway", maxSegmentBytes: 100 })).toThrow(RangeError);
    expect(() => createSegmentSink(env.AUDIT, { prefix: "logs/gateway", maxSegments: 0 })).toThrow(RangeError);
  });
});

describe("S1 §6.4 rotation caps obeyed", () => {
  it("keeps exactly maxSegments, deleting the oldest by key order across days; other objects are left alone", async () => {
    const prefix = uniquePrefix();
    // Segments another isolate wrote earlier, on an earlier day: the oldest of all.
    const older = [
      segmentKey(prefix, Date.parse("2025-02-27T23:59:59.000Z"), "0000aaaa"),
      segmentKey(prefix, Date.parse("2025-02-28T00:00:00.000Z"), "0000bbbb"),
    ];
    for (const key of older) await env.AUDIT.put(key, "{}\n");
    const notASegment = `${prefix}/README.txt`;
    await env.AUDIT.put(notASegment, "kept");
    const c = clock("2025-03-01T22:00:00.000Z");
    const s = createSegmentSink(env.AUDIT, { prefix, maxSegmentBytes: 1024, maxSegments: 5, now: c.now });
    const written: string[] = [];
    let n = 0;
    for (let day = 0; day < 4; day++) {
      for (let i = 0; i < 3; i++) {
        logRequests(s.sink, n, n + 1);
        n++;
        await s.flush();
        const keys = (await listKeys(prefix)).map((o) => o.key).filter((k) => k.endsWith(".jsonl"));
        written.push(keys.at(-1) as string);
        expect(keys.length).toBeLessThanOrEqual(5);
        c.advance(60 * 60 * 1000);
      }
      c.advance(21 * 60 * 60 * 1000);
    }
    const keys = (await listKeys(prefix)).map((o) => o.key);
    expect(keys.filter((k) => k.endsWith(".jsonl"))).toEqual(written.slice(-5));
    expect(keys).toContain(notASegment);
    for (const key of older) expect(keys).not.toContain(key);
    expect(requestIds(await readLines(prefix))).toEqual(range(7, 12));
  });

  it("the prefix is listed at the first write, when the known count goes over the cap and every RELIST_EVERY writes — not per flush", async () => {
    const prefix = uniquePrefix();
    let lists = 0;
    const counting: LogBucket = {
      put: (key, value, options) => env.AUDIT.put(key, value, options),
      get: (key) => env.AUDIT.get(key),
      list: (options) => {
        lists++;
        return env.AUDIT.list(options);
      },
      delete: (keys) => env.AUDIT.delete(keys),
    };
    const c = clock("2025-03-01T22:00:00.000Z");
    const s = createSegmentSink(counting, { prefix, maxSegmentBytes: 1024, maxSegments: 40, now: c.now });
    const flushOne = async (n: number) => {
      logRequests(s.sink, n, n + 1);
      await s.flush();
      c.advance(1000);
    };
    await flushOne(0);
    expect(lists).toBe(1); // the first write: what is there is unknown
    for (let n = 1; n <= RELIST_EVERY; n++) await flushOne(n);
    expect(lists).toBe(2); // RELIST_EVERY writes since the first listing
    for (let n = RELIST_EVERY + 1; n < 40; n++) await flushOne(n);
    expect(lists).toBe(3);
    await flushOne(40); // 41 known > 40: listed and rotated at once
    expect(lists).toBe(4);
    expect((await listKeys(prefix)).filter((o) => o.key.endsWith(".jsonl"))).toHaveLength(40);
    expect(s.stats().rotatedSegments).toBe(1);
  });

  it("segments dated over several days rotate in date order", async () => {
    const prefix = uniquePrefix();
    const c = clock("2025-03-01T22:00:00.000Z");
    const s = createSegmentSink(env.AUDIT, { prefix, maxSegmentBytes: 1024, maxSegments: 4, now: c.now, random: suffixes() });
    const days: string[] = [];
    for (let n = 0; n < 10; n++) {
      logRequests(s.sink, n, n + 1);
      await s.flush();
      days.push(c.now().toISOString().slice(0, 10));
      c.advance(9 * 60 * 60 * 1000); // 9 h: the ten segments land on five different days
    }
    const keys = (await listKeys(prefix)).map((o) => o.key);
    expect(keys).toHaveLength(4);
    expect(new Set(days).size).toBe(5);
    expect(keys.map((k) => k.split("/").at(-2))).toEqual(days.slice(-4));
    expect(requestIds(await readLines(prefix))).toEqual(range(6, 10));
    expect(s.stats().rotatedSegments).toBe(6);
  });
});

describe("provider lines", () => {
  it("model.call and startup.validation lines land in logs/gateway and logs/{providerId}; the rest in gateway only", async () => {
    const root = uniquePrefix();
    const logs = createR2LogSinks(env.AUDIT, { root });
    const logger = createLogger("debug", logs.sink);
    logger.log("info", "http.request", { request_id: "req_1", method: "GET", route: "/health", status: 200, latency_ms: 1 });
    logger.log("info", "model.call", {
      run_id: "run_1",
      provider: "moonshot",
      model: "kimi-k2",
      stack_sha256: "a".repeat(64),
      estimated_input_tokens: 100,
      status: "ok",
      latency_ms: 12,
    });
    logger.log("warn", "startup.validation", { provider: "openai", model: "gpt-4o-mini", mode: "warn", status: "failed", reason: "auth" });
    await logs.flush();
    const events = async (prefix: string) => (await readLines(prefix)).map((l) => JSON.parse(l).event);
    expect(await events(`${root}/gateway`)).toEqual(["http.request", "model.call", "startup.validation"]);
    expect(await events(`${root}/moonshot`)).toEqual(["model.call"]);
    expect(await events(`${root}/openai`)).toEqual(["startup.validation"]);
    expect(Object.keys(logs.stats()).sort()).toEqual([`${root}/gateway`, `${root}/moonshot`, `${root}/openai`]);
  });

  it("routeLogLine reads the provider field; odd provider ids get no prefix of their own", () => {
    const line = (event: string, provider: unknown) => JSON.stringify({ ts: "t", level: "info", event, provider });
    expect(routeLogLine(line("model.call", "moonshot"))).toEqual(["logs/gateway", "logs/moonshot"]);
    expect(routeLogLine(line("startup.validation", "openai"))).toEqual(["logs/gateway", "logs/openai"]);
    expect(routeLogLine(line("http.request", "moonshot"))).toEqual(["logs/gateway"]);
    for (const odd of ["../agents", "a/b", "gateway", "", "UPPER", 42, null])
      expect(routeLogLine(line("model.call", odd))).toEqual(["logs/gateway"]);
    expect(routeLogLine('not json "model.call"')).toEqual(["logs/gateway"]);
  });
});

describe("R2 failures", () => {
  it("a put that fails keeps its lines; after recovery they are written exactly once, in order", async () => {
    const prefix = uniquePrefix();
    const bucket = flakyBucket(2);
    const s = createSegmentSink(bucket, { prefix, maxSegmentBytes: 1024 });
    logRequests(s.sink, 0, 5);
    await s.flush(); // fails
    expect(await listKeys(prefix)).toEqual([]);
    logRequests(s.sink, 5, 10);
    await s.flush(); // fails again
    expect(await listKeys(prefix)).toEqual([]);
    expect(s.stats()).toMatchObject({ putFailures: 2, writtenSegments: 0 });
    expect(s.stats().heldBytes).toBeGreaterThan(0);
    logRequests(s.sink, 10, 12);
    await s.flush(); // recovers
    expect(requestIds(await readLines(prefix))).toEqual(range(0, 12));
    expect(s.stats()).toMatchObject({ putFailures: 2, bufferedLines: 0, pendingSegments: 0, heldBytes: 0 });
    await s.flush();
    expect(requestIds(await readLines(prefix))).toEqual(range(0, 12));
  });

  it("a put that stored the object but lost its answer is recognised on retry: no duplicate lines", async () => {
    const prefix = uniquePrefix();
    const bucket = flakyBucket(1, "after");
    const s = createSegmentSink(bucket, { prefix, maxSegmentBytes: 1024 });
    logRequests(s.sink, 0, 4);
    await s.flush(); // R2 stored it, the sink saw an error
    expect(s.stats()).toMatchObject({ putFailures: 1, pendingSegments: 1 });
    logRequests(s.sink, 4, 6);
    await s.flush();
    expect(requestIds(await readLines(prefix))).toEqual(range(0, 6));
    expect(await listKeys(prefix)).toHaveLength(2);
    expect(s.stats()).toMatchObject({ pendingSegments: 0, keyCollisions: 0 });
  });

  it("memory is bounded at 4 × maxSegmentBytes: the oldest lines go and a log.dropped line counts them", async () => {
    const prefix = uniquePrefix();
    const bucket = flakyBucket(Number.POSITIVE_INFINITY);
    const s = createSegmentSink(bucket, { prefix, maxSegmentBytes: 1024 });
    logRequests(s.sink, 0, 100);
    const held = s.stats();
    expect(held.heldBytes).toBeLessThanOrEqual(4 * 1024);
    expect(held.droppedLines).toBeGreaterThan(0);
    await s.flush();
    expect(await listKeys(prefix)).toEqual([]);
    bucket.fail(0);
    await s.flush();
    const entries = (await readLines(prefix)).map((l) => JSON.parse(l));
    expect(entries[0]).toMatchObject({ level: "warn", event: "log.dropped", dropped_lines: held.droppedLines });
    const kept = requestIds(entries.map((e) => JSON.stringify(e)));
    expect(kept).toEqual(range(held.droppedLines, 100)); // the newest lines, none missing
    expect(entries.filter((e) => e.event === "log.dropped")).toHaveLength(1);
    for (const { size } of await listKeys(prefix)) expect(size).toBeLessThanOrEqual(1024);
  });

  it("segments cut during an outage are dropped oldest first too, and every line is written or counted", async () => {
    const prefix = uniquePrefix();
    const bucket = flakyBucket(Number.POSITIVE_INFINITY);
    const s = createSegmentSink(bucket, { prefix, maxSegmentBytes: 1024 });
    for (let n = 0; n < 200; n += 10) {
      logRequests(s.sink, n, n + 10);
      await s.flush(); // every flush fails and leaves a pending segment
      expect(s.stats().heldBytes).toBeLessThanOrEqual(4 * 1024 + 200); // + the small log.dropped line
    }
    bucket.fail(0);
    await s.flush();
    const entries = (await readLines(prefix)).map((l) => JSON.parse(l));
    const dropped = entries.filter((e) => e.event === "log.dropped").reduce((sum, e) => sum + e.dropped_lines, 0);
    const kept = requestIds(entries.map((e) => JSON.stringify(e)));
    expect(dropped + kept.length).toBe(200);
    expect(dropped).toBe(s.stats().droppedLines);
    expect(kept).toEqual(range(200 - kept.length, 200));
  });

  it("flush never throws, even when list and delete fail during rotation", async () => {
    const prefix = uniquePrefix();
    const broken: LogBucket = {
      put: (key, value, options) => env.AUDIT.put(key, value, options),
      get: (key) => env.AUDIT.get(key),
      list: async () => {
        throw new Error("list down");
      },
      delete: async () => {
        throw new Error("delete down");
      },
    };
    const s = createSegmentSink(broken, { prefix, maxSegments: 1 });
    logRequests(s.sink, 0, 1);
    await expect(s.flush()).resolves.toBeUndefined();
    expect(s.stats()).toMatchObject({ writtenSegments: 1, rotationFailures: 1 });
  });
});

describe("the SessionDO's flush cadence (issue 12)", () => {
  it("flushSoon writes at once when the last flush is OBJECT_FLUSH_INTERVAL_MS old, else once, on a timer, when it is", async () => {
    const puts: { at: number; key: string; body: string }[] = [];
    const bucket = {
      put: async (key: string, value: string, options: R2PutOptions) => {
        puts.push({ at: Date.now(), key, body: value });
        return env.AUDIT.put(key, value, options);
      },
      get: (key: string) => env.AUDIT.get(key),
      list: (options: R2ListOptions) => env.AUDIT.list(options),
      delete: (keys: string[]) => env.AUDIT.delete(keys),
    } as unknown as R2Bucket;
    const r2 = isolateLogSinks(bucket);
    const tag = crypto.randomUUID();
    const line = (n: number) => r2.sinks.sink(JSON.stringify({ level: "info", event: "run.finished", run_id: `${tag}-${n}` }), "info");
    const settle = () => new Promise((r) => setTimeout(r, 200));

    line(1);
    r2.flushSoon();
    await settle();
    expect(puts.map((p) => p.body.includes(`${tag}-1`))).toEqual([true]); // never flushed in this isolate: at once
    const first = puts[0]?.at as number;

    line(2);
    r2.flushSoon();
    line(3);
    r2.flushSoon(); // one timer for both
    await settle();
    expect(puts).toHaveLength(1);
    await until(async () => puts.length >= 2, 5_000);
    await settle();
    expect(puts).toHaveLength(2);
    expect((puts[1]?.at as number) - first).toBeGreaterThanOrEqual(OBJECT_FLUSH_INTERVAL_MS - 50);
    expect(puts[1]?.key).toMatch(/^logs\/gateway\/\d{4}-\d{2}-\d{2}\/\d{13}-[0-9a-f]{8}\.jsonl$/);
    expect(
      puts[1]?.body
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).run_id),
    ).toEqual([`${tag}-2`, `${tag}-3`]);
  });
});

describe("S1 §6.4 no raw prompts, hashes present", () => {
  it("a full assembly and a model call logged through the R2 sinks carry hashes only", async () => {
    const root = uniquePrefix();
    const logs = createR2LogSinks(env.AUDIT, { root, maxSegmentBytes: 4096 });
    const logger = createLogger("debug", logs.sink);
    const userMessage = "my diary says the launch code is 0000; please keep that between us";
    const p = await assemblePromptStack({
      agentId: "main",
      channel: "telegram",
      toolPolicy: "native",
      task: "automation",
      inlineRole: "Inline role text that must stay private to the gateway.",
      history: [{ role: "user", content: "an earlier private turn about the launch code" }],
      userMessage,
    });
    logPromptAssembly(logger, "req_log", p.manifest);
    logger.log("info", "model.call", {
      run_id: "run_log",
      provider: "moonshot",
      model: "kimi-k2",
      stack_sha256: p.manifest.stack_sha256,
      estimated_input_tokens: 1234,
      status: "ok",
      prompt_tokens: 1200,
      completion_tokens: 34,
      latency_ms: 321,
    });
    await logs.flush();

    const gateway = await readLines(`${root}/gateway`);
    const provider = await readLines(`${root}/moonshot`);
    expect(gateway).toHaveLength(2);
    expect(provider).toHaveLength(1);
    const everything = [...gateway, ...provider].join("\n");
    // No 24-character excerpt of any of L1–L5, of the history or of the user message.
    const texts = [...p.system.map((s) => s.content), "an earlier private turn about the launch code", userMessage];
    expect(p.system.map((s) => s.layer)).toEqual(["L1", "L2", "L3", "L4", "L5"]);
    for (const text of texts) {
      for (let i = 0; i + 24 <= text.length; i += 12) expect(everything).not.toContain(text.slice(i, i + 24));
    }
    expect(everything).not.toContain("launch code");

    const assembled = JSON.parse(gateway[0] as string);
    expect(assembled.event).toBe("prompt.assembled");
    expect(assembled.stack_sha256).toMatch(/^[a-f0-9]{64}$/);
    expect(assembled.stack_sha256).toBe(p.manifest.stack_sha256);
    expect(assembled.layers.map((l: { layer: string; sha256: string }) => [l.layer, l.sha256])).toEqual(
      p.manifest.stack.map((e) => [e.layer, e.sha256]),
    );
    // The user message is present as its SHA-256 only (S1 §4.1, §4.3).
    expect(assembled.layers.at(-1)).toMatchObject({ layer: "L6", sha256: await sha256Hex(userMessage) });
    for (const { sha256 } of p.manifest.stack) expect(sha256).toMatch(/^[a-f0-9]{64}$/);

    const call = JSON.parse(provider[0] as string);
    expect(call).toMatchObject({ event: "model.call", provider: "moonshot", stack_sha256: p.manifest.stack_sha256 });
    expect(JSON.parse(gateway[1] as string)).toEqual(call);
  });
});
