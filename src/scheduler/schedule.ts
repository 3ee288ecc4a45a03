/**
 * Job schedules (S3 §4), pure and synchronous: the text a job's `schedule`
 * holds, checked once when the job is saved and turned into a `Schedule` the
 * tick can act on.
 *
 * Two forms are accepted, and nothing else:
 * - `@every <duration>` — a Go duration (`time.ParseDuration`, reproduced
 *   exactly, so `1h30m`, `10.5s4m` and `90s` mean what they mean in Go), at
 *   least `MIN_INTERVAL_MS`: the tick runs once a minute, so a shorter interval
 *   would silently become one minute.
 * - a one-shot RFC 3339 date-time with an explicit offset
 *   (`2026-02-18T09:00:00Z`, `2026-02-18T10:30:00+01:00`).
 *
 * Decisions:
 * - Cron expressions (five or six cron fields such as `0 9 * * MON-FRI`, and
 *   macros such as `@daily`) are refused with a message that says so and names
 *   the two accepted forms, rather than the generic "unrecognized schedule",
 *   because they are the usual mistake.
 * - Nothing is trimmed: a schedule with leading or trailing whitespace, or
 *   more than one space after `@every`, is an error, so what is stored is what
 *   was meant.
 * - RFC 3339 is read strictly: `T` (or `t`) between date and time, seconds
 *   present, an offset required (a time without one has no single instant),
 *   no leap seconds; fractions of any length are truncated to milliseconds.
 * - Time-zone names are IANA names only, canonicalised by the runtime's ICU
 *   data; fixed offsets such as `+01:00` are refused (an offset is not a zone:
 *   it does not follow daylight saving).
 */

export type ParseResult<T> = { ok: true; value: T } | { ok: false; error: string };

/** The tick's granularity: the shortest @every interval accepted. */
export const MIN_INTERVAL_MS = 60_000;

export type Schedule =
  | { kind: "every"; intervalMs: number } // from "@every <duration>"
  | { kind: "once"; atMs: number }; // from an RFC3339 timestamp, epoch ms (UTC)

const ok = <T>(value: T): ParseResult<T> => ({ ok: true, value });
const fail = <T>(error: string): ParseResult<T> => ({ ok: false, error });
const quote = (s: string): string => JSON.stringify(s);

// ---------------------------------------------------------------------------
// Go durations
// ---------------------------------------------------------------------------

/** 2^63: the magnitude of Go's most negative Duration; every overflow check is against it. */
const TWO_63 = 1n << 63n;
const INT64_MAX = TWO_63 - 1n;

const NS_PER_MS = 1_000_000n;

/** Go's unitMap, in nanoseconds. Both micro signs are accepted, as in Go. */
const UNITS: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["\u00b5s", 1_000n], // U+00B5 MICRO SIGN
  ["\u03bcs", 1_000n], // U+03BC GREEK SMALL LETTER MU
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= "0" && c <= "9";

/** Go's Duration.String(), for messages: `1h0m0s`, `59.999s`, `1.5ms`, `-5m0s`, `0s`. */
function formatGoDuration(d: bigint): string {
  if (d === 0n) return "0s";
  const sign = d < 0n ? "-" : "";
  const u = d < 0n ? -d : d;
  // The fractional part of `v` at `prec` digits, trailing zeros dropped, and what is left above it.
  const frac = (v: bigint, prec: number): [string, bigint] => {
    const p = 10n ** BigInt(prec);
    const digits = (v % p).toString().padStart(prec, "0").replace(/0+$/, "");
    return [digits === "" ? "" : `.${digits}`, v / p];
  };
  if (u < 1_000n) return `${sign}${u}ns`;
  if (u < 1_000_000n) {
    const [f, whole] = frac(u, 3);
    return `${sign}${whole}${f}\u00b5s`;
  }
  if (u < 1_000_000_000n) {
    const [f, whole] = frac(u, 6);
    return `${sign}${whole}${f}ms`;
  }
  const [f, secs] = frac(u, 9);
  let out = `${secs % 60n}${f}s`;
  const mins = secs / 60n;
  if (mins > 0n) {
    out = `${mins % 60n}m${out}`;
    const hours = mins / 60n;
    if (hours > 0n) out = `${hours}h${out}`;
  }
  return sign + out;
}

/** Go's time.ParseDuration, exactly: returns nanoseconds as a bigint (int64 range, negative allowed). */
export function parseGoDuration(text: string): ParseResult<bigint> {
  const invalid = (): ParseResult<bigint> => fail(`time: invalid duration ${quote(text)}`);
  let s = text;
  let neg = false;
  if (s[0] === "-" || s[0] === "+") {
    neg = s[0] === "-";
    s = s.slice(1);
  }
  if (s === "0") return ok(0n);
  if (s === "") return invalid();

  let d = 0n;
  let i = 0;
  while (i < s.length) {
    // The next character must be [0-9.]
    if (!(s[i] === "." || isDigit(s[i]))) return invalid();

    // Integer part, [0-9]*, with Go's uint64 overflow checks (leadingInt).
    let v = 0n;
    const intStart = i;
    for (; isDigit(s[i]); i++) {
      if (v > TWO_63 / 10n) return invalid();
      v = v * 10n + BigInt(s.charCodeAt(i) - 48);
      if (v > TWO_63) return invalid();
    }
    const pre = i > intStart;

    // Fraction, (\.[0-9]*)?: digits past what fits are consumed and ignored (leadingFraction).
    let f = 0n;
    let scale = 1; // a float64 in Go, and it stays one here: value = v + f/scale
    let post = false;
    if (s[i] === ".") {
      i++;
      const fracStart = i;
      let overflow = false;
      for (; isDigit(s[i]); i++) {
        if (overflow) continue;
        if (f > INT64_MAX / 10n) {
          overflow = true;
          continue;
        }
        const y = f * 10n + BigInt(s.charCodeAt(i) - 48);
        if (y > TWO_63) {
          overflow = true;
          continue;
        }
        f = y;
        scale *= 10;
      }
      post = i > fracStart;
    }
    if (!pre && !post) return invalid(); // "." or ".s": no digits at all

    // Unit: everything up to the next '.' or digit.
    const unitStart = i;
    while (i < s.length && s[i] !== "." && !isDigit(s[i])) i++;
    if (i === unitStart) return fail(`time: missing unit in duration ${quote(text)}`);
    const u = s.slice(unitStart, i);
    const unit = UNITS.get(u);
    if (unit === undefined) return fail(`time: unknown unit ${quote(u)} in duration ${quote(text)}`);

    if (v > TWO_63 / unit) return invalid();
    v *= unit;
    if (f > 0n) {
      // Go does this step in float64 (nanosecond-accurate for fractions of an hour), so the
      // rounding must be float64's too: Number(f) rounds like Go's uint64 → float64 conversion.
      v += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
      if (v > TWO_63) return invalid();
    }
    d += v;
    if (d > TWO_63) return invalid();
  }
  if (neg) return ok(-d);
  if (d > INT64_MAX) return invalid();
  return ok(d);
}

// ---------------------------------------------------------------------------
// RFC 3339
// ---------------------------------------------------------------------------

const RFC3339_EXAMPLE = '"2026-02-18T09:00:00Z"';
const MONTH_NAMES = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
] as const;

const isLeapYear = (y: number): boolean => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

// Date and time are captured separately from the tail, so a missing or malformed offset gets its own message.
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})([Tt ])(\d{2}):(\d{2}):(\d{2})(\.\d*)?(.*)$/s;
const OFFSET = /^([+-])(\d{2}):(\d{2})$/;

/** An RFC3339 date-time WITH offset ("Z"/"z" or ±hh:mm) → epoch ms. */
export function parseRfc3339(text: string): ParseResult<number> {
  const bad = (why: string): ParseResult<number> => fail(`invalid RFC 3339 time ${quote(text)}: ${why}`);
  const m = DATE_TIME.exec(text);
  if (!m) {
    return bad(`expected YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or ±HH:MM, e.g. ${RFC3339_EXAMPLE}`);
  }
  const [, ys, mos, ds, sep, hs, mis, ss, fraction, tail] = m as unknown as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string | undefined,
    string,
  ];
  if (sep === " ") return bad(`date and time must be separated by "T", e.g. ${RFC3339_EXAMPLE}`);
  if (fraction === ".") return bad("a decimal point must be followed by at least one digit");

  if (tail === "") return bad(`a UTC offset is required (Z or ±HH:MM), e.g. ${RFC3339_EXAMPLE}`);
  let offsetMin = 0;
  if (tail !== "Z" && tail !== "z") {
    const o = OFFSET.exec(tail);
    if (!o) return bad(`${quote(tail)} is not a UTC offset (expected Z or ±HH:MM)`);
    const oh = Number(o[2]);
    const om = Number(o[3]);
    if (oh > 23) return bad(`offset hour ${o[2]} is out of range (00–23)`);
    if (om > 59) return bad(`offset minute ${o[3]} is out of range (00–59)`);
    offsetMin = (o[1] === "-" ? -1 : 1) * (oh * 60 + om); // "-00:00" is UTC
  }

  const year = Number(ys);
  const month = Number(mos);
  const day = Number(ds);
  const hour = Number(hs);
  const minute = Number(mis);
  const second = Number(ss);
  if (month < 1 || month > 12) return bad(`month ${mos} is out of range (01–12)`);
  const monthDays = daysInMonth(year, month);
  if (day < 1 || day > monthDays) {
    return bad(`${ys}-${mos}-${ds} is not a date (${MONTH_NAMES[month - 1]} ${ys} has ${monthDays} days)`);
  }
  if (hour > 23) return bad(`hour ${hs} is out of range (00–23)`);
  if (minute > 59) return bad(`minute ${mis} is out of range (00–59)`);
  if (second > 59) return bad(`second ${ss} is out of range (00–59; leap seconds are not supported)`);
  const ms = fraction ? Number(fraction.slice(1, 4).padEnd(3, "0")) : 0;

  // Not Date.UTC: it maps years 0–99 to 1900–1999. setUTCFullYear takes the year as given.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, ms);
  return ok(date.getTime() - offsetMin * 60_000);
}

// ---------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------

const ACCEPTED_FORMS = `use "@every <duration>" (e.g. "@every 5m", at least 1m) or a one-shot RFC 3339 time (e.g. ${RFC3339_EXAMPLE})`;

const CRON_MACROS = new Set(["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot"]);
// One cron field: numbers, wildcards, steps, lists, ranges, Quartz's ? L W #, and month/day names.
const CRON_FIELD = /^(?:[0-9*/,?#LW-]|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC|SUN|MON|TUE|WED|THU|FRI|SAT)+$/i;

function looksLikeCron(text: string): boolean {
  if (CRON_MACROS.has(text.toLowerCase())) return true;
  const fields = text.split(/\s+/);
  return (fields.length === 5 || fields.length === 6) && fields.every((f) => CRON_FIELD.test(f));
}

function parseEvery(durationText: string): ParseResult<Schedule> {
  if (durationText === "") return fail(`"@every" needs a duration after one space, e.g. "@every 5m"`);
  if (/^\s/.test(durationText)) return fail(`"@every" must be followed by exactly one space, then the duration (e.g. "@every 5m")`);
  const d = parseGoDuration(durationText);
  if (!d.ok) return fail(`invalid @every interval: ${d.error}`);
  if (d.value <= 0n) return fail(`@every interval must be positive, got ${formatGoDuration(d.value)}`);
  const intervalMs = Number(d.value / NS_PER_MS);
  if (intervalMs < MIN_INTERVAL_MS) {
    return fail(`@every interval ${formatGoDuration(d.value)} is below the minimum of 1m: the scheduler ticks once a minute`);
  }
  return ok({ kind: "every", intervalMs });
}

/** S3 §4 schedules: "@every <Go duration>" (positive, ≥ 1m) or a one-shot RFC3339 time; cron expressions rejected. */
export function parseSchedule(text: string): ParseResult<Schedule> {
  if (text === "") return fail(`schedule is empty; ${ACCEPTED_FORMS}`);
  if (/^\s|\s$/.test(text)) return fail(`schedule ${quote(text)} has leading or trailing whitespace`);

  if (text.startsWith("@every")) {
    const rest = text.slice("@every".length);
    if (rest === "") return parseEvery("");
    if (rest[0] === " ") return parseEvery(rest.slice(1));
    if (/^\s/.test(rest)) return fail(`"@every" must be followed by exactly one space, then the duration (e.g. "@every 5m")`);
    // "@everyday" and the like fall through to the generic message.
  }

  if (looksLikeCron(text)) return fail(`cron expressions are not supported (got ${quote(text)}); ${ACCEPTED_FORMS}`);

  // A one-shot time: a digit first, and a "T" or at least a date, so a near miss gets RFC 3339's own message.
  if (/^[0-9]/.test(text) && (/[Tt]/.test(text) || /^\d{4}-\d{2}-\d{2}/.test(text))) {
    const at = parseRfc3339(text);
    return at.ok ? ok({ kind: "once", atMs: at.value }) : at;
  }

  return fail(`unrecognized schedule ${quote(text)}; ${ACCEPTED_FORMS}`);
}

// ---------------------------------------------------------------------------
// Time zones
// ---------------------------------------------------------------------------

// Letters first, then the characters IANA names use; keeps offsets ("+01:00") away from Intl,
// which accepts them as offset time zones. "Etc/GMT+1" is an IANA name and passes.
const TZ_NAME = /^[A-Za-z][A-Za-z0-9_+\-/]{0,63}$/;

/** An IANA time-zone name (e.g. "UTC", "Europe/Berlin") → its canonical spelling; offsets like "+01:00" and unknown names rejected. */
export function validateTimeZone(name: string): ParseResult<string> {
  if (name === "") return fail(`time zone is empty; use an IANA name such as "UTC" or "Europe/Berlin"`);
  if (!TZ_NAME.test(name)) {
    return fail(`${quote(name)} is not an IANA time-zone name; use a name such as "UTC" or "Europe/Berlin", not an offset`);
  }
  try {
    const resolved = new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
    // Only the spelling's case is corrected: ICU may resolve a current name to a legacy alias
    // ("Asia/Kolkata" → "Asia/Calcutta"), and the operator's choice is kept.
    return ok(resolved.toLowerCase() === name.toLowerCase() ? resolved : name);
  } catch {
    return fail(`unknown time zone ${quote(name)}; use an IANA name such as "UTC" or "Europe/Berlin"`);
  }
}
