/**
 * Issue 20 §6: `http.get` refuses names of wildcard-DNS services (which resolve to whatever address they
 * spell, private ones included) by suffix, and names that embed a non-public IPv4 address in dotted, dashed
 * or hex form — before any capability, cache or network step.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { httpGet } from "../../src/tools/builtin/http";
import { checkUrl, embeddedIpv4, WILDCARD_DNS_SUFFIXES } from "../../src/tools/net-policy";
import type { ToolContext } from "../../src/tools/registry";

const ctx = {
  env,
  agentId: "net-wildcard",
  runId: "run_net",
  sessionKey: "agent:net-wildcard:main",
  channel: "main",
  capabilities: ["net"],
  netAllowlist: null,
  toolCallId: "t1",
  signal: new AbortController().signal,
  timeoutMs: 30_000,
} as unknown as ToolContext;

const WILDCARD_MESSAGE =
  "is refused: wildcard-DNS names that can resolve to private addresses (nip.io, sslip.io, localtest.me, lvh.me, …) and names that embed a private IPv4 address are never fetched";

/** Names that resolve (or can be made to resolve) to a private address. */
const refused = [
  "127.0.0.1.nip.io",
  "app.10.0.0.1.nip.io",
  "nip.io",
  "169.254.169.254.sslip.io",
  "10-0-0-1.sslip.io",
  "anything.sslip.io",
  "192.168.1.1.xip.io",
  "localtest.me",
  "admin.localtest.me",
  "lvh.me",
  "api.lvh.me",
  "foo.vcap.me",
  "www.lacolhost.com",
  "app.traefik.me",
  "x.local.gd",
  "x.localdev.me",
  "x.localhost.direct",
  "localho.st",
  "fuf.me",
  "7f000001.c0a80001.rbndr.us",
  "make-127.0.0.1-rebind-8.8.8.8-rr.1u.ms",
  "LVH.ME",
  "lvh.me.",
  // embedded private IPv4 under an unlisted domain
  "10.0.0.1.example.com",
  "app.192.168.0.10.example.org",
  "10-0-0-1.example.net",
  "ip-172-16-3-4.example.com",
  "svc-127-0-0-1-x.example.io",
  "0a000001.example.com",
  "7f000001.attacker.example",
  "a9fea9fe.example.com",
];

describe("ISSUE20-§6 http.get refuses wildcard-DNS names and names that embed a private IPv4", () => {
  for (const host of refused) {
    it(`ISSUE20-§6 ${host} → wildcard_dns`, () => {
      expect(checkUrl(`https://${host}/`)).toEqual({ ok: false, reason: "wildcard_dns" });
    });
  }

  it("ISSUE20-§6 *.localhost stays refused as an internal name", () => {
    expect(checkUrl("http://app.localhost/")).toEqual({ ok: false, reason: "internal_hostname" });
  });

  it("ISSUE20-§6 every listed suffix and its subdomains are refused", () => {
    for (const suffix of WILDCARD_DNS_SUFFIXES) {
      expect({ suffix, bare: checkUrl(`https://${suffix}/`), sub: checkUrl(`https://a.b.${suffix}/`) }).toEqual({
        suffix,
        bare: { ok: false, reason: "wildcard_dns" },
        sub: { ok: false, reason: "wildcard_dns" },
      });
    }
  });

  it("ISSUE20-§6 http.get answers policy.denied naming the reason, and fetches nothing", async () => {
    const spy = vi.spyOn(globalThis, "fetch");
    expect(await httpGet.handler({ url: "http://127.0.0.1.nip.io/admin" }, ctx)).toEqual({
      ok: false,
      error: { code: "policy.denied", message: `http://127.0.0.1.nip.io/admin ${WILDCARD_MESSAGE}` },
    });
    expect(await httpGet.handler({ url: "https://10-0-0-1.example.net/" }, ctx)).toEqual({
      ok: false,
      error: { code: "policy.denied", message: `https://10-0-0-1.example.net/ ${WILDCARD_MESSAGE}` },
    });
    expect(spy).not.toHaveBeenCalled();
    spy.mockRestore();
  });

  it("ISSUE20-§6 public names, including ones that embed a public IPv4, still pass", () => {
    for (const host of [
      "example.com",
      "nip.io.example.com",
      "notnip.io",
      "mylvh.me",
      "ec2-52-1-2-3.compute-1.amazonaws.com",
      "8.8.8.8.example.com",
      "deadbeef.example.com",
      "build-2024-01-15.example.com",
    ])
      expect({ host, ok: checkUrl(`https://${host}/`).ok }).toEqual({ host, ok: true });
  });

  it("ISSUE20-§6 embeddedIpv4 reads dotted, dashed and hex forms", () => {
    const dotted = (s: string) => s.split(".").reduce((n, p) => n * 256 + Number(p), 0);
    expect(embeddedIpv4("a.10.0.0.1.b")).toEqual([dotted("10.0.0.1")]);
    expect(embeddedIpv4("ip-172-16-3-4.b")).toEqual([dotted("172.16.3.4")]);
    expect(embeddedIpv4("7f000001.b")).toEqual([dotted("127.0.0.1")]);
    expect(embeddedIpv4("example.com")).toEqual([]);
  });
});
