/**
 * S1 §3.3 Phase 2, the honeypot exception: link detection on every fixture in
 * fixtures/links.json (obfuscated links found, ordinary prose left alone),
 * template rendering, each rule of `checkHoneypot` in order with its exact
 * reason, and the hourly rate limits kept in D1 (`honeypot_sends`).
 */

import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { HoneypotConfig } from "../../src/config/honeypot";
import type { MessageSendArgs } from "../../src/tools/builtin/message";
import { checkHoneypot, containsLink, honeypotRecipient, recordHoneypotSend, renderTemplate } from "../../src/tools/honeypot";
import links from "../fixtures/links.json";

const NOW = new Date("2025-06-01T12:00:00.000Z");
const HOUR = 3_600_000;
const at = (msAgo: number) => new Date(NOW.getTime() - msAgo);

const config = HoneypotConfig.parse({
  templates: {
    greeting: "Hi {name}, thanks for your message.",
    visit: "Visit {site}.com for more",
    linked: "See https://example.com",
    plain: "Thanks, we got it.",
  },
  recipientTypes: ["user", "group"],
});

const args = (over: Partial<MessageSendArgs> = {}): MessageSendArgs => ({
  channel: "telegram",
  to: "u100",
  recipient_type: "user",
  template: "greeting",
  vars: { name: "Ana" },
  ...over,
});

/** A fresh agent id per test, so rate-limit rows never leak between tests. */
const agent = () => `hp-${crypto.randomUUID().slice(0, 8)}`;

const check = (agentId: string, a: MessageSendArgs, c: HoneypotConfig = config, now: Date = NOW) =>
  checkHoneypot({ args: a, config: c, db: env.DB, agentId, now });

describe("S1 §3.3 Phase 2: no links — containsLink fixtures", () => {
  it("the fixture file has at least 40 obfuscated-link positives and 20 prose negatives", () => {
    expect(links.positives.length).toBeGreaterThanOrEqual(40);
    expect(links.negatives.length).toBeGreaterThanOrEqual(20);
  });

  for (const { form, text } of links.positives) {
    it(`S1 §3.3 Phase 2: no links — obfuscated forms count: ${form} ${JSON.stringify(text)}`, () => {
      expect(containsLink(text)).toBe(true);
    });
  }

  for (const { why, text } of links.negatives) {
    it(`S1 §3.3 Phase 2: no links — prose is not a link: ${why} ${JSON.stringify(text)}`, () => {
      expect(containsLink(text)).toBe(false);
    });
  }
});

describe("S1 §3.3 Phase 2: allowlisted template — renderTemplate", () => {
  it("fills every placeholder, repeated ones too", () => {
    expect(renderTemplate("Hi {name}, see you {day}. Bye {name}!", { name: "Ana", day: "Monday" })).toEqual({
      ok: true,
      text: "Hi Ana, see you Monday. Bye Ana!",
    });
  });

  it("a template without placeholders renders as it is with no vars", () => {
    expect(renderTemplate("Thanks, we got it.", {})).toEqual({ ok: true, text: "Thanks, we got it." });
  });

  it("every placeholder must be provided", () => {
    expect(renderTemplate("Hi {name}, see you {day}.", { name: "Ana" })).toEqual({ ok: false, reason: "missing value for {day}" });
  });

  it("an inherited property name is not a provided value", () => {
    expect(renderTemplate("Hi {constructor}", {})).toEqual({ ok: false, reason: "missing value for {constructor}" });
  });

  it("no extra vars", () => {
    expect(renderTemplate("Hi {name}", { name: "Ana", extra: "x" })).toEqual({
      ok: false,
      reason: 'unexpected var "extra": the template has no {extra}',
    });
  });

  it("values are capped at 200 characters (code points)", () => {
    expect(renderTemplate("{v}", { v: "a".repeat(200) })).toEqual({ ok: true, text: "a".repeat(200) });
    expect(renderTemplate("{v}", { v: "😀".repeat(200) })).toEqual({ ok: true, text: "😀".repeat(200) });
    expect(renderTemplate("{v}", { v: "a".repeat(201) })).toEqual({ ok: false, reason: "the value of {v} is longer than 200 characters" });
  });

  it("values must not contain links, obfuscated ones included", () => {
    expect(renderTemplate("Hi {name}", { name: "example[.]com" })).toEqual({ ok: false, reason: "the value of {name} contains a link" });
    expect(renderTemplate("Hi {name}", { name: "hxxps://x" })).toEqual({ ok: false, reason: "the value of {name} contains a link" });
  });

  it("values are inserted once: a placeholder inside a value stays literal", () => {
    expect(renderTemplate("{a} and {b}", { a: "{b}", b: "x" })).toEqual({ ok: true, text: "{b} and x" });
  });

  it("braces that are not placeholders stay literal", () => {
    expect(renderTemplate("{ } {1} {name}", { name: "Ana" })).toEqual({ ok: true, text: "{ } {1} Ana" });
  });
});

describe("S1 §3.3 Phase 2: HoneypotConfig", () => {
  it("defaults: no templates, no recipient types, 3 per recipient and 30 per agent per hour", () => {
    expect(HoneypotConfig.parse({})).toEqual({ templates: {}, recipientTypes: [], perRecipientPerHour: 3, perAgentPerHour: 30 });
  });

  it("template ids are lower-case ids; unknown keys and recipient types are refused", () => {
    expect(HoneypotConfig.safeParse({ templates: { Welcome: "x" } }).success).toBe(false);
    expect(HoneypotConfig.safeParse({ templates: { welcome: "" } }).success).toBe(false);
    expect(HoneypotConfig.safeParse({ recipientTypes: ["sms"] }).success).toBe(false);
    expect(HoneypotConfig.safeParse({ perHour: 3 }).success).toBe(false);
    expect(HoneypotConfig.safeParse({ templates: { "welcome_2-b": "Hi" } }).success).toBe(true);
  });
});

describe("S1 §3.3 Phase 2: checkHoneypot, each rule in order", () => {
  it("S1 §3.3 Phase 2: allowlisted template — free text never qualifies (no template)", async () => {
    const { template: _t, vars: _v, ...rest } = args();
    expect(await check(agent(), { ...rest, text: "Hi Ana" })).toEqual({
      ok: false,
      reason: "the message has no template; free text is never sent without approval",
    });
  });

  it("S1 §3.3 Phase 2: allowlisted template — free text beside a template never qualifies", async () => {
    expect(await check(agent(), args({ text: "Hi Ana" }))).toEqual({
      ok: false,
      reason: 'the message has free text besides template "greeting"; free text is never sent without approval',
    });
  });

  it("S1 §3.3 Phase 2: allowlisted template — checked before the other rules", async () => {
    const everythingWrong = args({
      template: "welcome",
      recipient_type: "email",
      attachments: [{ name: "a.pdf", url: "https://files.test/a.pdf" }],
      vars: { name: "example.com" },
    });
    expect(await check(agent(), everythingWrong)).toEqual({ ok: false, reason: 'template "welcome" is not allowlisted' });
  });

  it("S1 §3.3 Phase 2: allowlisted template — inherited names are not templates", async () => {
    expect(await check(agent(), args({ template: "constructor" }))).toEqual({
      ok: false,
      reason: 'template "constructor" is not allowlisted',
    });
  });

  it("S1 §3.3 Phase 2: allowlisted recipient type — checked second", async () => {
    const wrong = args({
      recipient_type: "email",
      attachments: [{ name: "a.pdf", url: "https://files.test/a.pdf" }],
      vars: { name: "x.com" },
    });
    expect(await check(agent(), wrong)).toEqual({ ok: false, reason: 'recipient type "email" is not allowlisted' });
  });

  it("S1 §3.3 Phase 2: no attachments — checked third", async () => {
    const wrong = args({ attachments: [{ name: "a.pdf", url: "https://files.test/a.pdf" }], vars: { name: "x.com" } });
    expect(await check(agent(), wrong)).toEqual({ ok: false, reason: "attachments are never sent without approval" });
  });

  it("S1 §3.3 Phase 2: no attachments — an empty list is no attachments", async () => {
    expect(await check(agent(), args({ attachments: [] }))).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
  });

  it("S1 §3.3 Phase 2: no links — a link in a value", async () => {
    expect(await check(agent(), args({ vars: { name: "example dot com" } }))).toEqual({ ok: false, reason: "the message contains a link" });
  });

  it("S1 §3.3 Phase 2: no links — a link in the allowlisted template itself", async () => {
    expect(await check(agent(), args({ template: "linked", vars: {} }))).toEqual({ ok: false, reason: "the message contains a link" });
  });

  it("S1 §3.3 Phase 2: no links — a link that only appears once rendered", async () => {
    expect(containsLink("example")).toBe(false);
    expect(await check(agent(), args({ template: "visit", vars: { site: "example" } }))).toEqual({
      ok: false,
      reason: "the message contains a link",
    });
  });

  it("S1 §3.3 Phase 2: allowlisted template — vars must fill it exactly", async () => {
    expect(await check(agent(), args({ vars: {} }))).toEqual({ ok: false, reason: "missing value for {name}" });
    expect(await check(agent(), args({ vars: { name: "Ana", x: "y" } }))).toEqual({
      ok: false,
      reason: 'unexpected var "x": the template has no {x}',
    });
  });

  it("S1 §3.3 Phase 2: passes with every rule satisfied, returning the rendered text", async () => {
    expect(await check(agent(), args())).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
    expect(await check(agent(), args({ template: "plain", vars: undefined, recipient_type: "group" }))).toEqual({
      ok: true,
      text: "Thanks, we got it.",
    });
  });

  it("S1 §3.3 Phase 2: rate limits satisfied — fails closed when the limits cannot be read", async () => {
    const broken = {
      prepare() {
        throw new Error("D1_ERROR: no such table");
      },
    } as unknown as D1Database;
    expect(await checkHoneypot({ args: args(), config, db: broken, agentId: agent(), now: NOW })).toEqual({
      ok: false,
      reason: "the rate limits could not be checked, so the send needs approval",
    });
  });
});

describe("S1 §3.3 Phase 2: rate limits satisfied", () => {
  it("per recipient: the 4th send to one recipient within the hour is refused (limit 3); others still pass", async () => {
    const id = agent();
    const recipient = honeypotRecipient(args());
    for (let i = 0; i < 2; i++) await recordHoneypotSend(env.DB, id, recipient, at(10 * 60_000));
    expect(await check(id, args())).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
    await recordHoneypotSend(env.DB, id, recipient, at(60_000));
    expect(await check(id, args())).toEqual({ ok: false, reason: "rate limit: 3 sends to this recipient in the last hour" });
    expect(await check(id, args({ to: "u200" }))).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
    expect(await check(agent(), args())).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
  });

  it("per recipient: the recipient is channel and id, the id case-insensitive", async () => {
    const id = agent();
    expect(honeypotRecipient({ channel: "email", to: " Bob@Example.com " })).toBe("email:bob@example.com");
    const limited = HoneypotConfig.parse({ ...config, perRecipientPerHour: 1 });
    await recordHoneypotSend(env.DB, id, honeypotRecipient({ channel: "telegram", to: "U100" }), at(0));
    expect(await check(id, args(), limited)).toEqual({ ok: false, reason: "rate limit: 1 send to this recipient in the last hour" });
    expect(await check(id, args({ channel: "slack" }), limited)).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
  });

  it("per agent: the 31st send by one agent within the hour is refused (limit 30)", async () => {
    const id = agent();
    for (let i = 0; i < 29; i++) await recordHoneypotSend(env.DB, id, `telegram:r${i}`, at(i * 60_000));
    expect(await check(id, args())).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
    await recordHoneypotSend(env.DB, id, "telegram:r29", at(0));
    expect(await check(id, args())).toEqual({ ok: false, reason: "rate limit: 30 sends by this agent in the last hour" });
  });

  it("per recipient is checked before per agent", async () => {
    const id = agent();
    const tight = HoneypotConfig.parse({ ...config, perRecipientPerHour: 1, perAgentPerHour: 1 });
    await recordHoneypotSend(env.DB, id, honeypotRecipient(args()), at(0));
    expect(await check(id, args(), tight)).toEqual({ ok: false, reason: "rate limit: 1 send to this recipient in the last hour" });
    expect(await check(id, args({ to: "u200" }), tight)).toEqual({
      ok: false,
      reason: "rate limit: 1 send by this agent in the last hour",
    });
  });

  it("a limit of 0 refuses every send", async () => {
    const none = HoneypotConfig.parse({ ...config, perRecipientPerHour: 0 });
    expect(await check(agent(), args(), none)).toEqual({ ok: false, reason: "rate limit: 0 sends to this recipient in the last hour" });
  });

  it("sends an hour old or older don't count; a send 59 minutes ago does", async () => {
    const id = agent();
    const recipient = honeypotRecipient(args());
    await recordHoneypotSend(env.DB, id, recipient, at(HOUR));
    await recordHoneypotSend(env.DB, id, recipient, at(2 * HOUR));
    await recordHoneypotSend(env.DB, id, recipient, at(5 * HOUR));
    await recordHoneypotSend(env.DB, id, recipient, at(HOUR - 1));
    await recordHoneypotSend(env.DB, id, recipient, at(59 * 60_000));
    expect(await check(id, args())).toEqual({ ok: true, text: "Hi Ana, thanks for your message." });
    await recordHoneypotSend(env.DB, id, recipient, at(1000));
    expect(await check(id, args())).toEqual({ ok: false, reason: "rate limit: 3 sends to this recipient in the last hour" });
  });

  it("recording prunes this agent's rows older than a day", async () => {
    const id = agent();
    await recordHoneypotSend(env.DB, id, "telegram:a", at(25 * HOUR));
    await recordHoneypotSend(env.DB, id, "telegram:a", at(23 * HOUR));
    await recordHoneypotSend(env.DB, id, "telegram:a", NOW);
    const rows = await env.DB.prepare("SELECT sent_at FROM honeypot_sends WHERE agent_id = ? ORDER BY sent_at")
      .bind(id)
      .all<{ sent_at: number }>();
    expect(rows.results.map((r) => r.sent_at)).toEqual([at(23 * HOUR).getTime(), NOW.getTime()]);
  });
});
