/**
 * Redaction on the write path (S1 §4.5, §5.4): credential patterns and the
 * literal values of every configured secret are replaced before anything is
 * stored; a secret split across two messages is caught; placeholders are never
 * fed back to the model as if they were content.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { buildContext } from "../src/context/caps";
import { placeholdersForModel, redactAcrossBoundary, redactText, secretValuesFromEnv } from "../src/security/redact";

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
