/**
 * Job schedules (S3 §4) as pure functions: Go's own ParseDuration cases reproduced to the nanosecond,
 * the @every minimum the minute tick imposes, strict RFC 3339 one-shot times, cron refused with a
 * message naming the accepted forms, and IANA time-zone names.
 */
import { describe, expect, it } from "vitest";
import { MIN_INTERVAL_MS, parseGoDuration, parseRfc3339, parseSchedule, validateTimeZone } from "../../src/scheduler/schedule";

const NS = 1n;
const US = 1_000n * NS;
const MS = 1_000n * US;
const S = 1_000n * MS;
const M = 60n * S;
const H = 60n * M;

const ACCEPTED = 'use "@every <duration>" (e.g. "@every 5m", at least 1m) or a one-shot RFC 3339 time (e.g. "2026-02-18T09:00:00Z")';

describe("S3 §4: @every durations are Go's time.ParseDuration", () => {
  // Go's parseDurationTests (src/time/time_test.go), with the expected value written the way Go writes it.
  const cases: [string, bigint][] = [
    // simple
    ["0", 0n],
    ["5s", 5n * S],
    ["30s", 30n * S],
    ["1478s", 1478n * S],
    // sign
    ["-5s", -5n * S],
    ["+5s", 5n * S],
    ["-0", 0n],
    ["+0", 0n],
    // decimal
    ["5.0s", 5n * S],
    ["5.6s", 5n * S + 600n * MS],
    ["5.s", 5n * S],
    [".5s", 500n * MS],
    ["1.0s", 1n * S],
    ["1.00s", 1n * S],
    ["1.004s", 1n * S + 4n * MS],
    ["1.0040s", 1n * S + 4n * MS],
    ["100.00100s", 100n * S + 1n * MS],
    // different units
    ["10ns", 10n * NS],
    ["11us", 11n * US],
    ["12\u00b5s", 12n * US], // U+00B5 MICRO SIGN
    ["12\u03bcs", 12n * US], // U+03BC GREEK SMALL LETTER MU
    ["13ms", 13n * MS],
    ["14s", 14n * S],
    ["15m", 15n * M],
    ["16h", 16n * H],
    // composite durations
    ["3h30m", 3n * H + 30n * M],
    ["10.5s4m", 4n * M + 10n * S + 500n * MS],
    ["-2m3.4s", -(2n * M + 3n * S + 400n * MS)],
    ["1h2m3s4ms5us6ns", 1n * H + 2n * M + 3n * S + 4n * MS + 5n * US + 6n * NS],
    ["39h9m14.425s", 39n * H + 9n * M + 14n * S + 425n * MS],
    // large value
    ["52763797000ns", 52763797000n * NS],
    // more than 9 digits after the decimal point
    ["0.3333333333333333333h", 20n * M],
    // 9007199254740993 = 1<<53+1 cannot be stored precisely in a float64
    ["9007199254740993ns", ((1n << 53n) + 1n) * NS],
    // largest duration that can be represented by int64 in nanoseconds
    ["9223372036854775807ns", (1n << 63n) - 1n],
    ["9223372036854775.807us", (1n << 63n) - 1n],
    ["9223372036s854ms775us807ns", (1n << 63n) - 1n],
    ["-9223372036854775808ns", -(1n << 63n)],
    ["-9223372036854775.808us", -(1n << 63n)],
    ["-9223372036s854ms775us808ns", -(1n << 63n)],
    // largest negative value
    ["-9223372036854775808ns", -(1n << 63n)],
    // largest negative round trip value, see https://golang.org/issue/48629
    ["-2562047h47m16.854775808s", -(1n << 63n)],
    // huge string; issue 15011
    ["0.100000000000000000000h", 6n * M],
    // This value tests the first overflow check in leadingFraction.
    ["0.830103483285477580700h", 49n * M + 48n * S + 372539827n * NS],
  ];

  it.each(cases)("S3 §4: @every accepts Go durations — %s", (text, ns) => {
    expect(parseGoDuration(text)).toEqual({ ok: true, value: ns });
  });

  // Go's parseDurationErrorTests. Go's non-ASCII cases are raw, invalid UTF-8 bytes ("\x85\x85", "\xffff",
  // "\xef\xbf\xbd" …), which a JS string cannot hold; these are their nearest string forms, and fail the same way.
  const errors: [string, string][] = [
    // invalid
    ["", 'time: invalid duration ""'],
    ["3", 'time: missing unit in duration "3"'],
    ["-", 'time: invalid duration "-"'],
    ["s", 'time: invalid duration "s"'],
    [".", 'time: invalid duration "."'],
    ["-.", 'time: invalid duration "-."'],
    [".s", 'time: invalid duration ".s"'],
    ["+.s", 'time: invalid duration "+.s"'],
    ["1d", 'time: unknown unit "d" in duration "1d"'],
    ["\u0085\u0085", 'time: invalid duration "\u0085\u0085"'],
    ["\u00ffff", 'time: invalid duration "\u00ffff"'],
    ["hello \u00ffff world", 'time: invalid duration "hello \u00ffff world"'],
    ["\uFFFD", 'time: invalid duration "\uFFFD"'],
    ["\uFFFD hello \uFFFD world", 'time: invalid duration "\uFFFD hello \uFFFD world"'],
    // overflow
    ["9223372036854775810ns", 'time: invalid duration "9223372036854775810ns"'],
    ["9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'],
    // largest negative value of type int64 in nanoseconds should fail
    ["-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'],
    ["9223372036854776us", 'time: invalid duration "9223372036854776us"'],
    ["3000000h", 'time: invalid duration "3000000h"'],
    ["9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'],
    ["9223372036854ms775us808ns", 'time: invalid duration "9223372036854ms775us808ns"'],
  ];

  it.each(errors)("S3 §4: @every refuses what Go refuses, with Go's message — %j", (text, message) => {
    expect(parseGoDuration(text)).toEqual({ ok: false, error: message });
  });
});

describe("S3 §4: @every <duration> schedules", () => {
  it("S3 §4: @every accepts Go durations of at least 1m, as whole milliseconds", () => {
    expect(parseSchedule("@every 1m")).toEqual({ ok: true, value: { kind: "every", intervalMs: 60_000 } });
    expect(parseSchedule("@every 1h30m")).toEqual({ ok: true, value: { kind: "every", intervalMs: 5_400_000 } });
    expect(parseSchedule("@every 10.5s4m")).toEqual({ ok: true, value: { kind: "every", intervalMs: 250_500 } });
    expect(parseSchedule("@every 90s")).toEqual({ ok: true, value: { kind: "every", intervalMs: 90_000 } });
    // 0.5ms is 500µs, which truncates away: intervals are whole milliseconds.
    expect(parseSchedule("@every 1m0.5ms")).toEqual({ ok: true, value: { kind: "every", intervalMs: 60_000 } });
    expect(parseSchedule("@every 1m0.5s")).toEqual({ ok: true, value: { kind: "every", intervalMs: 60_500 } });
    expect(MIN_INTERVAL_MS).toBe(60_000);
  });

  it("S3 §4: @every below 1m is refused, because the scheduler ticks once a minute", () => {
    expect(parseSchedule("@every 59s")).toEqual({
      ok: false,
      error: "@every interval 59s is below the minimum of 1m: the scheduler ticks once a minute",
    });
    for (const text of ["@every 59.999s", "@every 1000000us", "@every 59999999999ns", "@every 1s"]) {
      const r = parseSchedule(text);
      expect(r.ok, text).toBe(false);
      if (!r.ok) expect(r.error, text).toMatch(/is below the minimum of 1m: the scheduler ticks once a minute$/);
    }
    // The message shows the parsed value as Go prints it.
    expect(parseSchedule("@every 1000000us")).toMatchObject({ ok: false, error: expect.stringContaining("interval 1s is below") });
    expect(parseSchedule("@every 59.999s")).toMatchObject({ ok: false, error: expect.stringContaining("interval 59.999s is below") });
  });

  it("S3 §4: @every zero or negative is refused: the interval must be positive", () => {
    expect(parseSchedule("@every 0")).toEqual({ ok: false, error: "@every interval must be positive, got 0s" });
    expect(parseSchedule("@every -5m")).toEqual({ ok: false, error: "@every interval must be positive, got -5m0s" });
    expect(parseSchedule("@every -0")).toMatchObject({ ok: false, error: expect.stringContaining("must be positive") });
    expect(parseSchedule("@every 0s")).toMatchObject({ ok: false, error: expect.stringContaining("must be positive") });
  });

  it("S3 §4: @every needs exactly one space and a duration; nothing is trimmed", () => {
    for (const text of ["@every", "@every ", "@every  5m", "@every\t5m", " @every 5m", "@every 5m ", "@every 5m\n"]) {
      expect(parseSchedule(text).ok, JSON.stringify(text)).toBe(false);
    }
    expect(parseSchedule("@every")).toEqual({ ok: false, error: '"@every" needs a duration after one space, e.g. "@every 5m"' });
    expect(parseSchedule("@every  5m")).toEqual({
      ok: false,
      error: '"@every" must be followed by exactly one space, then the duration (e.g. "@every 5m")',
    });
    expect(parseSchedule(" @every 5m")).toEqual({ ok: false, error: 'schedule " @every 5m" has leading or trailing whitespace' });
    expect(parseSchedule("")).toMatchObject({ ok: false, error: expect.stringContaining("schedule is empty") });
  });

  it("S3 §4: @every with a duration Go refuses carries Go's message", () => {
    expect(parseSchedule("@every 1d")).toEqual({
      ok: false,
      error: 'invalid @every interval: time: unknown unit "d" in duration "1d"',
    });
    expect(parseSchedule("@every 5")).toEqual({ ok: false, error: 'invalid @every interval: time: missing unit in duration "5"' });
    expect(parseSchedule("@every 3000000h")).toEqual({ ok: false, error: 'invalid @every interval: time: invalid duration "3000000h"' });
  });
});

describe("S3 §4: one-shot RFC 3339 times", () => {
  it("S3 §4: a one-shot time with Z is that UTC instant", () => {
    expect(parseRfc3339("2026-02-18T09:00:00Z")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0) });
    expect(parseSchedule("2026-02-18T09:00:00Z")).toEqual({ ok: true, value: { kind: "once", atMs: Date.UTC(2026, 1, 18, 9, 0, 0) } });
  });

  it("S3 §4: offsets are subtracted to reach UTC, and -00:00 is UTC", () => {
    expect(parseRfc3339("2026-02-18T09:00:00+05:30")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 3, 30, 0) });
    expect(parseRfc3339("2026-02-18T09:00:00-08:00")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 17, 0, 0) });
    expect(parseRfc3339("2026-12-31T23:30:00-01:00")).toEqual({ ok: true, value: Date.UTC(2027, 0, 1, 0, 30, 0) });
    expect(parseRfc3339("2026-02-18T09:00:00-00:00")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0) });
    expect(parseRfc3339("2026-02-18T09:00:00+00:00")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0) });
    expect(parseRfc3339("2026-02-18T09:00:00+23:59")).toEqual({ ok: true, value: Date.UTC(2026, 1, 17, 9, 1, 0) });
  });

  it("S3 §4: lower-case t and z are accepted", () => {
    expect(parseRfc3339("2026-02-18t09:00:00z")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0) });
    expect(parseSchedule("2026-02-18t09:00:00z")).toEqual({ ok: true, value: { kind: "once", atMs: Date.UTC(2026, 1, 18, 9, 0, 0) } });
  });

  it("S3 §4: fractions of any length are truncated to milliseconds", () => {
    expect(parseRfc3339("2026-02-18T09:00:00.5Z")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0, 500) });
    expect(parseRfc3339("2026-02-18T09:00:00.123456789Z")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0, 123) });
    expect(parseRfc3339("2026-02-18T09:00:00.9999Z")).toEqual({ ok: true, value: Date.UTC(2026, 1, 18, 9, 0, 0, 999) });
    expect(parseRfc3339("2026-02-18T09:00:00.Z").ok).toBe(false);
  });

  it("S3 §4: dates are checked against the calendar, with Gregorian leap years", () => {
    expect(parseRfc3339("2028-02-29T00:00:00Z")).toEqual({ ok: true, value: Date.UTC(2028, 1, 29) });
    expect(parseRfc3339("2000-02-29T00:00:00Z")).toEqual({ ok: true, value: Date.UTC(2000, 1, 29) });
    expect(parseRfc3339("2027-02-29T00:00:00Z")).toEqual({
      ok: false,
      error: 'invalid RFC 3339 time "2027-02-29T00:00:00Z": 2027-02-29 is not a date (February 2027 has 28 days)',
    });
    expect(parseRfc3339("2100-02-29T00:00:00Z")).toMatchObject({ ok: false, error: expect.stringContaining("February 2100 has 28 days") });
    expect(parseRfc3339("2026-04-31T00:00:00Z")).toMatchObject({ ok: false, error: expect.stringContaining("April 2026 has 30 days") });
    expect(parseRfc3339("2026-01-00T00:00:00Z").ok).toBe(false);
    expect(parseRfc3339("2026-13-01T00:00:00Z")).toMatchObject({ ok: false, error: expect.stringContaining("month 13 is out of range") });
    expect(parseRfc3339("2026-00-01T00:00:00Z").ok).toBe(false);
  });

  it("S3 §4: hour, minute and second are range-checked; leap seconds are not supported", () => {
    expect(parseRfc3339("2026-02-18T24:00:00Z")).toEqual({
      ok: false,
      error: 'invalid RFC 3339 time "2026-02-18T24:00:00Z": hour 24 is out of range (00–23)',
    });
    expect(parseRfc3339("2026-02-18T23:60:00Z")).toMatchObject({ ok: false, error: expect.stringContaining("minute 60 is out of range") });
    expect(parseRfc3339("2026-02-18T23:59:60Z")).toMatchObject({
      ok: false,
      error: expect.stringContaining("leap seconds are not supported"),
    });
  });

  it("S3 §4: an offset is required, and must be Z or ±HH:MM in range", () => {
    expect(parseRfc3339("2026-02-18T09:00:00")).toEqual({
      ok: false,
      error: 'invalid RFC 3339 time "2026-02-18T09:00:00": a UTC offset is required (Z or ±HH:MM), e.g. "2026-02-18T09:00:00Z"',
    });
    expect(parseSchedule("2026-02-18T09:00:00")).toMatchObject({ ok: false, error: expect.stringContaining("a UTC offset is required") });
    expect(parseRfc3339("2026-02-18T09:00:00+24:00")).toMatchObject({
      ok: false,
      error: expect.stringContaining("offset hour 24 is out of range (00–23)"),
    });
    expect(parseRfc3339("2026-02-18T09:00:00+01:60")).toMatchObject({ ok: false, error: expect.stringContaining("offset minute 60") });
    for (const text of ["2026-02-18T09:00:00+0100", "2026-02-18T09:00:00+01", "2026-02-18T09:00:00 Z", "2026-02-18T09:00:00UTC"]) {
      expect(parseRfc3339(text).ok, text).toBe(false);
    }
  });

  it("S3 §4: the shape is strict: T between date and time, seconds present, four-digit years", () => {
    expect(parseRfc3339("2026-02-18 09:00:00Z")).toMatchObject({ ok: false, error: expect.stringContaining('separated by "T"') });
    expect(parseSchedule("2026-02-18 09:00:00Z")).toMatchObject({ ok: false, error: expect.stringContaining('separated by "T"') });
    for (const text of ["2026-02-18T09:00Z", "2026-2-18T09:00:00Z", "26-02-18T09:00:00Z", "2026-02-18", "+2026-02-18T09:00:00Z", ""]) {
      expect(parseRfc3339(text).ok, text).toBe(false);
    }
  });

  it("S3 §4: years 0000–0099 are those years, not 1900–1999", () => {
    expect(parseRfc3339("0099-01-01T00:00:00Z")).toEqual({ ok: true, value: -59042995200000 });
    expect(parseRfc3339("0000-03-01T00:00:00Z")).toEqual({ ok: true, value: new Date("0000-03-01T00:00:00Z").getTime() });
    expect(parseRfc3339("0000-02-29T00:00:00Z").ok).toBe(true); // year 0 is divisible by 400
  });
});

describe("S3 §4: cron expressions are refused", () => {
  it("S3 §4: cron expressions and macros are refused with a message naming the accepted forms", () => {
    expect(parseSchedule("*/5 * * * *")).toEqual({
      ok: false,
      error: `cron expressions are not supported (got "*/5 * * * *"); ${ACCEPTED}`,
    });
    for (const text of [
      "0 9 * * MON-FRI",
      "0 0 12 * * ?",
      "0 15 10 L * ?",
      "0 9 * * SAT",
      "@daily",
      "@hourly",
      "@yearly",
      "@reboot",
      "@midnight",
    ]) {
      expect(parseSchedule(text), text).toMatchObject({ ok: false, error: expect.stringMatching(/^cron expressions are not supported/) });
    }
  });

  it("S3 §4: anything else is refused with a message naming the accepted forms", () => {
    expect(parseSchedule("every 5 minutes")).toEqual({ ok: false, error: `unrecognized schedule "every 5 minutes"; ${ACCEPTED}` });
    for (const text of ["5m", "@everyday", "@weekdays", "tomorrow", "* * *"]) {
      expect(parseSchedule(text), text).toMatchObject({ ok: false, error: expect.stringMatching(/^unrecognized schedule/) });
    }
  });
});

describe("S3 §4: job time zones are IANA names", () => {
  it("S3 §4: IANA names are accepted, their case corrected, an alias kept as written", () => {
    expect(validateTimeZone("UTC")).toEqual({ ok: true, value: "UTC" });
    expect(validateTimeZone("Europe/Berlin")).toEqual({ ok: true, value: "Europe/Berlin" });
    expect(validateTimeZone("America/New_York")).toEqual({ ok: true, value: "America/New_York" });
    expect(validateTimeZone("Etc/GMT+1")).toEqual({ ok: true, value: "Etc/GMT+1" });
    expect(validateTimeZone("europe/berlin")).toEqual({ ok: true, value: "Europe/Berlin" });
    // ICU may resolve a current name to a legacy alias ("Asia/Calcutta"): the operator's spelling is kept.
    expect(validateTimeZone("Asia/Kolkata")).toEqual({ ok: true, value: "Asia/Kolkata" });
  });

  it("S3 §4: unknown names, offsets, empty and padded names are refused", () => {
    expect(validateTimeZone("Mars/Olympus")).toEqual({
      ok: false,
      error: 'unknown time zone "Mars/Olympus"; use an IANA name such as "UTC" or "Europe/Berlin"',
    });
    expect(validateTimeZone("+01:00")).toMatchObject({ ok: false, error: expect.stringContaining("is not an IANA time-zone name") });
    for (const name of ["", "+01:00", "-05:00", "Europe/Berlin ", " UTC", "UTC+1", "Europe/../Berlin"]) {
      expect(validateTimeZone(name).ok, JSON.stringify(name)).toBe(false);
    }
  });
});
