/**
 * The honeypot exception (S1 §3.3 Phase 2): a `message.send` may skip the
 * human approval every other side effect needs only if it uses an allowlisted
 * template, goes to an allowlisted recipient type, carries no links and no
 * attachments, and stays within the hourly rate limits. Anything else — free
 * text above all — still needs an approval (Phase 1). `checkHoneypot` names
 * the first rule a send breaks; `reserveHoneypotSend` then takes a place under
 * the hourly limits atomically before the send goes out (issue 20 §4), and
 * `recordHoneypotSend` counts a delivered send that held no reservation.
 *
 * Link detection (`containsLink`) is deliberately suspicious: a false positive
 * costs one approval, a false negative sends a link nobody reviewed. It looks
 * at a normalised copy of the text — HTML character references (`&#46;`,
 * `&#x2e;`, `&period;`, `&sol;`, `&colon;`, `&commat;`) and percent-encoding
 * (`%2E`, `%252E`) decoded, NFKC (full-width letters and dots become
 * ASCII), invisible format characters removed (zero-width spaces and joiners,
 * soft hyphens, bidi controls), look-alike dots (`。` `｡` `·` `・` `ꓸ` `٠` …) made `.`,
 * Cyrillic/Greek look-alike letters folded to Latin, and defanged dots
 * (`[.]` `(.)` `{.}` `<.>` `[dot]` `\.`) made `.` — and finds: URLs with any
 * `scheme://`, obfuscated schemes (`hxxp`, `h**p`, `h t t p s : / /`, `fxp`),
 * `mailto:`/`javascript:`/`data:` URIs, `www.`, IPv4 and IPv6 addresses,
 * markdown and HTML links, punycode (`xn--`), `localhost:`, email addresses,
 * `@handle` mentions (they point a reader at an account just as a link does)
 * and bare domain names, non-Latin TLDs (`пример.рф`, `例子.中国`) included.
 *
 * Keeping false positives low on prose — the rules for a bare `label.tld`:
 * - The TLD is 2–24 Latin letters (or `xn--…`), so `e.g.`, `i.e.`, `a.m.`,
 *   `Ph.D.`, `U.S.A.`, decimals (`3.14`) and versions (`1.2.3`) never match.
 * - A space after a dot is a sentence or an abbreviation (`Mr. Smith`) unless
 *   the word after it is one of a few TLDs that are not English words, not
 *   Title-cased (`com`, `org`, `xyz`, `ru`, `io`, …: `example. com`, but not
 *   `Thanks. Com…`). A space before the dot (`example . com`, `example .com`)
 *   counts with any well-known TLD; so does ` dot ` with a dozen of them.
 * - A Title-case TLD is a sentence start (`done.Next`, `done.It`) unless it is
 *   one of the unmistakable ones (`Example.Com`, `.Net`, `.Org`, `.Io`, …);
 *   lower-case and UPPER-CASE TLDs count, well-known or not (`example.museum`).
 * - An unknown TLD needs a label of two or more characters before it
 *   (`e.g.the` is not a link; `t.co` is, because `co` is well known) and must
 *   not be a common file extension (`report.pdf`, `Node.js`, `README.md`,
 *   `main.py`); `.zip` and `.mov` are real TLDs and count.
 * - A path or port after it (`bit.ly/x`, `done.Next/x`, `host.test:8080`)
 *   always counts.
 * - Four dotted numbers ≤ 255 are an IPv4 address even when meant as a
 *   version (`1.2.3.4`); an email address counts as a link (it names a domain).
 * Not detected: domains spelled with other separators (`example,com`,
 * `example_com`), non-Latin TLDs missing from IDN_TLDS (punycode always
 * counts), and text split across template values in ways the rendered text
 * no longer shows. A CJK sentence after `。` that is exactly a listed IDN TLD
 * (`…。中国`) is a false positive.
 */
import { type HoneypotConfig, MAX_VAR_CHARS } from "../config/honeypot";

// ---------------------------------------------------------------------------
// Link detection

/** Invisible characters removed before matching: every format character (Cf) plus fillers and variation selectors. */
const INVISIBLE = /\p{Cf}|\u034F|\u17B4|\u17B5|\u180B|\u180C|\u180D|\u180F|\p{Variation_Selector}|[\u115F\u1160\u3164\uFFA0]/gu;
/**
 * Dots that look like `.` once NFKC has folded the full-width ones (`．` `﹒` `․` are `.` already): middle
 * dots, ideographic and katakana dots, Arabic and Syriac stops, the Lisu and Vai stops, Arabic-Indic zeros.
 */
const LOOKALIKE_DOTS =
  /[\u00B7\u0660\u06D4\u06F0\u0701\u0702\u1427\u16EB\u2027\u2219\u22C5\u2981\u2E31\u2E33\u2E3C\u3002\u30FB\uA4F8\uA60E\uFE12\uFF61\u{10101}]/gu;
/** Cyrillic and Greek letters that look like Latin ones. */
const CONFUSABLES: Record<string, string> = {
  а: "a",
  е: "e",
  о: "o",
  р: "p",
  с: "c",
  у: "y",
  х: "x",
  і: "i",
  ј: "j",
  ѕ: "s",
  ԁ: "d",
  һ: "h",
  ӏ: "l",
  ԛ: "q",
  ԝ: "w",
  к: "k",
  А: "A",
  В: "B",
  Е: "E",
  К: "K",
  М: "M",
  Н: "H",
  О: "O",
  Р: "P",
  С: "C",
  Т: "T",
  Х: "X",
  У: "Y",
  І: "I",
  Ј: "J",
  Ѕ: "S",
  α: "a",
  ι: "i",
  κ: "k",
  ν: "v",
  ο: "o",
  ρ: "p",
  τ: "t",
  υ: "u",
  χ: "x",
  Α: "A",
  Β: "B",
  Ε: "E",
  Ζ: "Z",
  Η: "H",
  Ι: "I",
  Κ: "K",
  Μ: "M",
  Ν: "N",
  Ο: "O",
  Ρ: "P",
  Τ: "T",
  Υ: "Y",
  Χ: "X",
};
const CONFUSABLE_CHARS = new RegExp(`[${Object.keys(CONFUSABLES).join("")}]`, "gu");
/** Defanged dots: `[.]`, `(.)`, `{.}`, `<.>`, `[dot]`, `(dot)`… with any spacing, and a backslash-escaped `\.`. */
const DEFANGED_DOT = /\s*[[({<]\s*(?:\.|dot)\s*[\])}>]\s*|\\\./giu;

/** Well-known TLDs: they count after a spaced dot, after a one-character label, and even when they look like a file extension. */
const KNOWN_TLDS = new Set(
  (
    "com net org info biz edu gov mil int xyz top site online store shop app dev page link click live club icu vip win bid " +
    "work tech art blog news cloud space fun lol fyi pro name mobi tel asia zip mov one today world email life " +
    "io co me ly gl gg to tv cc ws su pw tk ml ga cf gq ai sh la fm am im is it in us uk de fr ru cn jp kr br au ca nl " +
    "es ch se no pl be at dk fi cz eu ie nz za mx ar cl ua tr ir id my sg hk tw vn th ph pk ng ke eg gr pt ro hu sk"
  ).split(" "),
);
/**
 * Non-Latin (IDN) TLDs, in the form the link rules see them (look-alike letters folded): `пример.рф` counts
 * although `рф` is not Latin. Their punycode (`xn--p1ai`) always counts.
 */
const IDN_TLDS: ReadonlySet<string> = new Set(
  (
    "рф рус бел укр қаз срб мкд мон орг ком сайт онлайн дети москва 中国 中國 台灣 台湾 香港 公司 网络 网址 在线 " +
    "我爱你 商城 コム みんな 한국 닷컴 닷넷 ไทย भारत বাংলা இந்தியா مصر امارات السعودية موقع شبكة ایران ελ ευ"
  )
    .split(" ")
    .map((tld) => tld.replace(CONFUSABLE_CHARS, (c) => CONFUSABLES[c] ?? c).toLowerCase()),
);
/** Well-known TLDs that are not English words: they count Title-cased (`Example.Com`). */
const STRONG_TLDS = new Set("com net org info biz edu gov xyz icu io ly ru cn uk de tk ml gq cf pw su ws".split(" "));
/** TLDs that count after `label. ` (a space only after the dot) — none of them an English word. */
const SPACE_AFTER_TLDS = new Set("com org xyz ru cn io ly biz icu tk".split(" "));
/** TLDs that count after `label dot `. */
const DOT_WORD_TLDS = new Set([...SPACE_AFTER_TLDS, ..."net info co uk de fr edu gov tv me".split(" ")]);
/** Common file extensions: `report.pdf` is a file name, not a domain (unless the TLD is well known, like `.zip`). */
const FILE_EXTENSIONS = new Set(
  (
    "pdf txt doc docx xls xlsx ppt pptx csv tsv json xml yaml yml toml ini cfg conf log md rst html htm css js mjs cjs ts tsx " +
    "jsx py rb rs java kt cpp hpp sh bash sql png jpg jpeg gif bmp svg webp ico tif tiff heic mp3 mp4 wav avi mkv webm ogg " +
    "flac tar gz tgz bz2 xz rar exe dll bin iso dmg apk msi pkg deb rpm vcf ics eml odt ods odp rtf epub"
  ).split(" "),
);

const LABEL = "[\\p{L}\\p{N}](?:[\\p{L}\\p{N}-]{0,61}[\\p{L}\\p{N}])?";
const NOT_WORD_BEFORE = "(?<![\\p{L}\\p{N}_-])";
const NOT_WORD_AFTER = "(?![\\p{L}\\p{N}_-])";
/** Dot-joined words: every adjacent pair in one is a candidate `label.tld`. */
const DOTTED_TOKEN = /[\p{L}\p{N}_-]+(?:\.[\p{L}\p{N}_-]+)+/gu;
const SPACE_BEFORE_DOT = new RegExp(`${NOT_WORD_BEFORE}${LABEL}\\s+\\.\\s*(\\p{L}{2,24})${NOT_WORD_AFTER}`, "gu");
const SPACE_AFTER_DOT = new RegExp(`${NOT_WORD_BEFORE}${LABEL}\\.\\s+(\\p{L}{2,24})${NOT_WORD_AFTER}`, "gu");
const DOT_WORD = new RegExp(`${NOT_WORD_BEFORE}${LABEL}\\s+dot\\s+(\\p{L}{2,24})${NOT_WORD_AFTER}`, "giu");
const IPV4 = /(?<![\p{L}\p{N}.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\p{L}\p{N}]|\.\d)/gu;

/** Patterns that are a link wherever they appear in the normalised text. */
const LINK_PATTERNS: readonly RegExp[] = [
  // Any scheme URL: https://, ftp://, tg://, file:\\ …
  /(?<![\p{L}\p{N}])[a-z][a-z0-9+.-]{0,31}:[/\\]{2}/iu,
  // http/https/ftp spelled out, obfuscated or spaced: hxxp[:]//, h**ps://, h t t p s : / /, http//
  /(?<![\p{L}\p{N}])(?:h\s?[tx*_]\s?[tx*_]\s?p(?:\s?s)?|f\s?[tx*_]\s?p)[\s[\](){}]*:?[\s[\](){}]*[/\\][\s[\](){}]*[/\\]/iu,
  // The defanged scheme words themselves: hxxp, hxxps, h**p, h__ps, fxp
  /(?<![\p{L}\p{N}])(?:h[x*_]{2}ps?|fxp)(?![\p{L}\p{N}])/iu,
  /(?<![\p{L}\p{N}])(?:mailto|javascript|vbscript)\s*:/iu,
  /(?<![\p{L}\p{N}])data\s*:\s*[a-z]+\/[a-z0-9.+-]+[;,]/iu,
  /(?<![\p{L}\p{N}_-])www\d{0,3}\s*\.\s*[\p{L}\p{N}]/iu,
  /(?<![\p{L}\p{N}_-])www\s+dot\s+[\p{L}\p{N}]/iu,
  /(?<![\p{L}\p{N}_-])xn--[a-z0-9-]/iu,
  /(?<![\p{L}\p{N}_-])localhost(?::\d|\/)/iu,
  // @handle mentions (Telegram, X, Slack `<@U123>`): an account is as much a destination as a URL
  /(?<![\p{L}\p{N}_.+-])@[\p{L}_][\p{L}\p{N}_]/u,
  // Markdown links and images: [text](target)
  /\]\(\s*[^\s)]/u,
  // HTML links and remote content
  /<(?:a|img|iframe|link|area|form|script)[\s/>]/iu,
  /(?<![\p{L}\p{N}])(?:href|src)\s*=/iu,
  // IPv6: eight groups, or a compressed form with `::` and at least one digit
  /(?<![\p{L}\p{N}:])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![\p{L}\p{N}:])/iu,
  /(?<![\p{L}\p{N}:])(?=[0-9a-f:]*\d)(?:[0-9a-f]{1,4}:){1,6}:(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?(?![\p{L}\p{N}:])/iu,
];

/** HTML character references and percent-encoding that spell a link's punctuation. */
const NUMERIC_REFERENCE = /&#(?:[xX]([0-9a-fA-F]{1,6})|(\d{1,7}));?/g;
const NAMED_REFERENCE = /&(period|sol|colon|commat|bsol);/g;
const NAMED_CHARS: Record<string, string> = { period: ".", sol: "/", colon: ":", commat: "@", bsol: "\\" };
const PERCENT_RUN = /(?:%[0-9a-fA-F]{2})+/g;

/** `text` with character references and percent-encoding decoded, twice over (`%252E`, `&amp;#46;` stay caught). */
function decodeEscapes(text: string): string {
  let out = text;
  for (let round = 0; round < 3; round++) {
    const next = out
      .replace(/&amp;/g, "&")
      .replace(NUMERIC_REFERENCE, (ref, hex: string | undefined, dec: string | undefined) => {
        const code = hex !== undefined ? Number.parseInt(hex, 16) : Number(dec);
        return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : ref;
      })
      .replace(NAMED_REFERENCE, (_, name: string) => NAMED_CHARS[name] ?? "")
      .replace(PERCENT_RUN, (run) => {
        try {
          return decodeURIComponent(run);
        } catch {
          return run; // not UTF-8: leave it as written
        }
      });
    if (next === out) break;
    out = next;
  }
  return out;
}

/** The text as the link rules see it: see the module comment. */
export function normaliseForLinks(text: string): string {
  return decodeEscapes(text)
    .normalize("NFKC")
    .replace(INVISIBLE, "")
    .replace(LOOKALIKE_DOTS, ".")
    .replace(CONFUSABLE_CHARS, (c) => CONFUSABLES[c] ?? c)
    .replace(DEFANGED_DOT, ".");
}

type Casing = "lower" | "upper" | "title" | "mixed";

function casing(word: string): Casing {
  if (word === word.toLowerCase()) return "lower";
  if (word === word.toUpperCase()) return "upper";
  const rest = word.slice(1);
  return word[0] === word[0]?.toUpperCase() && rest === rest.toLowerCase() ? "title" : "mixed";
}

/** Whether `label.tld` (no spaces) names a domain, by the rules in the module comment. */
function isDomainPair(label: string, tld: string, followedByPath: boolean): boolean {
  const lower = tld.toLowerCase();
  if (/^xn--[a-z0-9-]+$/.test(lower) || IDN_TLDS.has(lower)) return true;
  if (!/^\p{L}{2,24}$/u.test(tld)) return false;
  if (followedByPath && /^[a-z]{2,24}$/.test(lower)) return true;
  const kind = casing(tld);
  if (KNOWN_TLDS.has(lower)) return kind !== "title" || STRONG_TLDS.has(lower);
  if (!/^[a-z]{2,24}$/.test(lower) || FILE_EXTENSIONS.has(lower)) return false;
  return (kind === "lower" || kind === "upper") && [...label].length >= 2;
}

/**
 * A TLD after a spaced dot: one of `allowed`, and not Title-case — a sentence start — unless
 * `strongTitle` and unmistakable (`example . Com`; after `label. ` a Title-case word is always a new sentence).
 */
function isSpacedTld(tld: string, allowed: ReadonlySet<string>, strongTitle: boolean): boolean {
  const lower = tld.toLowerCase();
  if (!allowed.has(lower)) return false;
  return casing(tld) !== "title" || (strongTitle && STRONG_TLDS.has(lower));
}

/**
 * Whether `text` contains a link, obfuscated or not (see the module comment
 * for what counts and what deliberately does not).
 */
export function containsLink(text: string): boolean {
  const t = normaliseForLinks(text);
  if (LINK_PATTERNS.some((pattern) => pattern.test(t))) return true;

  for (const m of t.matchAll(IPV4)) if (m.slice(1, 5).every((octet) => Number(octet) <= 255)) return true;

  for (const m of t.matchAll(DOTTED_TOKEN)) {
    const labels = m[0].split(".");
    const after = t.slice(m.index + m[0].length, m.index + m[0].length + 2);
    const followedByPath = after.startsWith("/") || /^:\d/.test(after);
    for (let i = 1; i < labels.length; i++) {
      if (isDomainPair(labels[i - 1] ?? "", labels[i] ?? "", followedByPath && i === labels.length - 1)) return true;
    }
  }

  for (const m of t.matchAll(SPACE_BEFORE_DOT)) if (isSpacedTld(m[1] ?? "", KNOWN_TLDS, true) || IDN_TLDS.has(m[1] ?? "")) return true;
  for (const m of t.matchAll(SPACE_AFTER_DOT)) if (isSpacedTld(m[1] ?? "", SPACE_AFTER_TLDS, false)) return true;
  for (const m of t.matchAll(DOT_WORD)) if (isSpacedTld(m[1] ?? "", DOT_WORD_TLDS, true)) return true;
  return false;
}

// ---------------------------------------------------------------------------
// Templates

const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]{0,63})\}/g;

/** The placeholder names of a template, in order of first appearance. */
export function templatePlaceholders(template: string): string[] {
  return [...new Set([...template.matchAll(PLACEHOLDER)].map((m) => m[1] ?? ""))];
}

/**
 * Fills a template's `{name}` placeholders. Every placeholder needs a value and
 * every value a placeholder; a value is at most 200 characters and holds no
 * link. Values are inserted once (a `{x}` inside a value stays as it is).
 * Braces that are not a placeholder (`{ }`, `{1}`) stay literal.
 */
export function renderTemplate(template: string, vars: Record<string, string>): { ok: true; text: string } | { ok: false; reason: string } {
  const names = templatePlaceholders(template);
  for (const name of names) if (!Object.hasOwn(vars, name)) return { ok: false, reason: `missing value for {${name}}` };
  for (const key of Object.keys(vars))
    if (!names.includes(key)) return { ok: false, reason: `unexpected var "${key}": the template has no {${key}}` };
  for (const name of names) {
    const value = vars[name] ?? "";
    if (typeof value !== "string") return { ok: false, reason: `the value of {${name}} must be text` };
    if ([...value].length > MAX_VAR_CHARS)
      return { ok: false, reason: `the value of {${name}} is longer than ${MAX_VAR_CHARS} characters` };
    if (containsLink(value)) return { ok: false, reason: `the value of {${name}} contains a link` };
  }
  return { ok: true, text: template.replace(PLACEHOLDER, (_, name: string) => vars[name] ?? "") };
}

// ---------------------------------------------------------------------------
// The exception itself

const HOUR_MS = 3_600_000;
/** Rows older than this are pruned when a send is recorded. */
const RETAIN_MS = 24 * HOUR_MS;

/**
 * What the honeypot reads of a `message.send` call's arguments, once src/tools/builtin/message.ts has validated them
 * (its `MessageSendArgs` fits): stated here, so the honeypot does not import the tool that uses it.
 */
export interface HoneypotSend {
  channel: string;
  to: string;
  recipient_type: string;
  text?: string | undefined;
  template?: string | undefined;
  vars?: Record<string, string> | undefined;
  attachments?: readonly unknown[] | undefined;
}

/** The rate-limit key of a send's recipient: `{channel}:{to}`, `to` trimmed and lower-cased. */
export function honeypotRecipient(args: { channel: string; to: string }): string {
  return `${args.channel}:${args.to.trim().toLowerCase()}`;
}

const sends = (n: number) => `${n} ${n === 1 ? "send" : "sends"}`;

/**
 * Whether a `message.send` qualifies for the honeypot exception (S1 §3.3 Phase 2),
 * and its rendered text if so. Rules in order, the first broken one named:
 * template (set, no free text, allowlisted) → recipient type → attachments →
 * links (in values and in the rendered text) → per-recipient rate → per-agent rate.
 * Fails closed: a rate-limit lookup that fails refuses the exception.
 */
export async function checkHoneypot(input: {
  args: HoneypotSend;
  config: HoneypotConfig;
  db: D1Database;
  agentId: string;
  now: Date;
}): Promise<{ ok: true; text: string } | { ok: false; reason: string }> {
  const { args, config } = input;
  if (args.template === undefined) return { ok: false, reason: "the message has no template; free text is never sent without approval" };
  if (args.text !== undefined)
    return { ok: false, reason: `the message has free text besides template "${args.template}"; free text is never sent without approval` };
  if (!Object.hasOwn(config.templates, args.template)) return { ok: false, reason: `template "${args.template}" is not allowlisted` };
  if (!(config.recipientTypes as readonly string[]).includes(args.recipient_type))
    return { ok: false, reason: `recipient type "${args.recipient_type}" is not allowlisted` };
  if (args.attachments && args.attachments.length > 0) return { ok: false, reason: "attachments are never sent without approval" };

  const vars = args.vars ?? {};
  if (Object.values(vars).some((value) => typeof value === "string" && containsLink(value)))
    return { ok: false, reason: "the message contains a link" };
  const rendered = renderTemplate(config.templates[args.template] ?? "", vars);
  if (!rendered.ok) return rendered;
  if (containsLink(rendered.text)) return { ok: false, reason: "the message contains a link" };

  let counts: { agent_sends: number; recipient_sends: number } | null;
  try {
    counts = await input.db
      .prepare(
        "SELECT COUNT(*) AS agent_sends, COALESCE(SUM(recipient = ?), 0) AS recipient_sends FROM honeypot_sends WHERE agent_id = ? AND sent_at > ?",
      )
      .bind(honeypotRecipient(args), input.agentId, input.now.getTime() - HOUR_MS)
      .first();
  } catch {
    return { ok: false, reason: "the rate limits could not be checked, so the send needs approval" };
  }
  const perRecipient = counts?.recipient_sends ?? 0;
  const perAgent = counts?.agent_sends ?? 0;
  if (perRecipient >= config.perRecipientPerHour)
    return { ok: false, reason: `rate limit: ${sends(config.perRecipientPerHour)} to this recipient in the last hour` };
  if (perAgent >= config.perAgentPerHour)
    return { ok: false, reason: `rate limit: ${sends(config.perAgentPerHour)} by this agent in the last hour` };
  return { ok: true, text: rendered.text };
}

/**
 * Counts one delivered send toward the rate limits (call it only after the
 * channel accepted the message). `recipient` is `honeypotRecipient(args)`.
 * Also prunes this agent's rows older than a day.
 */
export async function recordHoneypotSend(db: D1Database, agentId: string, recipient: string, now: Date): Promise<void> {
  const at = now.getTime();
  await db.batch([
    db.prepare("INSERT INTO honeypot_sends (agent_id, recipient, sent_at) VALUES (?, ?, ?)").bind(agentId, recipient, at),
    db.prepare("DELETE FROM honeypot_sends WHERE agent_id = ? AND sent_at <= ?").bind(agentId, at - RETAIN_MS),
  ]);
}

/**
 * Takes one place under the hourly limits for a honeypot send, before it is delivered (issue 20 §4): a single
 * D1 statement counts and inserts, so sends racing from any number of sessions (SessionDOs) cannot all see room
 * under the limit — D1 runs one statement at a time on one database, and the count and the insert are that one
 * statement. The row is the send's record from then on; `releaseHoneypotSend` removes it when nothing was sent.
 * Also prunes this agent's rows older than a day. Throws when D1 fails (the caller then needs an approval).
 */
export async function reserveHoneypotSend(
  db: D1Database,
  o: { agentId: string; recipient: string; config: Pick<HoneypotConfig, "perRecipientPerHour" | "perAgentPerHour">; now: Date },
): Promise<{ ok: true; id: number } | { ok: false; reason: string }> {
  const at = o.now.getTime();
  const [insert] = await db.batch([
    db
      .prepare(
        `INSERT INTO honeypot_sends (agent_id, recipient, sent_at)
         SELECT ?1, ?2, ?3
         WHERE (SELECT COUNT(*) FROM honeypot_sends WHERE agent_id = ?1 AND recipient = ?2 AND sent_at > ?4) < ?5
           AND (SELECT COUNT(*) FROM honeypot_sends WHERE agent_id = ?1 AND sent_at > ?4) < ?6
         RETURNING id`,
      )
      .bind(o.agentId, o.recipient, at, at - HOUR_MS, o.config.perRecipientPerHour, o.config.perAgentPerHour),
    db.prepare("DELETE FROM honeypot_sends WHERE agent_id = ? AND sent_at <= ?").bind(o.agentId, at - RETAIN_MS),
  ]);
  const id = (insert?.results[0] as { id?: number } | undefined)?.id;
  if (typeof id === "number") return { ok: true, id };
  // Which limit was full, for the approval's reason (read after the fact: the refusal itself was atomic).
  const counts = await db
    .prepare("SELECT COALESCE(SUM(recipient = ?1), 0) AS recipient_sends FROM honeypot_sends WHERE agent_id = ?2 AND sent_at > ?3")
    .bind(o.recipient, o.agentId, at - HOUR_MS)
    .first<{ recipient_sends: number }>()
    .catch(() => null);
  return (counts?.recipient_sends ?? 0) >= o.config.perRecipientPerHour
    ? { ok: false, reason: `rate limit: ${sends(o.config.perRecipientPerHour)} to this recipient in the last hour` }
    : { ok: false, reason: `rate limit: ${sends(o.config.perAgentPerHour)} by this agent in the last hour` };
}

/** Gives back a reservation whose send certainly did not go out (see `reserveHoneypotSend`). */
export async function releaseHoneypotSend(db: D1Database, id: number): Promise<void> {
  await db.prepare("DELETE FROM honeypot_sends WHERE id = ?").bind(id).run();
}

/**
 * Whether a failed `message.send` certainly sent nothing, so its reservation can be released: invalid input, no
 * adapter, a denial. Any other failure (the adapter threw, timed out, returned no id) may have delivered the
 * message, so its reservation stays and counts — the limit errs towards fewer sends, never more.
 */
export function sendCertainlyFailed(code: string): boolean {
  return code === "tool.input_invalid" || code === "invalid.request" || code === "policy.denied";
}
