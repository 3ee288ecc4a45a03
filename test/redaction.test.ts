/**
 * Redaction on the write path (S1 §4.5, §5.4): credential patterns and the
 * literal values of every configured secret are replaced before anything is
 * stored; a secret split across two messages is caught; placeholders are never
 * fed back to the model as if they were content.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { buildContext } from "../src/context/caps";
import {
  isPhoneNumber,
  placeholdersForModel,
  redactAcrossBoundary,
  redactPersonalData,
  redactText,
  secretValuesFromEnv,
} from "../src/security/redact";

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
