/**
 * Redaction micro-benchmark (S1 §4.5, write path): throughput of `redactText`
 * on 1 MiB of realistic mixed text with a few secrets inside and the env
 * secret list, next to a baseline measured in the same run (the literal
 * `split(secret).join(…)` of one secret, and one `indexOf` scan, over the same
 * 1 MiB) — then 1 MiB adversarial inputs built to make each pattern of
 * src/security/secret-patterns.ts backtrack, and the same for
 * `redactPersonalData`. For each input: ms per size and the linearity ratio
 * time(1 MiB) / time(256 KiB) (≈ 4 is linear; > 6 is flagged). An input whose
 * next size would blow the time budget is not run at that size: its 1 MiB time
 * is extrapolated from the growth measured so far (marked `extrapolated`), and
 * the patterns responsible are timed one by one and named.
 * Bundled and run in Node by bench/run.mjs; V8's irregexp is workerd's engine too.
 */
import { redactPersonalData, redactText, secretValuesFromEnv } from "../src/security/redact";
import { SECRET_VALUE_PATTERNS } from "../src/security/secret-patterns";

const KiB = 1024;
const MiB = 1024 * KiB;
const SIZES = [4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB];
const FLAG_RATIO = 6;
/** The longest message a caller can send (src/http/chat.ts, src/http/runs.ts), redacted by the SessionDO. */
const MESSAGE_CAP = 100_000;

/** The secrets the Worker is given in tests (vitest.config.ts), plus a provider key of another shape. */
const ENV = {
  GATEWAY_ADMIN_TOKEN: "test-admin-token-0123456789abcdef",
  GATEWAY_API_TOKENS: "alice:test-api-token-alice-0123456789,bob:test-api-token-bob-0123456789ab",
  MOONSHOT_API_KEY: "sk-test-moonshot-key-0123456789abcdef",
  OPENROUTER_API_KEY: "or-v1-5f0c2a9e7d1b4c3a8e6f0d2b9c7a5e3f",
};
const SECRETS = secretValuesFromEnv(ENV);

/** Deterministic PRNG (mulberry32), so every run redacts the same text. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomChars(alphabet: string, n: number, seed: number): string {
  const rnd = prng(seed);
  let s = "";
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(rnd() * alphabet.length)];
  return s;
}

/** `unit` repeated to exactly `bytes` characters (every input here is ASCII: characters = bytes). */
const fill = (unit: string, bytes: number) => unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);

const PLANTED = [
  "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz",
  "AKIAIOSFODNN7EXAMPLE",
  `ghp_${"a1B2c3D4e5".repeat(4)}`,
  "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
  "test-api-token-alice-0123456789",
  "or-v1-5f0c2a9e7d1b4c3a8e6f0d2b9c7a5e3f",
  "postgres://app:s3cretpass@db.internal:5432/app",
  "Bearer abcdefghijklmnop0123456789",
];

/** 1 MiB of chat, logs, JSON, code, URLs and hashes, with the planted secrets at a few places. */
function mixedText(bytes: number): string {
  const rnd = prng(42);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)] as T;
  const words =
    "the deploy of billing api failed at noon because the cache was cold and we rolled back to version before the migration then retried".split(
      " ",
    );
  const blocks: (() => string)[] = [
    () => `${Array.from({ length: 12 + Math.floor(rnd() * 30) }, () => pick(words)).join(" ")}.\n`,
    () =>
      `2025-03-04T10:${String(Math.floor(rnd() * 60)).padStart(2, "0")}:00.000Z INFO request_id=req_${randomChars("0123456789abcdef", 16, rnd() * 1e9)} status=200 latency_ms=${Math.floor(rnd() * 900)}\n`,
    () => `${JSON.stringify({ id: Math.floor(rnd() * 1e6), name: pick(words), tags: [pick(words), pick(words)], ok: rnd() > 0.5 })}\n`,
    () => "```ts\nexport function add(a: number, b: number): number {\n  return a + b; // sum\n}\n```\n",
    () =>
      `see https://example.com/docs/${pick(words)}?page=${Math.floor(rnd() * 40)} and git commit ${randomChars("0123456789abcdef", 40, rnd() * 1e9)}\n`,
    () =>
      `attachment sha256 ${randomChars("0123456789abcdef", 64, rnd() * 1e9)} (${Math.floor(rnd() * 5000)} KiB), v1.2.${Math.floor(rnd() * 30)}\n`,
    () => `data:image/png;base64,${randomChars("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 120, rnd() * 1e9)}==\n`,
  ];
  const parts: string[] = [];
  let size = 0;
  let planted = 0;
  while (size < bytes) {
    const part =
      size > (planted + 1) * (bytes / (PLANTED.length + 1)) && planted < PLANTED.length
        ? `my key is ${PLANTED[planted++]} ok\n`
        : pick(blocks)();
    parts.push(part);
    size += part.length;
  }
  return parts.join("").slice(0, bytes);
}

/** Median ms of `fn`, with fewer runs for slow calls. */
function timeMs(fn: () => unknown, quick: boolean): number {
  const t0 = performance.now();
  fn();
  const first = performance.now() - t0;
  const runs = first < 20 ? (quick ? 5 : 15) : first < 200 ? 3 : 1;
  if (runs === 1) return round(first);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    fn();
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return round(times[Math.floor(times.length / 2)] as number);
}

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

interface Adversarial {
  name: string;
  /** The pattern it is aimed at. */
  targets: string;
  make: (bytes: number) => string;
}

const SECRET_INPUTS: Adversarial[] = [
  { name: "begin_runs", targets: "private_key", make: (n) => fill("-----BEGIN ", n) },
  { name: "begin_open_header", targets: "private_key", make: (n) => `-----BEGIN ${fill("RSA ", n - 11)}` },
  { name: "sk_prefix_runs", targets: "openai_style_key", make: (n) => fill("sk-", n) },
  { name: "sk_near_miss", targets: "openai_style_key", make: (n) => fill("sk-proj-abcdefghijklmnopq ", n) },
  { name: "akia_runs", targets: "aws_access_key_id", make: (n) => fill("AKIA", n) },
  { name: "ghp_runs", targets: "github_token", make: (n) => fill("ghp_", n) },
  { name: "github_pat_runs", targets: "github_token", make: (n) => fill("github_pat_", n) },
  { name: "xoxb_runs", targets: "slack_token", make: (n) => fill("xoxb-", n) },
  { name: "whsec_runs", targets: "standard_webhook_secret", make: (n) => fill("whsec_", n) },
  { name: "digits_colon_runs", targets: "telegram_bot_token", make: (n) => fill("123456789:", n) },
  { name: "telegram_tail_no_boundary", targets: "telegram_bot_token", make: (n) => `123456789:${fill("a-", n - 10)}` },
  { name: "aiza_runs", targets: "google_api_key", make: (n) => fill("AIza", n) },
  { name: "sk_live_runs", targets: "stripe_key", make: (n) => fill("sk_live_", n) },
  { name: "eyJ_runs", targets: "jwt", make: (n) => fill("eyJ", n) },
  { name: "eyJ_dash_runs", targets: "jwt", make: (n) => fill("eyJ-", n) },
  { name: "jwt_two_segments", targets: "jwt", make: (n) => fill("eyJabcdefgh.eyJabcdefgh.x ", n) },
  { name: "bearer_runs", targets: "bearer_credential", make: (n) => fill("Bearer ", n) },
  { name: "bearer_whitespace", targets: "bearer_credential", make: (n) => `Bearer${fill(" ", n - 6)}` },
  { name: "scheme_dot_runs", targets: "url_password", make: (n) => fill("a.", n) },
  { name: "scheme_plus_runs", targets: "url_password", make: (n) => fill("a+", n) },
  { name: "userinfo_no_at", targets: "url_password", make: (n) => `x://${fill("a:", n - 4)}` },
  { name: "scheme_repeated", targets: "url_password", make: (n) => fill("a://b:", n) },
  {
    name: "base64_no_terminator",
    targets: "(all)",
    make: (n) => randomChars("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", n, 7),
  },
  {
    name: "base64url_no_terminator",
    targets: "(all)",
    make: (n) => randomChars("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", n, 8),
  },
  { name: "long_hex", targets: "(all)", make: (n) => randomChars("0123456789abcdef", n, 9) },
  { name: "long_digits", targets: "telegram_bot_token", make: (n) => fill("1234567890", n) },
];

const PERSONAL_INPUTS: Adversarial[] = [
  { name: "email_local_dot_runs", targets: "email", make: (n) => fill("a.", n) },
  { name: "email_at_runs", targets: "email", make: (n) => fill("a@", n) },
  { name: "email_domain_no_tld", targets: "email", make: (n) => `a@${fill("b1.", n - 2)}` },
  { name: "email_near_miss_runs", targets: "email", make: (n) => fill("a@b.", n) },
  { name: "phone_single_digit_groups", targets: "phone", make: (n) => fill("1 ", n) },
  { name: "phone_plus_runs", targets: "phone", make: (n) => fill("+1 ", n) },
  { name: "phone_paren_runs", targets: "phone", make: (n) => fill("(1) ", n) },
  { name: "phone_dash_runs", targets: "phone", make: (n) => fill("1-", n) },
  { name: "phone_long_digits", targets: "phone", make: (n) => fill("0", n) },
];

interface Curve {
  /** Median ms per input size measured. */
  ms: Record<string, number>;
  /** t(size) / t(size / 4) for each measured step: ≈ 4 linear, ≈ 16 quadratic. */
  growth_per_4x: number[];
  ms_1MiB: number;
  ratio_1MiB_to_256KiB: number;
  extrapolated: boolean;
  /** The brief's flag: time(1 MiB) / time(256 KiB) > 6. */
  flagged: boolean;
  /** Flagged and super-linear on more than the last step (or too slow to run to 1 MiB): backtracking, not noise. */
  super_linear: boolean;
  /** Growth exponent k in time ∝ size^k (from the last step; at least 1). */
  exponent: number;
}

const label = (bytes: number) => (bytes >= MiB ? `${bytes / MiB}MiB` : `${bytes / KiB}KiB`);

/**
 * Times `fn` on the input at growing sizes; stops before a size whose predicted
 * time is over `budgetMs` and extrapolates 1 MiB from the last measured growth.
 */
function curve(make: (bytes: number) => string, fn: (text: string) => unknown, quick: boolean, budgetMs: number): Curve {
  const ms: Record<string, number> = {};
  const points: [number, number][] = [];
  for (const size of SIZES) {
    const last = points.at(-1);
    if (last) {
      const growth = points.length >= 2 ? Math.max(4, last[1] / (points.at(-2) as [number, number])[1]) : 4;
      if (last[1] * growth > budgetMs) break;
    }
    const text = make(size);
    const t = Math.max(
      timeMs(() => fn(text), quick),
      0.01,
    );
    ms[label(size)] = t;
    points.push([size, t]);
  }
  const growth = points.slice(1).map(([, t], i) => round(t / (points[i] as [number, number])[1]));
  const [size, t] = points.at(-1) as [number, number];
  const prev = points.at(-2);
  const k = prev ? Math.max(1, Math.log(t / prev[1]) / Math.log(size / prev[0])) : 1;
  const extrapolated = size < MiB;
  if (extrapolated) {
    const ratio = 4 ** k;
    const flagged = ratio > FLAG_RATIO;
    return {
      ms,
      growth_per_4x: growth,
      ms_1MiB: round(t * (MiB / size) ** k, 0),
      ratio_1MiB_to_256KiB: round(ratio),
      extrapolated,
      flagged,
      super_linear: flagged,
      exponent: round(k),
    };
  }
  let ratio = t / (ms["256KiB"] as number);
  if (ratio > FLAG_RATIO) {
    // Confirm before flagging: this machine is noisy, and a GC pause in one run is not backtracking.
    const quarter = make(256 * KiB);
    const full = make(MiB);
    const best = (text: string) => Math.min(...[0, 1, 2].map(() => timeMs(() => fn(text), false)));
    ratio = Math.min(ratio, best(full) / best(quarter));
  }
  const flagged = ratio > FLAG_RATIO;
  const superLinear = flagged && growth.slice(0, -1).some((g) => g > FLAG_RATIO);
  return {
    ms,
    growth_per_4x: growth,
    ms_1MiB: t,
    ratio_1MiB_to_256KiB: round(ratio),
    extrapolated,
    flagged,
    super_linear: superLinear,
    exponent: round(k),
  };
}

/**
 * Which single patterns make an input super-linear: each pattern timed alone (as redactText runs it,
 * global replace) on the raw input at 4 and 16 KiB; those growing more than FLAG_RATIO× for 4× the input.
 */
function attribute(input: Adversarial, quick: boolean): { pattern: string; ms_4KiB: number; ms_16KiB: number; ratio_4x: number }[] {
  const small = input.make(4 * KiB);
  const large = input.make(16 * KiB);
  const out: { pattern: string; ms_4KiB: number; ms_16KiB: number; ratio_4x: number }[] = [];
  for (const { name, pattern } of SECRET_VALUE_PATTERNS) {
    const g = new RegExp(pattern.source, `${pattern.flags}g`);
    const a = Math.max(
      timeMs(() => small.replace(g, "x"), quick),
      0.01,
    );
    const b = Math.max(
      timeMs(() => large.replace(g, "x"), quick),
      0.01,
    );
    if (b >= 1 && b / a > FLAG_RATIO) out.push({ pattern: name, ms_4KiB: a, ms_16KiB: b, ratio_4x: round(b / a) });
  }
  return out;
}

export async function run(quick: boolean) {
  const budgetMs = quick ? 1_000 : 5_000;

  // Realistic mixed text.
  const text = mixedText(MiB);
  const redacted = redactText(text, SECRETS);
  for (const secret of PLANTED) if (redacted.includes(secret)) throw new Error(`bench text: ${secret.slice(0, 12)}… was not redacted`);
  const splitJoin = timeMs(() => text.split(SECRETS[0] as string).join("[REDACTED:secret]"), quick);
  const indexOfScan = timeMs(() => text.indexOf("\u0000never-present\u0000"), quick);
  const mixed = timeMs(() => redactText(text, SECRETS), quick);
  const mixedPersonal = timeMs(() => redactPersonalData(text, { emails: true, phones: true }), quick);
  const mbps = (ms: number) => round(MiB / 1e6 / (ms / 1000), 1);

  // Adversarial inputs.
  const secretCurves: Record<string, Curve & { targets: string }> = {};
  for (const input of SECRET_INPUTS) {
    secretCurves[input.name] = { targets: input.targets, ...curve(input.make, (t) => redactText(t, SECRETS), quick, budgetMs) };
  }
  const personalCurves: Record<string, Curve & { targets: string }> = {};
  for (const input of PERSONAL_INPUTS) {
    personalCurves[input.name] = {
      targets: input.targets,
      ...curve(input.make, (t) => redactPersonalData(t, { emails: true, phones: true }), quick, budgetMs),
    };
  }
  const worstOf = (curves: Record<string, Curve>) =>
    Object.entries(curves).reduce((w, e) => (e[1].ms_1MiB > w[1].ms_1MiB ? e : w)) as [string, Curve];
  const [worstName, worst] = worstOf(secretCurves);
  const [worstPersonalName, worstPersonal] = worstOf(personalCurves);
  const superLinear = SECRET_INPUTS.filter((i) => secretCurves[i.name]?.super_linear).map((i) => {
    const c = secretCurves[i.name] as Curve;
    const [size, t] = Object.entries(c.ms)
      .map(([l, ms]) => [l.endsWith("MiB") ? Number.parseFloat(l) * MiB : Number.parseFloat(l) * KiB, ms] as const)
      .at(-1) as readonly [number, number];
    return {
      input: i.name,
      ms_1MiB: c.ms_1MiB,
      extrapolated: c.extrapolated,
      linearity_ratio: c.ratio_1MiB_to_256KiB,
      exponent: c.exponent,
      // The chat/run message cap (src/http/chat.ts: 100 000 characters) is what a caller can make the SessionDO redact.
      ms_at_100k_char_message: round(t * (MESSAGE_CAP / size) ** c.exponent, 0),
      patterns_alone: attribute(i, quick),
    };
  });
  const flaggedNotConsistent = Object.entries(secretCurves)
    .filter(([, c]) => c.flagged && !c.super_linear)
    .map(([name, c]) => ({
      input: name,
      ms_1MiB: c.ms_1MiB,
      ratio_1MiB_to_256KiB: c.ratio_1MiB_to_256KiB,
      growth_per_4x: c.growth_per_4x,
    }));

  return {
    baseline_split_join_1MiB: { ms: splitJoin },
    baseline_indexOf_scan_1MiB: { ms: indexOfScan },
    mixed_text_1MiB: {
      ms: mixed,
      mb_per_s: mbps(mixed),
      ratio_to_split_join: round(mixed / Math.max(splitJoin, 0.01), 1),
      secrets_in_env_list: SECRETS.length,
      planted_secrets: PLANTED.length,
    },
    mixed_text_personal_data_1MiB: { ms: mixedPersonal, mb_per_s: mbps(mixedPersonal) },
    adversarial_ms_1MiB: Object.fromEntries(
      Object.entries(secretCurves).map(([name, c]) => [name, c.extrapolated ? `${c.ms_1MiB} (extrapolated)` : c.ms_1MiB]),
    ),
    adversarial_curves: Object.fromEntries(
      Object.entries(secretCurves).map(([name, c]) => [
        name,
        { targets: c.targets, ms: c.ms, growth_per_4x: c.growth_per_4x, flagged: c.flagged },
      ]),
    ),
    worst_adversarial: {
      input: worstName,
      ms_1MiB: worst.ms_1MiB,
      extrapolated: worst.extrapolated,
      linearity_ratio: worst.ratio_1MiB_to_256KiB,
      ratio_to_split_join: round(worst.ms_1MiB / Math.max(splitJoin, 0.01), 0),
      flagged: worst.flagged,
    },
    super_linear: superLinear,
    // Last step over 6× but every earlier step ≈ 4×: a memory/GC effect at 1 MiB, not backtracking (absolute ms stay small).
    flagged_last_step_only: flaggedNotConsistent,
    personal_data_adversarial_ms_1MiB: Object.fromEntries(
      Object.entries(personalCurves).map(([name, c]) => [name, c.extrapolated ? `${c.ms_1MiB} (extrapolated)` : c.ms_1MiB]),
    ),
    personal_data_worst: {
      input: worstPersonalName,
      ms_1MiB: worstPersonal.ms_1MiB,
      linearity_ratio: worstPersonal.ratio_1MiB_to_256KiB,
      flagged: worstPersonal.flagged,
    },
  };
}
