/**
 * Issue 20 §5 (redaction): a configured secret is never stored whole — not split over 3 or more consecutive
 * messages, and not in its base64 (standard, URL-safe, embedded in a longer blob), URL-encoded, upper-cased or
 * zero-width-split forms. Each case goes through POST /v1/chat/messages, then every place the gateway writes
 * is read back (the admin messages view and transcript export, every R2 object — audit segments, run bundles,
 * log segments —, every console log line, every table of the session's Durable Object) and none of them, nor
 * their concatenation, holds the secret in any of those forms.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { runObjectId } from "../../src/runs/ids";
import { redactAcrossMessages, redactText, secretValuesFromEnv } from "../../src/security/redact";
import { derivedMatcherCount, stableBase64Forms } from "../../src/security/secret-forms";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

/** Configured secrets of the test Worker (vitest.config.ts) that no credential pattern matches by shape. */
const SIGNING = "slacksigningsecret0123456789abcdef";
const SANDBOX = "test-sandbox-token-secret-0123456789abcdef";

afterEach(() => vi.restoreAllMocks());

async function everyObject(bucket: R2Bucket): Promise<{ key: string; text: string }[]> {
  const out: { key: string; text: string }[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) out.push({ key: o.key, text: (await (await bucket.get(o.key))?.text()) ?? "" });
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out;
}

/** Text as the secret could be read back from it: whitespace and format characters dropped, %XX decoded, lower case. */
const readBack = (text: string) =>
  text
    .replace(/[\s\p{Cf}]/gu, "")
    .replace(/%([0-9a-f]{2})/gi, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16)))
    .toLowerCase();

/** The places where `secret` (read back as `readBack` does) or one of `forms` verbatim is found. */
function leaks(places: { where: string; text: string }[], secret: string, forms: readonly string[]): string[] {
  return places.flatMap((p) => {
    const found: string[] = [];
    if (readBack(p.text).includes(secret.toLowerCase())) found.push(`secret in ${p.where}`);
    for (const f of forms) if (p.text.replace(/\s/g, "").includes(f)) found.push(`${JSON.stringify(f.slice(0, 24))}… in ${p.where}`);
    for (const f of stableBase64Forms(secret)) if (p.text.replace(/\s/g, "").includes(f)) found.push(`base64 form in ${p.where}`);
    return found;
  });
}

interface Scenario {
  /** The session's messages in order (the admin messages view). */
  rows: { role: string; content: string }[];
  /** The runs' views, one per message sent. */
  runs: any[];
  places: { where: string; text: string }[];
}

/**
 * Sends `messages` one by one through POST /v1/chat/messages (each waits for its run; the scripted model
 * answers `replies`), with message text in the debug log (a local provider), and collects every place.
 */
async function scenario(
  messages: string[],
  replies: string[] = messages.map(() => "noted"),
  agent: Record<string, unknown> = {},
): Promise<Scenario> {
  const lines: string[] = [];
  for (const level of ["log", "warn", "error", "info", "debug"] as const)
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
    });
  const host = uniqueHost("script");
  const agentId = `forms-${crypto.randomUUID().slice(0, 8)}`;
  await scriptProvider(
    host,
    replies.map((content) => ({ content })),
  );
  const app = appFor(runConfig(host, { agentId, agent, provider: { local: true }, logging: { debugContent: { enabled: true } } }));
  const room = `room-${crypto.randomUUID().slice(0, 8)}`;
  const runs: any[] = [];
  let sessionId = "";
  for (const message of messages) {
    const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: agentId, message });
    expect(sent.status).toBe(202);
    sessionId = sent.body.session_id;
    const run = await waitForRun(app, sent.body.id);
    expect(run.status).toBe("completed");
    runs.push(run);
  }
  const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runs[0].id) as string));
  await until(async () => (await auditBacklog(stub)) === 0);
  for (const run of runs) await until(async () => (await env.AUDIT.list({ prefix: `${run.artifact_path}/` })).objects.length === 1);
  const view = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/messages`, undefined, ADMIN);
  const transcript = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/transcript`, undefined, ADMIN);
  const storage = await runInDurableObject(stub, (_i, state: DurableObjectState) => {
    const tables = state.storage.sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 4) <> '_cf_' AND name NOT LIKE '%_fts%'",
      )
      .toArray();
    return tables.map((t) => `${t.name}: ${JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t.name}"`).toArray())}`);
  });
  const objects = [...(await everyObject(env.AUDIT)), ...(await everyObject(env.WORKSPACE))];
  // The scenario went through every place scanned: audit segments, bundles, debug lines.
  expect(objects.some((o) => o.key.startsWith(`agents/${agentId}/audit/`))).toBe(true);
  expect(objects.filter((o) => o.key.startsWith(`agents/${agentId}/runs/`)).length).toBe(messages.length);
  expect(lines.some((l) => l.includes('"event":"debug.content"'))).toBe(true);
  // Every message stored, live or archived to R2 (turns past maxTurns), by seq.
  const archived = objects
    .filter((o) => o.key.startsWith(`agents/${agentId}/sessions/`))
    .flatMap((o) => o.text.split("\n").filter(Boolean))
    .map((l) => JSON.parse(l));
  const live = transcript.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const stored = [...new Map([...archived, ...live].map((r) => [r.seq, r])).values()].sort((a, b) => a.seq - b.seq);
  const joined = (role: string) =>
    stored
      .filter((r) => r.role === role)
      .map((r) => r.content as string)
      .join("");
  const places = [
    // What a split secret would be reassembled from: the stored messages of a role, and the runs' outputs, end to end.
    { where: "stored user messages concatenated", text: joined("user") },
    { where: "stored assistant messages concatenated", text: joined("assistant") },
    { where: "run outputs concatenated", text: runs.map((r) => r.output).join("") },
    { where: "admin messages view", text: view.text },
    { where: "transcript export", text: transcript.text },
    ...objects.map((o) => ({ where: `R2 ${o.key}`, text: o.text })),
    ...lines.map((l, i) => ({ where: `log line ${i}`, text: l })),
    ...storage.map((s) => ({ where: `DO ${s.slice(0, s.indexOf(":"))}`, text: s })),
    ...runs.map((r) => ({ where: `run view ${r.id}`, text: JSON.stringify(r) })),
  ];
  return { rows: view.body.messages.map((m: any) => ({ role: m.role, content: m.content })), runs, places };
}

/** The user messages stored, in order, with their `redactions` paths (from the transcript export). */
const userRows = (s: Scenario) =>
  (s.places.find((p) => p.where === "transcript export") as { text: string }).text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((r) => r.role === "user")
    .map((r) => [r.content, r.redactions]);

describe("ISSUE20-§5 a configured secret split over consecutive messages is stored nowhere whole", () => {
  it("ISSUE20-§5 a secret split over 3 user messages: every fragment redacted, redactions recorded, no place holds it", async () => {
    const s = await scenario(["my signing secret is slacksig", "ningsecret012", "3456789abcdef, keep it safe"]);
    expect(userRows(s)).toEqual([
      ["my signing secret is [REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret], keep it safe", ["content"]],
    ]);
    expect(leaks(s.places, SIGNING, [])).toEqual([]);
  });

  it("ISSUE20-§5 a secret split over 4 user messages, with line breaks and spaces inside the chunks", async () => {
    const s = await scenario(["chunk one: test-sandbox-", "token-sec ret", "-0123\n456789", "abcdef done"]);
    expect(userRows(s)).toEqual([
      ["chunk one: [REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret] done", ["content"]],
    ]);
    expect(leaks(s.places, SANDBOX, [])).toEqual([]);
  });

  it("ISSUE20-§5 a secret split over 3 user messages in a session that archives every older turn (maxTurns 1): the archived piece stays a piece", async () => {
    const s = await scenario(["my signing secret is slacksig", "ningsecret012", "3456789abcdef, keep it safe"], undefined, {
      session: { maxTurns: 1 },
    });
    // The export reads the archived parts too: the first piece was archived before the third came, and stays a piece.
    expect(userRows(s)).toEqual([
      ["my signing secret is slacksig", []],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret], keep it safe", ["content"]],
    ]);
    const parts = s.places.filter((p) => p.where.startsWith("R2 agents/") && p.where.includes("/sessions/"));
    expect(
      parts.map((p) =>
        p.text
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l))
          .filter((r) => r.role === "user")
          .map((r) => r.content),
      ),
    ).toEqual([["my signing secret is slacksig"], ["[REDACTED:split_secret]"]]);
    expect(leaks(s.places, SIGNING, [])).toEqual([]);
  });

  it("ISSUE20-§5 the first piece at the end of a 90 000-character message is still found (each earlier message is scanned by its tail)", async () => {
    const padding = "lorem ipsum ".repeat(7_500);
    const s = await scenario([`${padding}key: slacksig`, "ningsecret012", "3456789abcdef"]);
    expect(userRows(s)).toEqual([
      [`${padding}key: [REDACTED:split_secret]`, ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
    ]);
    expect(leaks(s.places, SIGNING, [])).toEqual([]);
  });

  it("ISSUE20-§5 a secret's base64 split over 3 user messages", async () => {
    const b64 = btoa(SIGNING);
    const s = await scenario([`blob ${b64.slice(0, 15)}`, b64.slice(15, 30), `${b64.slice(30)} end`]);
    expect(userRows(s)).toEqual([
      ["blob [REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret]", ["content"]],
      ["[REDACTED:split_secret] end", ["content"]],
    ]);
    expect(leaks(s.places, SIGNING, [b64])).toEqual([]);
  });

  it("ISSUE20-§5 a hostile model emitting a secret in pieces over 3 replies: the stored replies and the last output never complete it", async () => {
    const s = await scenario(["go on", "go on", "go on"], ["Here it comes: slacksig", "ningsecret0123", "456789abcdef. Done."]);
    expect(s.rows.filter((r) => r.role === "assistant").map((r) => r.content)).toEqual([
      "Here it comes: [REDACTED:split_secret]",
      "[REDACTED:split_secret]",
      "[REDACTED:split_secret]. Done.",
    ]);
    // Earlier replies had already gone to the caller as their runs' outputs; the piece that completes it never does.
    expect(s.runs.map((r) => r.output)).toEqual(["Here it comes: slacksig", "ningsecret0123", "[REDACTED:split_secret]. Done."]);
    expect(leaks(s.places, SIGNING, [])).toEqual([]);
  });
});

describe("ISSUE20-§5 a configured secret's encoded forms are redacted on the write path", () => {
  const single = async (form: string, stored: string, extra: string[] = []) => {
    const s = await scenario([`here you go: ${form} — thanks`]);
    expect(userRows(s)).toEqual([[`here you go: ${stored} — thanks`, ["content"]]]);
    expect(leaks(s.places, SIGNING, [form, ...extra])).toEqual([]);
  };

  it("ISSUE20-§5 base64 (standard, with padding)", async () => {
    const form = btoa(SANDBOX);
    expect(form).toBe("dGVzdC1zYW5kYm94LXRva2VuLXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVm");
    const s = await scenario([`here you go: ${form} — thanks`]);
    expect(userRows(s)).toEqual([["here you go: [REDACTED:encoded_secret] — thanks", ["content"]]]);
    expect(leaks(s.places, SANDBOX, [form])).toEqual([]);
  });

  it("ISSUE20-§5 base64url (the URL-safe alphabet, no padding)", async () => {
    const secret = "sig>>>???key~~0123456789";
    const form = btoa(`x${secret}`).replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "");
    expect(form).toMatch(/[-_]/);
    const s = await scenarioWithStored("SCHEDULER_WEBHOOK_SECRET", secret, [`url-safe: ${form}.`]);
    expect(userRows(s)).toEqual([["url-safe: [REDACTED:encoded_secret].", ["content"]]]);
    expect(leaks(s.places, secret, [form])).toEqual([]);
  });

  it("ISSUE20-§5 URL-encoded: every character percent-encoded (upper-case hex), and only the reserved ones", async () => {
    const all = [...SIGNING].map((c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).join("");
    await single(all, "[REDACTED:secret]");
    const secret = "p@ss:word/with?reserved&chars=1";
    const reserved = encodeURIComponent(secret);
    expect(reserved).toBe("p%40ss%3Aword%2Fwith%3Freserved%26chars%3D1");
    const s = await scenarioWithStored("SCHEDULER_WEBHOOK_SECRET", secret, [`https://x.example/cb?k=${reserved.toLowerCase()}&y=2`]);
    expect(userRows(s)).toEqual([["https://x.example/cb?k=[REDACTED:secret]&y=2", ["content"]]]);
    expect(leaks(s.places, secret, [reserved, reserved.toLowerCase()])).toEqual([]);
  });

  it("ISSUE20-§5 upper-cased", async () => {
    await single(SIGNING.toUpperCase(), "[REDACTED:secret]");
  });

  it("ISSUE20-§5 zero-width-split (ZWSP, word joiner, soft hyphen, tag characters between the characters)", async () => {
    const joiners = ["\u200b", "\u2060", "\u00ad", "\u{e0020}", "\ufeff"];
    const form = [...SIGNING].map((c, i) => (i === 0 ? c : `${joiners[i % joiners.length]}${c}`)).join("");
    await single(form, "[REDACTED:secret]");
  });

  it("ISSUE20-§5 embedded in a longer base64 blob, at each of the three alignments", async () => {
    const blobs = ["", "a", "ab"].map((pad) => btoa(`${pad}{"note":"deploy","key":"${SIGNING}","n":1}`));
    const s = await scenario(blobs.map((b) => `payload ${b} ok`));
    expect(userRows(s)).toEqual(blobs.map(() => ["payload [REDACTED:encoded_secret] ok", ["content"]]));
    expect(leaks(s.places, SIGNING, blobs)).toEqual([]);
  });
});

describe("ISSUE20-§5 ordinary messages are not redacted", () => {
  it("ISSUE20-§5 messages that share short prefixes, words or encodings with secrets are stored as sent", async () => {
    const messages = [
      "rotate the slack signing secret monthly; test-sandbox-token-secret is its name",
      "slacksigningsecret0123 is only a prefix",
      "456789 and abcdef are common",
      "dGVzdC1zYW5k is base64 of test-sand, and 100%25 sure, 50% off",
      "SLACKSIGNING SECRET, ALL CAPS",
      "zero\u200bwidth\u200bjoined words",
      "746573742d73616e64626f78 is hex for test-sandbox",
    ];
    const s = await scenario(messages);
    expect(userRows(s)).toEqual(messages.map((m) => [m, []]));
  });

  it("ISSUE20-§5 two consecutive messages that together hold only a prefix of a secret are left alone", async () => {
    const s = await scenario(["slacksigning", "secret0123456789abcde"]);
    expect(userRows(s)).toEqual([
      ["slacksigning", []],
      ["secret0123456789abcde", []],
    ]);
  });
});

/** `scenario` with a secret stored through POST /api/admin/secrets (laid over the env, redacted like the others). */
async function scenarioWithStored(name: string, value: string, messages: string[]): Promise<Scenario> {
  const app = appFor(runConfig(uniqueHost("script")));
  expect([200, 201]).toContain((await call(app, "POST", "/api/admin/secrets", { name, value }, ADMIN)).status);
  try {
    return await scenario(messages);
  } finally {
    await call(app, "DELETE", `/api/admin/secrets/${name}`, undefined, ADMIN);
  }
}

describe("ISSUE20-§5 a secret with non-ASCII letters", () => {
  it("ISSUE20-§5 its upper-cased, zero-width-split and URL-encoded (UTF-8 bytes) forms are redacted", () => {
    const secret = "clé-secrète-ÀÉÎ-0123";
    for (const form of [secret.toUpperCase(), encodeURIComponent(secret), [...secret].join("\u200b")])
      expect(redactText(`a ${form} b`, [secret])).toBe("a [REDACTED:secret] b");
  });
});

describe("ISSUE20-§5 the forms are derived once per isolate", () => {
  it("ISSUE20-§5 a list of secret values is derived once, whatever the array; a rotated value derives a new one", () => {
    const fresh = `fresh-secret-${crypto.randomUUID()}`;
    const before = derivedMatcherCount();
    for (let i = 0; i < 100; i++) redactText("nothing here", [...secretValuesFromEnv(env), fresh]);
    expect(derivedMatcherCount() - before).toBe(1);
    const rotated = `fresh-secret-${crypto.randomUUID()}`;
    expect(redactText(`a ${rotated.toUpperCase()} b`, [...secretValuesFromEnv(env), rotated])).toBe("a [REDACTED:secret] b");
    expect(derivedMatcherCount() - before).toBe(2);
  });

  it("ISSUE20-§5 a stored secret rotated through the admin API: the new value's forms are redacted at once", async () => {
    const first = `acme-first-${crypto.randomUUID().slice(0, 12)}`;
    const a = await scenarioWithStored("SCHEDULER_WEBHOOK_SECRET", first, [`first ${btoa(first)} x`]);
    expect(userRows(a)).toEqual([["first [REDACTED:encoded_secret] x", ["content"]]]);
    const second = `acme-second-${crypto.randomUUID().slice(0, 12)}`;
    const b = await scenarioWithStored("SCHEDULER_WEBHOOK_SECRET", second, [`second ${second.toUpperCase()} x`]);
    expect(userRows(b)).toEqual([["second [REDACTED:secret] x", ["content"]]]);
  });
});

describe("ISSUE20-§5 the forms scan stays linear (1 MiB adversarial inputs)", () => {
  const MiB = 1024 * 1024;
  const secrets = secretValuesFromEnv(env);
  const fill = (unit: string) => unit.repeat(Math.ceil(MiB / unit.length)).slice(0, MiB);
  const inputs: [string, string][] = [
    ["near-miss of a secret, repeated", fill(`${SIGNING.slice(0, -1)} `)],
    ["near-miss glued together", fill(SIGNING.slice(0, -1))],
    ["percent signs", fill("%")],
    ["half escapes", fill("%2")],
    ["escapes of the secret's first characters", fill("%73%6C%61%63%6B")],
    ["zero-width characters", fill("\u200b")],
    ["tag characters", fill("\u{e0073}")],
    ["near-miss of the base64 form", fill(btoa(SIGNING).slice(0, -6))],
    ["near-miss of the hex form", fill("736c61636b7369676e696e67")],
  ];
  for (const [name, text] of inputs) {
    // As in test/security/redaction.test.ts: no timing assertion; a super-linear scan runs far past the timeout.
    it(`ISSUE20-§5 redaction is linear: ${name}`, { timeout: 5_000 }, () => {
      expect(redactText(text, secrets)).toBe(text);
    });
  }

  it("ISSUE20-§5 redaction is linear: 256 earlier messages of near-misses, then the one that completes nothing", { timeout: 5_000 }, () => {
    const previous = Array.from({ length: 256 }, () => fill(SIGNING.slice(0, -1)).slice(0, 4096));
    expect(redactAcrossMessages(previous, "f", secrets).changed).toEqual([]);
  });
});
