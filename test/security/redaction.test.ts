/**
 * Redaction on the write path (S1 §4.5, §5.4): credential patterns and the
 * literal values of every configured secret are replaced before anything is
 * stored; a secret split across two messages is caught; placeholders are never
 * fed back to the model as if they were content.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { buildContext } from "../../src/context/caps";
import {
  isPhoneNumber,
  PERSONAL_DATA_PATTERNS,
  placeholdersForModel,
  redactAcrossBoundary,
  redactPersonalData,
  redactText,
  secretValuesFromEnv,
} from "../../src/security/redact";
import { detectSecretValue, isSecretFieldName, SECRET_VALUE_PATTERNS } from "../../src/security/secret-patterns";

describe("redactText", () => {
  const cases: [string, string, string][] = [
    ["OpenAI-style provider key", "key sk-proj-abcdefghijklmnopqrstuvwx1234", "key [REDACTED:openai_style_key]"],
    ["AWS access key id", "AKIAIOSFODNN7EXAMPLE is mine", "[REDACTED:aws_access_key_id] is mine"],
    ["GitHub token", `token ghp_${"a1B2".repeat(9)}`, "token [REDACTED:github_token]"],
    ["Slack token", "xoxb-123456789012-1234567890123-abcdefABCDEF", "[REDACTED:slack_token]"],
    ["JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "[REDACTED:jwt]"],
    ["private key header", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn", "[REDACTED:private_key]\nb3Blbn"],
    ["bearer header", "Authorization: Bearer abcdefghijklmnop0123456789", "Authorization: [REDACTED:bearer_credential]"],
    ["URL with a password", "postgres://app:s3cretpass@db.internal:5432/app", "[REDACTED:url_password]db.internal:5432/app"],
    ["Standard Webhooks secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "[REDACTED:standard_webhook_secret]"],
    ["Telegram bot token", "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "[REDACTED:telegram_bot_token]"],
  ];
  for (const [name, input, output] of cases) {
    it(`${name}`, () => {
      expect(redactText(input)).toBe(output);
    });
  }

  it("literal values of configured secrets are redacted wherever they appear", () => {
    const secrets = secretValuesFromEnv(env);
    expect(secrets).toContain("test-admin-token-0123456789abcdef");
    expect(secrets).toContain("test-api-token-alice-0123456789");
    expect(redactText("use test-api-token-alice-0123456789 please", secrets)).toBe("use [REDACTED:secret] please");
  });

  it("ordinary text is left alone", () => {
    const text = "Deploy 14 services at 10:30 from https://example.com/docs — ask maria@example.com [mem:mem_0123456789abcdef]";
    expect(redactText(text)).toBe(text);
  });
});

describe("a secret split across two messages", () => {
  it("is found across the boundary and redacted in both halves", () => {
    const r = redactAcrossBoundary("my key is sk-abcdefghij", "klmnopqrstuvwxyz123456 thanks");
    expect(r).toEqual({ previous: "my key is [REDACTED:split_secret]", current: "[REDACTED:split_secret] thanks", changed: true });
  });

  it("a literal secret split in two is caught too", () => {
    const r = redactAcrossBoundary("the admin token is test-admin-token-01234", "56789abcdef ok", ["test-admin-token-0123456789abcdef"]);
    expect(r).toEqual({ previous: "the admin token is [REDACTED:split_secret]", current: "[REDACTED:split_secret] ok", changed: true });
  });

  it("messages that only sit side by side are unchanged", () => {
    expect(redactAcrossBoundary("see you at 10", ":30 tomorrow")).toEqual({
      previous: "see you at 10",
      current: ":30 tomorrow",
      changed: false,
    });
  });

  it("end to end: two chat messages that together hold a key are both stored redacted", async () => {
    const room = `split-${crypto.randomUUID().slice(0, 8)}`;
    const send = (message: string) =>
      env.SESSIONS.getByName(`agent:main:http:${room}:dm:u`).enqueueMessage(
        { sessionKey: `agent:main:http:${room}:dm:u`, agentId: "main" },
        { message, source: "http", limits: { maxTurns: 100, maxBytes: 1_000_000 } },
      );
    const first = await send("my key is sk-abcdefghij");
    await send("klmnopqrstuvwxyz123456 thanks");
    const rows = (await env.SESSIONS.getByName(`agent:main:http:${room}:dm:u`).messages(first.sessionId)) ?? [];
    expect(rows.map((r) => [r.content, r.redactions])).toEqual([
      ["my key is [REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret] thanks", ["content"]],
    ]);
  });
});

describe("placeholders never reach the model as content", () => {
  it("the context builder turns placeholders into a plain note", () => {
    expect(placeholdersForModel("use [REDACTED:openai_style_key] for it")).toBe(
      "use (a credential was removed here by the gateway) for it",
    );
    const { messages } = buildContext([{ role: "user", content: "key: [REDACTED:secret]" }]);
    expect(messages[0]?.content).toBe("key: (a credential was removed here by the gateway)");
    expect(messages[0]?.content).not.toContain("REDACTED");
  });
});

describe("email and phone redaction, when configured (S1 §4.5)", () => {
  const both = { emails: true, phones: true };
  const emails: [string, string][] = [
    ["mail maria@example.com today", "mail [REDACTED:email] today"],
    ["john.smith+tag@mail.co.uk.", "[REDACTED:email]."],
    ["<ops-team@sub.example.org>", "<[REDACTED:email]>"],
    ["a: x_y%z@example.io, b: Z@EXAMPLE.COM", "a: [REDACTED:email], b: [REDACTED:email]"],
  ];
  for (const [input, output] of emails) it(`email: ${input}`, () => expect(redactPersonalData(input, both)).toBe(output));

  const phones: [string, string][] = [
    ["call +1 (555) 123-4567 now", "call [REDACTED:phone] now"],
    ["+44 20 7946 0958", "[REDACTED:phone]"],
    ["+33 6 12 34 56 78", "[REDACTED:phone]"],
    ["+33612345678", "[REDACTED:phone]"],
    ["+49 151 12345678", "[REDACTED:phone]"],
    ["0044 20 7946 0958", "[REDACTED:phone]"],
    ["06 12 34 56 78", "[REDACTED:phone]"],
    ["020 7946 0958", "[REDACTED:phone]"],
    ["tel 0612345678.", "tel [REDACTED:phone]."],
    ["(555) 123-4567", "[REDACTED:phone]"],
    ["555-123-4567 or 555.123.4567", "[REDACTED:phone] or [REDACTED:phone]"],
    ["1-800-555-0199", "[REDACTED:phone]"],
    ["tel: 06-12-34-56-78, or 07700 900123", "tel: [REDACTED:phone], or [REDACTED:phone]"],
    ["two: 0612345678 0698765432", "two: [REDACTED:phone] [REDACTED:phone]"],
  ];
  for (const [input, output] of phones) it(`phone: ${input}`, () => expect(redactPersonalData(input, both)).toBe(output));

  it("digits inside an address are the address's, not a phone", () => {
    expect(redactPersonalData("write to 0612345678@sms.example.net", both)).toBe("write to [REDACTED:email]");
  });

  it("leaves timestamps, ids, versions, dates, addresses and other numbers alone", () => {
    const untouched = [
      "ts 1717171717171 and 1717171717",
      "2024-01-15 10:30:00 and 2024-01-15T10:30:00.000Z",
      "01-02-2024 1234 and 15.01.2024",
      "v10.0.19041.1234 and 10.0.19041.1234",
      "192.168.100.200 and 192.168.1.10:8080",
      "pi 3.14159265358979 and 0.123456789",
      "id 123456789012, order #123456789, $1234567890",
      "uuid 123e4567-e89b-12d3-a456-426614174000",
      "run_0123456789abcdef [mem:mem_0123456789abcdef] sha 9f86d081884c7d659a2feaa0c55ad015",
      "card 4111 1111 1111 1111",
      "100 200 300 400, page 12 of 345, port 8080 pid 12345 uid 1000, 1,234,567,890",
      "zero-padded 0000012345",
      "logo@2x.png, user@localhost, @mention and a@b",
      "Deploy 14 services at 10:30 from https://example.com/docs/0612345678",
    ];
    for (const text of untouched) expect(redactPersonalData(text, both)).toBe(text);
  });

  it("each kind only when enabled", () => {
    const text = "maria@example.com +44 20 7946 0958";
    expect(redactPersonalData(text, { emails: false, phones: false })).toBe(text);
    expect(redactPersonalData(text, { emails: true, phones: false })).toBe("[REDACTED:email] +44 20 7946 0958");
    expect(redactPersonalData(text, { emails: false, phones: true })).toBe("maria@example.com [REDACTED:phone]");
  });

  it("isPhoneNumber: E.164 needs 9–15 digits and a country code not starting with 0", () => {
    expect(isPhoneNumber("+12025550123")).toBe(true);
    expect(isPhoneNumber("+1202555")).toBe(false);
    expect(isPhoneNumber("+0123456789")).toBe(false);
    expect(isPhoneNumber("+1234567890123456")).toBe(false);
  });

  it("stays linear on long runs that look almost like an address or a number", () => {
    const runs = ["a.".repeat(100_000), "a@".repeat(100_000), "1 ".repeat(100_000), `${"0".repeat(200_000)}`, "a@b.".repeat(50_000)];
    for (const run of runs) {
      const t0 = performance.now();
      redactPersonalData(run, both);
      expect(performance.now() - t0).toBeLessThan(2000);
    }
  });
});

describe("redaction stays linear (no catastrophic backtracking)", () => {
  it("the inputs that were quadratic for jwt and url_password (256 KiB runs) redact nothing and finish", () => {
    for (const unit of ["eyJ-", "a.", "a+", "a-"]) {
      const text = unit.repeat((256 * 1024) / unit.length);
      expect(redactText(text, [])).toBe(text);
    }
    // Real ones are still caught, including a scheme glued to a word.
    expect(redactText("see https://user:pa55word@host.example/x")).toBe("see [REDACTED:url_password]host.example/x");
    expect(redactText("x-https://u:p4ssw0rd1@h/")).toBe("[REDACTED:url_password]h/");
  });
});

/** A pattern of SECRET_VALUE_PATTERNS by name. */
const secretPattern = (name: string): RegExp => {
  const found = SECRET_VALUE_PATTERNS.find((p) => p.name === name);
  if (!found) throw new Error(`no pattern ${name}`);
  return found.pattern;
};

/** A real JWT (header.payload.signature). */
const JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const KiB = 1024;
/** The adversarial size: the patterns before issue 12 took 8–20 s here per call (quadratic), the linear ones ms. */
const BIG = 64 * KiB;
/** Completions and near-misses: 16 KiB keeps a regression's failing run short (≈ 1 s each before issue 12). */
const SMALL = 16 * KiB;
/**
 * A regression to a quadratic pattern runs far past this and fails the test as timed out (vitest checks the
 * elapsed time when a synchronous test returns; a regex cannot be interrupted, so the sizes above are chosen to
 * return within a minute even then).
 */
const LINEAR_TIMEOUT = 5_000;
const run = (unit: string, size: number) => unit.repeat(size / unit.length);

describe("redaction is linear in its input (issue 12)", () => {
  // Each formerly catastrophic family with the exact redacted output: the adversarial run alone (no credential,
  // unchanged), and the run completed into a real credential (the match spans the whole run, as it always did).
  it("redaction is linear: eyJ_dash_runs (jwt: `eyJ-eyJ-…`, every `eyJ` after `-` a start)", { timeout: LINEAR_TIMEOUT }, () => {
    expect(redactText(run("eyJ-", BIG))).toBe(run("eyJ-", BIG));
    const small = run("eyJ-", SMALL);
    expect(redactText(`${small}.eyJ${small}.x`)).toBe(`${small}.eyJ${small}.x`);
    expect(redactText(`see ${small}abcdefgh.eyJabcdefgh.abcdefgh ok`)).toBe("see [REDACTED:jwt] ok");
    expect(redactText(`${small} ${JWT}`)).toBe(`${small} [REDACTED:jwt]`);
  });

  it("redaction is linear: jwt near-misses (two long segments of starts, third segment one short)", { timeout: LINEAR_TIMEOUT }, () => {
    const unit = `${"eyJ-".repeat(64)}.${"eyJ-".repeat(64)}.abcdefg `;
    const text = unit.repeat(Math.ceil(BIG / unit.length));
    expect(redactText(text)).toBe(text);
    const second = `eyJabcdefgh.${run("eyJ-", SMALL)}`;
    expect(redactText(second)).toBe(second);
    expect(redactText(`${second}.abcdefgh`)).toBe("[REDACTED:jwt]");
  });

  for (const [family, unit] of [
    ["scheme_dot_runs", "a."],
    ["scheme_plus_runs", "a+"],
    ["scheme_dash_runs", "a-"],
    ["scheme_upper_dot_runs", "A."],
  ] as const) {
    it(`redaction is linear: ${family} (url_password: \`${unit}${unit}…\`, every letter a start)`, { timeout: LINEAR_TIMEOUT }, () => {
      expect(redactText(run(unit, BIG))).toBe(run(unit, BIG));
      const small = run(unit, SMALL);
      expect(redactText(`${small}://user:pass`)).toBe(`${small}://user:pass`);
      expect(redactText(`${small}://user:pass/x@y`)).toBe(`${small}://user:pass/x@y`);
      expect(redactText(`${small}https://u:p4ssw0rd@h/x`)).toBe("[REDACTED:url_password]h/x");
      expect(redactText(`${small} https://u:p4ssw0rd@h/x`)).toBe(`${small} [REDACTED:url_password]h/x`);
    });
  }

  it("redaction is linear: url near-misses (scheme and userinfo, no `@`)", { timeout: LINEAR_TIMEOUT }, () => {
    const text = "a.b+c-https://user:pass ".repeat(BIG / 24);
    expect(redactText(text)).toBe(text);
    const withAt = "a.b+c-https://user:pass@h ".repeat(Math.floor(BIG / 26));
    expect(redactText(withAt)).toBe("[REDACTED:url_password]h ".repeat(Math.floor(BIG / 26)));
  });

  it("redaction is linear: detectSecretValue (config values) on the same runs", { timeout: LINEAR_TIMEOUT }, () => {
    for (const unit of ["eyJ-", "a.", "a+"]) expect(detectSecretValue(run(unit, BIG))).toBe(null);
    expect(detectSecretValue(`${run("a.", SMALL)}https://u:p4ssw0rd@h/`)).toBe("url_password");
  });

  it("redaction is linear: isSecretFieldName on a long capital run (`AAAA…`)", { timeout: LINEAR_TIMEOUT }, () => {
    const caps = "A".repeat(BIG);
    expect(isSecretFieldName(caps)).toBe(false);
    expect(isSecretFieldName(`${caps}b`)).toBe(false);
    expect(isSecretFieldName(`${"A".repeat(SMALL)}_signingKey`)).toBe(true);
    expect(isSecretFieldName(`${"A".repeat(SMALL)}Token`)).toBe(true);
  });

  it("redaction is linear: a secret split across two messages, both halves adversarial", { timeout: LINEAR_TIMEOUT }, () => {
    const half = run("eyJ-", BIG / 2);
    expect(redactAcrossBoundary(half, half)).toEqual({ previous: half, current: half, changed: false });
    expect(redactAcrossBoundary(`${run("eyJ-", SMALL)}abcdefgh.eyJab`, "cdefgh.abcdefgh ok")).toEqual({
      previous: "[REDACTED:split_secret]",
      current: "[REDACTED:split_secret] ok",
      changed: true,
    });
  });
});

describe("the linear jwt and url_password patterns match exactly what the plain `\\b` forms match", () => {
  // The forms before issue 12: exact, but quadratic on runs with many word-boundary starts.
  const reference: Record<string, RegExp> = {
    jwt: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
    url_password: /\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]+@/gi,
  };
  const fragments: Record<string, string[]> = {
    jwt: ["eyJ", "eyJ", "a", "B", "1", "-", "_", ".", " ", "abcdefgh", "x-", ".eyJ", "é", "eyJabcdefgh."],
    url_password: ["a", "Z", "1", ".", "+", "-", ":", "/", "//", "://", "@", " ", "_", "https", "u:p@", "x", "é", "..."],
  };

  it("credentials glued to a dash, a dot or an ellipsis are still found (a start inside a run, not only at its start)", () => {
    expect(redactText(`x-${JWT}`)).toBe("x-[REDACTED:jwt]");
    expect(redactText(`--${JWT}.`)).toBe("--[REDACTED:jwt].");
    expect(redactText(`eyJ-${JWT}`)).toBe("[REDACTED:jwt]");
    expect(redactText("see ...https://user:pa55word@host/x")).toBe("see ...[REDACTED:url_password]host/x");
    expect(redactText("step 1.https://u:p4ssw0rd@h/")).toBe("step 1.[REDACTED:url_password]h/");
    expect(redactText("-+https://u:p4ssw0rd@h/")).toBe("-+[REDACTED:url_password]h/");
    expect(redactText("a.b.https://u:p4ssw0rd@h/")).toBe("[REDACTED:url_password]h/");
  });

  it("same matches, at the same places, on 20 000 pseudo-random strings of run characters and near-misses", () => {
    let seed = 12;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const matches = (re: RegExp, text: string) => [...text.matchAll(re)].map((m) => `${m.index}:${m[0]}`);
    for (const name of ["jwt", "url_password"]) {
      const linear = new RegExp(secretPattern(name).source, `${secretPattern(name).flags}g`);
      const parts = fragments[name] as string[];
      for (let i = 0; i < 10_000; i++) {
        let text = "";
        for (let n = 1 + Math.floor(rnd() * 14); n > 0; n--) text += parts[Math.floor(rnd() * parts.length)];
        expect(matches(linear, text), `${name} on ${JSON.stringify(text)}`).toEqual(matches(reference[name] as RegExp, text));
      }
    }
  });
});

/**
 * A structural check of a regex, on its source: the three shapes that make irregexp (a backtracking engine)
 * super-linear. Only the syntax these patterns use is parsed (atoms, classes, escapes, groups, lookarounds,
 * alternation, quantifiers).
 *  1. a repeated group that contains an unbounded quantifier (`(a+)+`: exponential);
 *  2. two unbounded runs in one sequence that can share a character, with nothing mandatory between them that
 *     cannot (`\s+\s*x`, `[a-z]+[a-z0-9]*:`: one attempt splits the run every way, quadratic);
 *  3. an unbounded run that can fail after it (something mandatory follows) and that many starts can share: no
 *     mandatory character before it lies outside its class, so every start inside one run rescans the same run
 *     (`\beyJ[A-Za-z0-9_-]{8,}\.` on `eyJ-eyJ-…`: quadratic) — unless a negative lookbehind skips the later starts
 *     (it ends in a lazy run of the same class: back to the nearest earlier start, amortised constant).
 */
function backtrackingRisks(re: RegExp): string[] {
  type Item =
    | { kind: "atom"; src: string; min: number; max: number; lazy: boolean }
    | { kind: "group"; type: string; alts: Item[][]; min: number; max: number; lazy: boolean }
    | { kind: "assert"; src: string };
  const source = re.source;
  let i = 0;
  const parseAlts = (): Item[][] => {
    const alts: Item[][] = [[]];
    while (i < source.length && source[i] !== ")") {
      if (source[i] === "|") {
        i++;
        alts.push([]);
      } else (alts.at(-1) as Item[]).push(parseItem());
    }
    return alts;
  };
  const parseItem = (): Item => {
    let item: Item;
    const c = source[i];
    if (c === "(") {
      const open = /^\((\?:|\?=|\?!|\?<=|\?<!)?/.exec(source.slice(i)) as RegExpExecArray;
      i += open[0].length;
      const alts = parseAlts();
      i++;
      item = { kind: "group", type: open[1] ?? "(", alts, min: 1, max: 1, lazy: false };
    } else if (c === "[") {
      let j = i + 1;
      while (source[j] !== "]") j += source[j] === "\\" ? 2 : 1;
      item = { kind: "atom", src: source.slice(i, j + 1), min: 1, max: 1, lazy: false };
      i = j + 1;
    } else if (c === "\\") {
      const src = source.slice(i, i + 2);
      i += 2;
      item = src === "\\b" || src === "\\B" ? { kind: "assert", src } : { kind: "atom", src, min: 1, max: 1, lazy: false };
    } else {
      i++;
      item = c === "^" || c === "$" ? { kind: "assert", src: c } : { kind: "atom", src: c as string, min: 1, max: 1, lazy: false };
    }
    const q = /^(?:([*+?])|\{(\d+)(,?)(\d*)\})(\?)?/.exec(source.slice(i));
    if (q && item.kind !== "assert") {
      i += q[0].length;
      if (q[1]) [item.min, item.max] = q[1] === "*" ? [0, Infinity] : q[1] === "+" ? [1, Infinity] : [0, 1];
      else [item.min, item.max] = [Number(q[2]), q[3] ? (q[4] ? Number(q[4]) : Infinity) : Number(q[2])];
      item.lazy = q[5] === "?";
    }
    return item;
  };
  const top = parseAlts();
  const flags = re.flags.replace(/[gy]/g, "");
  const probe = [...Array.from({ length: 128 }, (_, n) => String.fromCharCode(n)), "é", "\u00a0", "€"];
  const chars = (item: Item): Set<string> => {
    if (item.kind === "assert" || (item.kind === "group" && item.type.startsWith("?") && item.type !== "?:")) return new Set();
    if (item.kind === "group") return new Set(item.alts.flat().flatMap((x) => [...chars(x)]));
    const one = new RegExp(`^${item.src}$`, flags);
    return new Set(probe.filter((ch) => one.test(ch)));
  };
  const consuming = (item: Item) => chars(item).size > 0;
  const disjoint = (a: Set<string>, b: Set<string>) => [...a].every((ch) => !b.has(ch));
  const risks: string[] = [];
  const unbounded = (item: Item): boolean =>
    item.kind !== "assert" && (item.max === Infinity || (item.kind === "group" && item.alts.flat().some(unbounded)));
  const walk = (seq: Item[]) => {
    for (const item of seq) {
      if (item.kind !== "group") continue;
      if (item.max > 1 && item.alts.flat().some(unbounded)) risks.push(`nested unbounded quantifier in ${source}`);
      for (const alt of item.alts) walk(alt);
    }
    // Rule 2, for every sequence (lookbehind bodies included).
    seq.forEach((a, x) => {
      if (a.kind === "assert" || a.max !== Infinity || !consuming(a)) return;
      let shared = chars(a);
      for (const b of seq.slice(x + 1)) {
        if (b.kind === "assert" || !consuming(b)) continue;
        if (b.max === Infinity && [...shared].some((ch) => chars(b).has(ch))) {
          risks.push(`overlapping unbounded runs in ${source}`);
          break;
        }
        if (b.min >= 1) shared = new Set([...shared].filter((ch) => chars(b).has(ch)));
        if (shared.size === 0) break;
      }
    });
  };
  for (const alt of top) walk(alt);
  // Rule 3, on the top-level sequences with unquantified groups expanded into their alternatives.
  const expand = (seq: Item[]): Item[][] => {
    const at = seq.findIndex((x) => x.kind === "group" && (x.type === "?:" || x.type === "(") && x.min === 1 && x.max === 1);
    if (at < 0) return [seq];
    const group = seq[at] as Extract<Item, { kind: "group" }>;
    return group.alts.flatMap((alt) => expand([...seq.slice(0, at), ...alt, ...seq.slice(at + 1)]));
  };
  for (const seq of top.flatMap(expand)) {
    seq.forEach((run, x) => {
      if (run.kind === "assert" || run.max !== Infinity || !consuming(run)) return;
      const src = run.kind === "atom" ? run.src : `(group)`;
      const after = seq.slice(x + 1);
      const canFailAfter = after.some((b) => b.kind === "assert" || (b.kind === "group" && b.type.startsWith("?")) || b.min >= 1);
      if (!canFailAfter) return;
      const before = seq.slice(0, x);
      const delimited = before.some((b) => b.kind !== "assert" && b.min >= 1 && consuming(b) && disjoint(chars(b), chars(run)));
      const guarded = before.some(
        (b) =>
          b.kind === "group" &&
          b.type === "?<!" &&
          b.alts.flat().some((g) => g.kind === "atom" && g.lazy && g.max === Infinity && g.src === src),
      );
      if (!delimited && !guarded) risks.push(`${src} shared by every start inside one run in ${source}`);
    });
  }
  return risks;
}

describe("no redaction pattern can backtrack super-linearly (structural)", () => {
  it("the checker flags the shapes it is about, and the patterns before issue 12", () => {
    expect(backtrackingRisks(/(a+)+b/)).not.toEqual([]);
    expect(backtrackingRisks(/(?:\s*,)*x/)).not.toEqual([]);
    expect(backtrackingRisks(/\s+\s*x/)).not.toEqual([]);
    expect(backtrackingRisks(/[a-z]+[a-z0-9]*:/)).not.toEqual([]);
    expect(backtrackingRisks(/\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/)).not.toEqual([]);
    expect(backtrackingRisks(/\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]+@/i)).not.toEqual([]);
    expect(backtrackingRisks(/([A-Z]+)([A-Z][a-z])/g)).not.toEqual([]);
    // Linear shapes pass: a run at the end, a run after a delimiter outside it, bounded repeats.
    expect(backtrackingRisks(/\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}/)).toEqual([]);
    expect(backtrackingRisks(/\b\d{6,12}:[A-Za-z0-9_-]{30,}\b/)).toEqual([]);
  });

  for (const { name, pattern } of SECRET_VALUE_PATTERNS) {
    it(`secret pattern ${name}: ${pattern.source}`, () => expect(backtrackingRisks(pattern)).toEqual([]));
  }
  for (const [name, pattern] of Object.entries(PERSONAL_DATA_PATTERNS)) {
    it(`personal-data pattern ${name}`, () => expect(backtrackingRisks(pattern)).toEqual([]));
  }
});
