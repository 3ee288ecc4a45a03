/**
 * S4 §4 `http.get {url, use_cache=true}`: SSRF refusals (every target in
 * fixtures/ssrf-targets.json), the S4 §4 capability rule with and without a
 * global allowlist, the order URL check → capability → cache → network (on
 * every redirect hop), the D1 cache with TTL, the size and time caps, and the
 * S3 §1 error codes. Pages come from the `*.web.test` mock in support/outbound.ts.
 */

import { env } from "cloudflare:workers";
import { Validator } from "@cfworker/json-schema";
import { afterEach, describe, expect, it, vi } from "vitest";
import { BUILTIN_TOOLS } from "../../src/tools/builtin";
import { createHttpGet, HTTP_GET_DEFAULTS, httpGet } from "../../src/tools/builtin/http";
import { capabilityAllows, capabilityDecision, checkUrl, type UrlRefusal } from "../../src/tools/net-policy";
import { type ToolContext, type ToolDefinition, tools } from "../../src/tools/registry";
import ssrf from "../fixtures/ssrf-targets.json";

const ctx = (capabilities: readonly string[], o: { timeoutMs?: number; signal?: AbortSignal } = {}): ToolContext => ({
  env,
  agentId: "web",
  runId: "run_http",
  sessionKey: "agent:web:main",
  channel: "http",
  capabilities,
  toolCallId: "t1",
  signal: o.signal ?? new AbortController().signal,
  timeoutMs: o.timeoutMs ?? 30_000,
});

const get = (input: Record<string, unknown>, capabilities: readonly string[], tool: ToolDefinition = httpGet, o = {}) =>
  tool.handler(input, ctx(capabilities, o));

/** A host of a mock scenario no other test uses, so counts and cache rows are this test's own. */
const unique = (scenario: string) => `${scenario}-${crypto.randomUUID().slice(0, 8)}.web.test`;

async function requestsTo(host: string): Promise<{ method: string; path: string }[]> {
  return (await fetch(`https://mock.control/requests?host=${encodeURIComponent(host)}`)).json();
}

const needs = (host: string) =>
  `http.get needs the capability "net" or "net:${host}" to fetch ${host}; ask an admin to grant it, or request it with the NOTES action request_permission:net:${host}`;

const notAllowlisted = (host: string) =>
  `${host} is not on the gateway's network allowlist, so the capability "net" does not cover it; http.get needs the capability "net:${host}"; ask an admin to grant it, or request it with the NOTES action request_permission:net:${host}`;

afterEach(() => {
  vi.restoreAllMocks();
});

describe("S4 §4 http.get registration", () => {
  it("is a built-in, read_only tool in the shared registry", () => {
    expect(BUILTIN_TOOLS).toContain(httpGet);
    expect(tools.get("http.get")).toBe(httpGet);
    expect(httpGet.risk).toBe("read_only");
  });

  it("S4 §4 signature as JSON Schema: http.get {url:str, use_cache:bool=true}", () => {
    expect(httpGet.parameters).toEqual({
      type: "object",
      properties: {
        url: { type: "string", minLength: 1, maxLength: 2048, description: "The http:// or https:// URL to fetch" },
        use_cache: {
          type: "boolean",
          default: true,
          description: "Serve a fresh cached copy if there is one; false always fetches (and refreshes the cache)",
        },
      },
      required: ["url"],
      additionalProperties: false,
    });
  });

  it("the description tells the model how to request the capability through NOTES", () => {
    expect(httpGet.description).toContain('Needs the session capability "net" or "net:<domain>"');
    expect(httpGet.description).toContain("request_permission:net:<domain>");
    expect(httpGet.description).toContain("at most 1 MiB");
    expect(httpGet.description).toContain("at most 5");
    expect(httpGet.description).toContain("cached for 5 min");
  });

  it("the JSON Schema the model sees agrees with the handler's validation", async () => {
    const host = unique("ok");
    const samples: Record<string, unknown>[] = [
      { url: `https://${host}/v` },
      { url: `https://${host}/v`, use_cache: false },
      {},
      { url: "" },
      { url: `https://${host}/${"a".repeat(2048)}` },
      { url: `https://${host}/v`, use_cache: "no" },
      { url: `https://${host}/v`, headers: {} },
    ];
    for (const input of samples) {
      const bySchema = new Validator(httpGet.parameters as never, "2020-12").validate(input).valid;
      const outcome = await get(input, ["net"]);
      const byHandler = outcome.ok || outcome.error.code !== "tool.input_invalid";
      expect({ input, valid: byHandler }).toEqual({ input, valid: bySchema });
    }
  });

  it("defaults: no allowlist, 300 s TTL, 1 MiB, 5 redirects", () => {
    expect(HTTP_GET_DEFAULTS).toEqual({ cacheTtlSeconds: 300, maxBytes: 1_048_576, maxRedirects: 5 });
  });
});

describe("SSRF: checkUrl refuses every fixture target", () => {
  const targets = ssrf.targets as { url: string; reason: UrlRefusal; note: string }[];

  it("the fixture has at least 40 targets", () => {
    expect(targets.length).toBeGreaterThanOrEqual(40);
  });

  for (const target of targets) {
    it(`${target.note}: ${target.url} → ${target.reason}`, () => {
      expect(checkUrl(target.url)).toEqual({ ok: false, reason: target.reason });
    });
  }

  it("every target is policy.denied by http.get even with the capability net, and nothing is fetched", async () => {
    const spy = vi.spyOn(globalThis, "fetch");
    for (const target of targets) {
      const outcome = await get({ url: target.url }, ["net"]);
      expect({ url: target.url, ok: outcome.ok, code: outcome.ok ? null : outcome.error.code }).toEqual({
        url: target.url,
        ok: false,
        code: "policy.denied",
      });
    }
    expect(spy).not.toHaveBeenCalled();
  });

  it("the denial names the reason: private address", async () => {
    expect(await get({ url: "http://2130706433/" }, ["net"])).toEqual({
      ok: false,
      error: {
        code: "policy.denied",
        message:
          "http://2130706433/ is refused: private, loopback, link-local, cloud-metadata and other non-public addresses are never fetched",
      },
    });
  });

  it("the denial names the reason: non-http scheme", async () => {
    expect(await get({ url: "file:///etc/passwd" }, ["net"])).toEqual({
      ok: false,
      error: { code: "policy.denied", message: "file:///etc/passwd is refused: http.get fetches only http:// and https:// URLs" },
    });
  });

  it("the URL check runs before the capability check", async () => {
    const outcome = await get({ url: "http://169.254.169.254/latest/meta-data/" }, []);
    expect(outcome.ok ? null : outcome.error.message).toBe(
      "http://169.254.169.254/latest/meta-data/ is refused: private, loopback, link-local, cloud-metadata and other non-public addresses are never fetched",
    );
  });

  it("a malformed URL is tool.input_invalid, not policy.denied", async () => {
    for (const url of ["not a url", "http://[fe80::1%25eth0]/", "http://1.2.3.4.5/", "http://a..b.example/"]) {
      expect(await get({ url }, ["net"])).toEqual({ ok: false, error: { code: "tool.input_invalid", message: "url is not a valid URL" } });
    }
  });

  it("public URLs pass: default ports, 80/443 on either scheme, public IP literals, fragment dropped", () => {
    const accepted: [string, string, string][] = [
      ["https://example.com/a?b=1#frag", "https://example.com/a?b=1", "example.com"],
      ["http://example.com:80/", "http://example.com/", "example.com"],
      ["https://example.com:443/", "https://example.com/", "example.com"],
      ["http://example.com:443/", "http://example.com:443/", "example.com"],
      ["https://example.com:80/", "https://example.com:80/", "example.com"],
      ["https://EXAMPLE.com./x", "https://example.com./x", "example.com"],
      ["http://93.184.216.34/", "http://93.184.216.34/", "93.184.216.34"],
      ["http://[2606:4700::1111]/", "http://[2606:4700::1111]/", "[2606:4700::1111]"],
      ["https://bücher.de/", "https://xn--bcher-kva.de/", "xn--bcher-kva.de"],
    ];
    for (const [raw, href, host] of accepted) {
      const result = checkUrl(raw);
      expect(result.ok ? { href: result.url.href, host: result.host } : result).toEqual({ href, host });
    }
  });

  it("IPv4 ranges end where they should: 172.32.0.1, 100.128.0.1 and 169.255.0.1 are public", () => {
    for (const ip of [
      "172.15.255.255",
      "172.32.0.1",
      "100.63.255.255",
      "100.128.0.1",
      "169.253.255.255",
      "169.255.0.1",
      "223.255.255.255",
    ]) {
      expect(checkUrl(`http://${ip}/`).ok).toBe(true);
    }
  });
});

describe("S4 §4 capabilities: net or net:<domain>, with the global allowlist", () => {
  it("no capability → denied, naming the capability to grant and how to request it", async () => {
    const host = unique("ok");
    expect(await get({ url: `https://${host}/` }, [])).toEqual({ ok: false, error: { code: "policy.denied", message: needs(host) } });
    expect(await requestsTo(host)).toEqual([]);
  });

  it("unrelated capabilities do not count", async () => {
    const host = unique("ok");
    expect(await get({ url: `https://${host}/` }, ["shell", "net:example.com", "netx", "net:"])).toEqual({
      ok: false,
      error: { code: "policy.denied", message: needs(host) },
    });
  });

  it('"net" → allowed', async () => {
    const host = unique("ok");
    expect(await get({ url: `https://${host}/page` }, ["net"])).toEqual({
      ok: true,
      output: {
        url: `https://${host}/page`,
        final_url: `https://${host}/page`,
        status: 200,
        content_type: "text/plain; charset=utf-8",
        body: `hello from ${host}/page`,
        truncated: false,
        cached: false,
      },
      summary: `200 from https://${host}/page, ${`hello from ${host}/page`.length} bytes`,
    });
    expect(await requestsTo(host)).toEqual([expect.objectContaining({ method: "GET", path: "/page" })]);
  });

  it('"net:<domain>" → the domain itself and its subdomains are allowed', async () => {
    const host = unique("ok");
    const sub = await get({ url: `https://${host}/` }, ["net:web.test"]);
    expect(sub.ok && (sub.output as { status: number }).status).toBe(200);
    const exact = await get({ url: `https://${host}/` }, [`net:${host}`]);
    expect(exact.ok && (exact.output as { status: number }).status).toBe(200);
  });

  it('"net:<domain>" does not cover look-alikes or parents', () => {
    expect(capabilityDecision("badexample.com", ["net:example.com"], null)).toEqual({ allowed: false, reason: "no_capability" });
    expect(capabilityDecision("example.com.evil.test", ["net:example.com"], null)).toEqual({ allowed: false, reason: "no_capability" });
    expect(capabilityDecision("example.com", ["net:api.example.com"], null)).toEqual({ allowed: false, reason: "no_capability" });
    expect(capabilityDecision("api.example.com", ["net:Example.COM."], null)).toEqual({ allowed: true, via: "net:Example.COM." });
    expect(capabilityDecision("xn--bcher-kva.de", ["net:bücher.de"], null)).toEqual({ allowed: true, via: "net:bücher.de" });
  });

  it("IP literals match only exactly", () => {
    expect(capabilityAllows("93.184.216.34", ["net:93.184.216.34"], null)).toBe(true);
    expect(capabilityAllows("1.93.184.216.34", ["net:93.184.216.34"], null)).toBe(false);
    expect(capabilityAllows("[2606:4700::1111]", ["net:[2606:4700::1111]"], null)).toBe(true);
  });

  it('allowlist configured: "net" allows allowlisted domains (and their subdomains) only', async () => {
    const tool = createHttpGet({ allowlist: ["web.test"] });
    const host = unique("ok");
    const allowed = await get({ url: `https://${host}/` }, ["net"], tool);
    expect(allowed.ok && (allowed.output as { status: number }).status).toBe(200);

    const narrow = createHttpGet({ allowlist: ["docs.example.com"] });
    const other = unique("ok");
    expect(await get({ url: `https://${other}/` }, ["net"], narrow)).toEqual({
      ok: false,
      error: { code: "policy.denied", message: notAllowlisted(other) },
    });
    expect(await requestsTo(other)).toEqual([]);
    expect(capabilityDecision("example.com", ["net"], [])).toEqual({ allowed: false, reason: "not_allowlisted" });
  });

  it('allowlist configured: "net:<domain>" overrides the allowlist', async () => {
    const tool = createHttpGet({ allowlist: ["docs.example.com"] });
    const host = unique("ok");
    const outcome = await get({ url: `https://${host}/` }, ["net:web.test"], tool);
    expect(outcome.ok && (outcome.output as { status: number }).status).toBe(200);
    expect(capabilityDecision(host, ["net:web.test"], [])).toEqual({ allowed: true, via: "net:web.test" });
  });

  it("allowlist configured, no capability → denied as no capability (the allowlist grants nothing by itself)", async () => {
    const tool = createHttpGet({ allowlist: ["web.test"] });
    const host = unique("ok");
    expect(await get({ url: `https://${host}/` }, [], tool)).toEqual({ ok: false, error: { code: "policy.denied", message: needs(host) } });
  });
});

describe("S4 §4 redirects: followed manually, every hop checked again", () => {
  it("a redirect to a permitted URL is followed; final_url is where it landed", async () => {
    const from = unique("redirect");
    const to = unique("ok");
    const outcome = await get({ url: `https://${from}/to?u=${encodeURIComponent(`https://${to}/landed`)}` }, ["net"]);
    expect(outcome.ok && outcome.output).toEqual({
      url: `https://${from}/to?u=${encodeURIComponent(`https://${to}/landed`)}`,
      final_url: `https://${to}/landed`,
      status: 200,
      content_type: "text/plain; charset=utf-8",
      body: `hello from ${to}/landed`,
      truncated: false,
      cached: false,
    });
    expect((await requestsTo(from)).length).toBe(1);
    expect((await requestsTo(to)).length).toBe(1);
  });

  it("a redirect to a private address is denied at the hop, and the hop is never fetched", async () => {
    const from = unique("redirect");
    const spy = vi.spyOn(globalThis, "fetch");
    const outcome = await get({ url: `https://${from}/to?u=${encodeURIComponent("http://169.254.169.254/latest/meta-data/")}` }, ["net"]);
    expect(outcome).toEqual({
      ok: false,
      error: {
        code: "policy.denied",
        message: `redirect from https://${from}/to?u=http%3A%2F%2F169.254.169.254%2Flatest%2Fmeta-data%2F to http://169.254.169.254/latest/meta-data/ is refused: private, loopback, link-local, cloud-metadata and other non-public addresses are never fetched`,
      },
    });
    expect(spy.mock.calls.map((c) => String(c[0]))).toEqual([`https://${from}/to?u=http%3A%2F%2F169.254.169.254%2Flatest%2Fmeta-data%2F`]);
  });

  it("redirects to localhost, a decimal IP, IPv4-mapped IPv6 and file: are denied at the hop", async () => {
    const cases: [string, string][] = [
      ["http://localhost/admin", "internal_hostname"],
      ["http://2130706433/", "private_address"],
      ["http://[::ffff:a9fe:a9fe]/", "private_address"],
      ["file:///etc/passwd", "scheme"],
      ["http://example.com:8080/", "port"],
      ["http://user:pw@example.com/", "userinfo"],
    ];
    for (const [target] of cases) {
      const from = unique("redirect");
      const outcome = await get({ url: `https://${from}/to?u=${encodeURIComponent(target)}&status=307` }, ["net"]);
      expect({ target, code: outcome.ok ? null : outcome.error.code }).toEqual({ target, code: "policy.denied" });
    }
  });

  it("a relative Location resolves against the hop's URL", async () => {
    const from = unique("redirect");
    const outcome = await get({ url: `https://${from}/to?u=${encodeURIComponent("/to?u=x")}` }, ["net"]);
    // /to?u=x → Location `x` resolves to https://<from>/x, which the mock answers 400 (no `u`) with text.
    expect(outcome.ok && (outcome.output as { final_url: string }).final_url).toBe(`https://${from}/x`);
  });

  it("a redirect to a domain the capabilities do not cover is denied at the hop, naming the missing capability", async () => {
    const from = unique("redirect");
    const to = unique("ok");
    const outcome = await get({ url: `https://${from}/to?u=${encodeURIComponent(`https://${to}/`)}` }, [`net:${from}`]);
    expect(outcome).toEqual({ ok: false, error: { code: "policy.denied", message: `redirect to https://${to}/ refused: ${needs(to)}` } });
    expect(await requestsTo(to)).toEqual([]);
  });

  it("at most 5 redirects are followed", async () => {
    const host = unique("redirect");
    expect(await get({ url: `https://${host}/loop` }, ["net"])).toEqual({
      ok: false,
      error: { code: "internal.error", message: `http.get stopped at https://${host}/loop: more than 5 redirects` },
    });
    expect((await requestsTo(host)).length).toBe(6);
  });

  it("maxRedirects is configurable", async () => {
    const host = unique("redirect");
    const outcome = await get({ url: `https://${host}/loop` }, ["net"], createHttpGet({ maxRedirects: 0 }));
    expect(outcome.ok ? null : outcome.error.code).toBe("internal.error");
    expect((await requestsTo(host)).length).toBe(1);
  });
});

describe("S4 §4 cache: SQLite (D1) with TTL, after the policy check", () => {
  it("a second call is served from the cache: cached:true and one request upstream", async () => {
    const host = unique("ok");
    const url = `https://${host}/c`;
    const first = await get({ url }, ["net"]);
    expect(first.ok && (first.output as { cached: boolean }).cached).toBe(false);
    const second = await get({ url }, ["net"]);
    expect(second).toEqual({
      ok: true,
      output: {
        url,
        final_url: url,
        status: 200,
        content_type: "text/plain; charset=utf-8",
        body: `hello from ${host}/c`,
        truncated: false,
        cached: true,
      },
      summary: `200 from ${url}, ${`hello from ${host}/c`.length} bytes (cached)`,
    });
    expect((await requestsTo(host)).length).toBe(1);
    const row = await env.DB.prepare(
      "SELECT status, content_type, body, truncated, expires_at - fetched_at AS ttl FROM http_cache WHERE url = ?",
    )
      .bind(url)
      .first();
    expect(row).toEqual({
      status: 200,
      content_type: "text/plain; charset=utf-8",
      body: `hello from ${host}/c`,
      truncated: 0,
      ttl: 300_000,
    });
  });

  it("after the capability is revoked, the cached URL is denied", async () => {
    const host = unique("ok");
    const url = `https://${host}/secret`;
    expect((await get({ url }, ["net"])).ok).toBe(true);
    expect(await get({ url }, [])).toEqual({ ok: false, error: { code: "policy.denied", message: needs(host) } });
    expect(await get({ url }, ["net:example.com"])).toEqual({ ok: false, error: { code: "policy.denied", message: needs(host) } });
    expect((await requestsTo(host)).length).toBe(1);
  });

  it("a cached URL is denied once the allowlist no longer covers it for net", async () => {
    const host = unique("ok");
    const url = `https://${host}/a`;
    expect((await get({ url }, ["net"], createHttpGet({ allowlist: ["web.test"] }))).ok).toBe(true);
    expect(await get({ url }, ["net"], createHttpGet({ allowlist: ["example.com"] }))).toEqual({
      ok: false,
      error: { code: "policy.denied", message: notAllowlisted(host) },
    });
  });

  it("use_cache:false bypasses reading but still writes", async () => {
    const host = unique("ok");
    const url = `https://${host}/n`;
    await get({ url }, ["net"]);
    const fresh = await get({ url, use_cache: false }, ["net"]);
    expect(fresh.ok && (fresh.output as { cached: boolean }).cached).toBe(false);
    expect((await requestsTo(host)).length).toBe(2);
    await env.DB.prepare("UPDATE http_cache SET body = 'stale copy' WHERE url = ?").bind(url).run();
    await get({ url, use_cache: false }, ["net"]);
    const row = await env.DB.prepare("SELECT body FROM http_cache WHERE url = ?").bind(url).first<{ body: string }>();
    expect(row?.body).toBe(`hello from ${host}/n`);
  });

  it("an expired row is not served (TTL)", async () => {
    const host = unique("ok");
    const url = `https://${host}/ttl`;
    await get({ url }, ["net"]);
    await env.DB.prepare("UPDATE http_cache SET expires_at = ? WHERE url = ?")
      .bind(Date.now() - 1, url)
      .run();
    const again = await get({ url }, ["net"]);
    expect(again.ok && (again.output as { cached: boolean }).cached).toBe(false);
    expect((await requestsTo(host)).length).toBe(2);
  });

  it("only 200 responses are cached", async () => {
    const host = unique("missing");
    const url = `https://${host}/gone`;
    const outcome = await get({ url }, ["net"]);
    expect(outcome.ok && outcome.output).toEqual({
      url,
      final_url: url,
      status: 404,
      content_type: "text/html",
      body: "<h1>not here</h1>",
      truncated: false,
      cached: false,
    });
    await get({ url }, ["net"]);
    expect((await requestsTo(host)).length).toBe(2);
    expect(await env.DB.prepare("SELECT url FROM http_cache WHERE url = ?").bind(url).first()).toBe(null);
  });

  it("a redirect is re-checked and re-fetched; only its final hop comes from the cache", async () => {
    const from = unique("redirect");
    const to = unique("ok");
    const url = `https://${from}/to?u=${encodeURIComponent(`https://${to}/`)}`;
    await get({ url }, ["net"]);
    const second = await get({ url }, ["net"]);
    expect(second.ok && (second.output as { cached: boolean; final_url: string })).toMatchObject({
      cached: true,
      final_url: `https://${to}/`,
    });
    expect((await requestsTo(from)).length).toBe(2);
    expect((await requestsTo(to)).length).toBe(1);
    // Revoking the final hop's domain denies the cached final hop, too.
    expect(await get({ url }, [`net:${from}`])).toEqual({
      ok: false,
      error: { code: "policy.denied", message: `redirect to https://${to}/ refused: ${needs(to)}` },
    });
  });
});

describe("S4 §4 limits: size cap, time cap, text only", () => {
  it("a body larger than 1 MiB is cut at 1 MiB: truncated:true", async () => {
    const host = unique("big");
    const outcome = await get({ url: `https://${host}/` }, ["net"]);
    const output = outcome.ok ? (outcome.output as { body: string; truncated: boolean; status: number }) : null;
    expect({ length: output?.body.length, truncated: output?.truncated, status: output?.status }).toEqual({
      length: 1_048_576,
      truncated: true,
      status: 200,
    });
    expect(outcome.ok && outcome.summary).toBe(`200 from https://${host}/, 1048576 bytes (truncated)`);
  });

  it("a body of exactly maxBytes is not truncated", async () => {
    const host = unique("big");
    const outcome = await get({ url: `https://${host}/?bytes=100` }, ["net"], createHttpGet({ maxBytes: 100 }));
    expect(outcome.ok && outcome.output).toMatchObject({ body: "a".repeat(100), truncated: false });
  });

  it("the cut falls on a UTF-8 character boundary", async () => {
    const host = unique("big");
    // "é" is two bytes: 11 bytes of them cut to 10, i.e. 5 characters.
    const outcome = await get(
      { url: `https://${host}/?bytes=200&fill=${encodeURIComponent("é")}` },
      ["net"],
      createHttpGet({ maxBytes: 11 }),
    );
    expect(outcome.ok && outcome.output).toMatchObject({ body: "ééééé", truncated: true });
  });

  it("a truncated 200 is cached with truncated=1", async () => {
    const host = unique("big");
    const url = `https://${host}/?bytes=5000`;
    const tool = createHttpGet({ maxBytes: 1000 });
    await get({ url }, ["net"], tool);
    const again = await get({ url }, ["net"], tool);
    expect(again.ok && again.output).toMatchObject({ truncated: true, cached: true });
    expect((again.ok && (again.output as { body: string }).body.length) || 0).toBe(1000);
  });

  it("ctx.timeoutMs caps the call: timeout, retryable", async () => {
    const host = unique("slow");
    const started = Date.now();
    expect(await get({ url: `https://${host}/` }, ["net"], httpGet, { timeoutMs: 200 })).toEqual({
      ok: false,
      error: { code: "timeout", message: "http.get did not finish within 200 ms or was cancelled", retryable: true },
    });
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  it("ctx.signal cancels the call: timeout", async () => {
    const host = unique("slow");
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const outcome = await get({ url: `https://${host}/` }, ["net"], httpGet, { signal: controller.signal });
    expect(outcome.ok ? null : outcome.error.code).toBe("timeout");
  });

  it("a non-text content type is refused with tool.input_invalid", async () => {
    const host = unique("binary");
    expect(await get({ url: `https://${host}/logo.png` }, ["net"])).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: `http.get returns text only; https://${host}/logo.png answered with image/png` },
    });
  });

  it("JSON is text", async () => {
    const host = unique("json");
    const outcome = await get({ url: `https://${host}/` }, ["net"]);
    expect(outcome.ok && outcome.output).toMatchObject({ status: 200, content_type: "application/json", body: '{"hello":"world"}' });
  });

  it("no content type: UTF-8 text is returned, binary is refused", async () => {
    const host = unique("notype");
    const text = await get({ url: `https://${host}/` }, ["net"]);
    expect(text.ok && text.output).toMatchObject({ content_type: null, body: "plain bytes" });
    expect(await get({ url: `https://${host}/?binary=1` }, ["net"])).toEqual({
      ok: false,
      error: {
        code: "tool.input_invalid",
        message: `http.get returns text only; https://${host}/?binary=1 answered with a binary body and no content type`,
      },
    });
  });

  it("a network failure is internal.error, retryable", async () => {
    // Miniflare's outbound service cannot drop a connection, so the runtime's failure is stubbed.
    const host = unique("ok");
    vi.spyOn(globalThis, "fetch").mockRejectedValueOnce(new TypeError("Network connection lost."));
    expect(await get({ url: `https://${host}/` }, ["net"])).toEqual({
      ok: false,
      error: { code: "internal.error", message: `http.get could not reach https://${host}/`, retryable: true },
    });
  });

  it("a connection lost mid-body is internal.error, retryable", async () => {
    const host = unique("ok");
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode("partial"));
        controller.error(new TypeError("Network connection lost."));
      },
    });
    vi.spyOn(globalThis, "fetch").mockResolvedValueOnce(new Response(body, { headers: { "content-type": "text/plain" } }));
    expect(await get({ url: `https://${host}/` }, ["net"])).toEqual({
      ok: false,
      error: { code: "internal.error", message: `http.get could not reach https://${host}/`, retryable: true },
    });
  });
});
