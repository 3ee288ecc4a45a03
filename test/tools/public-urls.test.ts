/**
 * Issue 33 (D-088): one outbound URL check (`checkUrl`, src/tools/net-policy.ts) for every URL the gateway sends to —
 * `http.get`, job webhooks, completion webhooks (`notify.url`), usage alert webhooks, and now the channels'
 * `apiBaseUrl` and `standard.replyUrl` — refusing internal-only names (`*.svc`, `*.consul`, `*.intranet`, …) and
 * special-use names (`.test`, `.example`, `.invalid`, `.onion`, `.alt`); channel URLs must be public https, checked
 * where the config is validated, each refusal naming its key. The test suite's mock network lives under `.test`
 * through one escape hatch (`allowTestTldForTests`, on in test/support/test-hosts.ts); these tests turn it off to
 * see the production answer.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import { allowTestTldForTests, checkUrl } from "../../src/tools/net-policy";
import { mockProvider, requestsTo, runConfig, uniqueHost } from "../support/config";
import { ADMIN, type App, appFor, call } from "../support/runs";

const INTERNAL = "must not point at an internal host name";
const SPECIAL = "must not use a special-use domain name (.test, .example, .invalid, .onion, .alt)";
const PRIVATE = "must not point at a private, loopback or link-local address";

/** Hosts no public URL may name, and the words of their refusal. */
const REFUSED_HOSTS: [string, string][] = [
  ["hooks.svc", INTERNAL],
  ["api.default.svc", INTERNAL],
  ["api.default.svc.cluster.local", INTERNAL],
  ["vault.service.consul", INTERNAL],
  ["wiki.intranet", INTERNAL],
  ["printer.local", INTERNAL],
  ["db.internal", INTERNAL],
  ["router.home.arpa", INTERNAL],
  ["app.localhost", INTERNAL],
  ["nas.lan", INTERNAL],
  ["git.corp", INTERNAL],
  ["box.home", INTERNAL],
  ["intranet", INTERNAL],
  ["x.invalid", SPECIAL],
  ["hooks.example", SPECIAL],
  ["abcdefghijklmnop.onion", SPECIAL],
  ["name.alt", SPECIAL],
];

/** Runs `check` with the test-hosts escape hatch off, as in production; synchronous, so nothing else runs meanwhile. */
function production<T>(check: () => T): T {
  allowTestTldForTests(false);
  try {
    return check();
  } finally {
    allowTestTldForTests(true);
  }
}

/** The issues of a config whose channels (and usage alerts) are as given. */
function configIssues(o: { channels?: Record<string, unknown>; usage?: Record<string, unknown> }) {
  const parsed = parseGatewayConfig({
    models: { default: "moonshot:kimi-k1-128k", providers: { moonshot: mockProvider("ok.provider.test") as never } },
    agents: { main: {} },
    ...o,
  });
  return parsed.ok ? [] : parsed.issues;
}

async function postRun(app: App, url: string) {
  return call(app, "POST", "/v1/runs", { agent_id: "main", message: "hi", notify: { url } });
}

describe("ISSUE33 urls: internal-only and special-use names are refused everywhere", () => {
  it(`ISSUE33 urls: notify.url on an internal-only name or a special-use TLD is refused with 400 naming notify.url, nothing queued (${REFUSED_HOSTS.length} hosts)`, async () => {
    const host = uniqueHost("ok");
    const app = appFor(runConfig(host));
    for (const [name, words] of REFUSED_HOSTS) {
      const res = await postRun(app, `https://${name}/hook`);
      expect({ name, status: res.status, body: res.body }).toEqual({
        name,
        status: 400,
        body: { error: { code: "invalid.request", message: `notify.url: ${words}` } },
      });
    }
    expect(await requestsTo(host)).toEqual([]);
  });

  it("ISSUE33 urls: checkUrl gives one reason per name: internal_hostname for internal-only names, special_use_name for special-use TLDs; public names pass", () => {
    for (const [name, words] of REFUSED_HOSTS) {
      expect(checkUrl(`https://${name}/`), name).toEqual({
        ok: false,
        reason: words === INTERNAL ? "internal_hostname" : "special_use_name",
      });
    }
    for (const name of ["example.com", "hooks.example.org", "svc.example.com", "consul.io", "test.com", "my.onion.example.net"]) {
      expect(checkUrl(`https://${name}/`).ok, name).toBe(true);
    }
    // A name embedding a private IPv4 under a special-use TLD keeps its wildcard-DNS reason (checked first).
    expect(checkUrl("https://7f000001.attacker.example/")).toEqual({ ok: false, reason: "wildcard_dns" });
  });

  it("ISSUE33 urls: a job webhook target and http.get refuse the same names", async () => {
    const app = appFor(runConfig(uniqueHost("ok")));
    const job = {
      job_id: `urls-${crypto.randomUUID().slice(0, 8)}`,
      agent_id: "main",
      schedule: "@every 1h",
      message: "report",
      mode: "isolated",
      enabled: true,
    };
    for (const [target, reason] of [
      ["https://hooks.svc/x", "internal_hostname"],
      ["https://hooks.example/x", "special_use_name"],
    ]) {
      const res = await call(app, "POST", "/api/admin/jobs", { ...job, notify: { channel: "webhook", target } }, ADMIN);
      expect({ status: res.status, body: res.body }).toEqual({
        status: 400,
        body: { error: { code: "invalid.request", message: `notify.target: not an allowed webhook URL (${reason})` } },
      });
    }
    const { tools } = await import("../../src/tools/registry");
    const httpGet = tools.get("http.get");
    const ctx = { capabilities: ["net"], timeoutMs: 5_000, signal: new AbortController().signal, env } as never;
    expect(await httpGet?.handler({ url: "https://wiki.onion/page" }, ctx)).toEqual({
      ok: false,
      error: {
        code: "policy.denied",
        message:
          "https://wiki.onion/page is refused: special-use domain names (.test, .example, .invalid, .onion, .alt) reach no public host and are never fetched",
      },
    });
  });

  it("ISSUE33 urls: with the test-hosts escape hatch off (production), *.test is refused as a special-use name", () => {
    expect(checkUrl("https://ok.hook.test/in")).toMatchObject({ ok: true }); // the suite's mock network, hatch on
    expect(production(() => checkUrl("https://ok.hook.test/in"))).toEqual({ ok: false, reason: "special_use_name" });
    expect(production(() => configIssues({ channels: { telegram: { enabled: true, apiBaseUrl: "https://api.telegram.test" } } }))).toEqual([
      { path: "channels.telegram.apiBaseUrl", message: SPECIAL },
    ]);
    // The hatch admits `.test` names and nothing else.
    for (const url of ["https://127.0.0.1/", "https://localhost/", "https://hooks.svc/", "https://x.example/"])
      expect(checkUrl(url).ok, url).toBe(false);
  });
});

describe("ISSUE33 urls: channel base URLs and standard.replyUrl are public https, refused at config validation", () => {
  const CHANNEL_KEYS: [string, (url: string) => Record<string, unknown>][] = [
    ["channels.telegram.apiBaseUrl", (u) => ({ telegram: { enabled: true, apiBaseUrl: u } })],
    ["channels.slack.apiBaseUrl", (u) => ({ slack: { enabled: true, apiBaseUrl: u } })],
    ["channels.discord.apiBaseUrl", (u) => ({ discord: { enabled: true, apiBaseUrl: u } })],
    ["channels.standard.replyUrl", (u) => ({ standard: { enabled: true, replyUrl: u } })],
  ];
  const REFUSED: [string, string][] = [
    ["https://169.254.169.254/latest", PRIVATE],
    ["https://10.1.2.3/api", PRIVATE],
    ["http://localhost:6379", "must use the default https port"], // checkUrl's order: scheme, credentials, port, host; https last
    ["https://localhost/api", INTERNAL],
    ["https://127.0.0.1/api", PRIVATE],
    ["https://[::1]/api", PRIVATE],
    ["https://bot-api.svc/api", INTERNAL],
    ["https://relay.consul/api", INTERNAL],
    ["https://bot.onion/api", SPECIAL],
    ["https://api.telegram.org:8443", "must use the default https port"],
    ["https://bot@api.telegram.org", "must not carry credentials (user:password@)"], // with a password the secrets guard refuses it first
    ["http://api.telegram.org", "must be an https URL"],
  ];

  for (const [key, channels] of CHANNEL_KEYS) {
    it(`ISSUE33 urls: ${key} refuses private, loopback, metadata, internal and special-use hosts, http and odd ports, naming the key (${REFUSED.length} URLs)`, () => {
      for (const [url, message] of REFUSED) {
        expect({ url, issues: configIssues({ channels: channels(url) }) }).toEqual({ url, issues: [{ path: key, message }] });
      }
    });
  }

  it("ISSUE33 urls: public https channel URLs pass as before (defaults, a proxy, a trailing slash trimmed)", () => {
    for (const [key, channels] of CHANNEL_KEYS)
      expect(configIssues({ channels: channels("https://bots.example.com/relay/") }), key).toEqual([]);
    const parsed = parseGatewayConfig({
      models: { default: "moonshot:kimi-k1-128k", providers: { moonshot: mockProvider("ok.provider.test") as never } },
      agents: { main: {} },
      channels: { telegram: { enabled: true }, standard: { enabled: true, replyUrl: "https://replies.example.com/in/" } },
    });
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
    expect(parsed.value.channels.telegram.apiBaseUrl).toBe("https://api.telegram.org");
    expect(parsed.value.channels.standard.replyUrl).toBe("https://replies.example.com/in");
  });

  it("ISSUE33 urls: a usage alert webhook on an internal-only or special-use name is refused naming the key", () => {
    const alert = (webhook: string) => ({ alerts: [{ scope: "agent", id: "main", period: "day", tokens: 10, webhook }] });
    const webhooks: [string, string][] = [
      ["https://alerts.svc/in", "internal_hostname"],
      ["https://alerts.invalid/in", "special_use_name"],
    ];
    for (const [webhook, reason] of webhooks) {
      expect(configIssues({ usage: alert(webhook) })).toEqual([
        {
          path: "usage.alerts[0].webhook",
          message: `not an allowed outbound URL (${reason}): no credentials, default port, no private or special-purpose address`,
        },
      ]);
    }
  });
});
