/**
 * Network policy for `http.get` (S4 §4), pure and synchronous: which URLs may
 * be fetched at all (SSRF protection) and whether a session's capabilities
 * (S4 §1.1) allow a host. `checkUrl` is the gateway's one outbound URL check
 * (issue 33, D-088): `http.get`, job and completion webhooks, usage alert
 * webhooks and, through `checkPublicHttpsUrl`, the channels' API base URLs and
 * reply URL all go through it.
 *
 * `checkUrl` trusts the WHATWG URL parser to normalise the host first — it
 * turns `2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `%31%32%37.0.0.1` and
 * full-width digits into `127.0.0.1`, lower-cases and IDNA-maps names
 * (`ⓛocalhost` → `localhost`), and writes IPv6 in one canonical hex form — and
 * then judges only that normalised host, so no spelling reaches `fetch`
 * unchecked. Checks run in a fixed order, so each URL has one reason:
 * scheme → userinfo → port → host.
 *
 * Decisions:
 * - Schemes: `http:` and `https:` only.
 * - Userinfo (`user:pass@host`) is refused outright: it is the classic way to
 *   make a URL look like it points somewhere else, and no public page needs it.
 * - Ports: only the defaults and 80/443 (`http://x:443/` and `https://x:80/`
 *   are allowed; every other port is refused). Non-standard ports are how SSRF
 *   reaches internal services (Redis 6379, SSH 22, admin consoles 8080).
 * - IP literals: IPv4 is refused in every special-purpose range (RFC 6890 /
 *   IANA registry: this-network, private, CGNAT, loopback, link-local — incl.
 *   169.254.169.254 — IETF protocol assignments, documentation, benchmarking,
 *   6to4 relay, multicast, reserved, broadcast). IPv6 is allowed only in global
 *   unicast 2000::/3, minus its special blocks (2001::/23 incl. Teredo,
 *   2001:db8::/32, 2002::/16 6to4, 3fff::/20); so `::1`, `::`, fc00::/7,
 *   fe80::/10, multicast, and every IPv4-embedding form (`::ffff:a.b.c.d`,
 *   `::a.b.c.d`, 64:ff9b::/96 and 64:ff9b:1::/48 NAT64, 6to4, Teredo) are
 *   refused whatever IPv4 address they carry.
 * - Names: `localhost`, `*.localhost`, `*.local`, `*.internal` (incl.
 *   `metadata.google.internal`), `*.localdomain`, `*.arpa` (incl. `home.arpa`),
 *   `*.lan`, `*.home`, `*.corp`, `*.intranet`, `*.svc` (Kubernetes services),
 *   `*.consul`, `metadata`, `instance-data` and every single-label name (they
 *   resolve through internal search domains) are refused. Trailing dots are
 *   ignored (`localhost.` is `localhost`).
 * - Special-use names that no public host has (RFC 6761, RFC 7686, RFC 9476):
 *   `*.test`, `*.example`, `*.invalid`, `*.onion`, `*.alt` — a resolver that
 *   answers for them is a private one. Checked after the wildcard-DNS rules,
 *   so a name embedding a private address keeps that reason. `*.test` is the
 *   test suite's mock network: `allowTestTldForTests` lets it through, and
 *   nothing else (D-088).
 * - Wildcard-DNS services whose names resolve to any address they spell
 *   (`127.0.0.1.nip.io`, `10-0-0-1.sslip.io`, `localtest.me`, `*.lvh.me`, …)
 *   are refused by suffix (WILDCARD_DNS_SUFFIXES, a maintained list), and so is
 *   any name that embeds a non-public IPv4 address: four numeric labels
 *   (`app.10.0.0.1.example`), a dashed quad inside a label (`ip-192-168-1-1`)
 *   or a label of exactly eight hex digits (`7f000001.rbndr.us`).
 * - Not covered here: a public name whose DNS points at a private address.
 *   Workers have no resolver to ask before `fetch`; the Workers runtime does
 *   not route to private networks, and every redirect hop is checked again. A
 *   self-hosted workerd does route there: it needs DNS-level egress control
 *   (docs/tools.md).
 */

/** Why `checkUrl` refused a URL. */
export type UrlRefusal =
  | "invalid_url"
  | "too_long"
  | "scheme"
  | "userinfo"
  | "port"
  | "private_address"
  | "internal_hostname"
  | "wildcard_dns"
  | "special_use_name";

export type UrlCheck = { ok: true; url: URL; host: string } | { ok: false; reason: UrlRefusal };

export const MAX_URL_LENGTH = 2048;

const ALLOWED_PORTS = new Set(["", "80", "443"]);

/** Exact names refused (after lower-casing and dropping trailing dots). */
const INTERNAL_NAMES = new Set(["localhost", "metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"]);

/** Name suffixes refused: the name itself and everything under it. */
const INTERNAL_SUFFIXES = ["localhost", "local", "internal", "localdomain", "arpa", "lan", "home", "corp", "intranet", "svc", "consul"];

/** Special-use top-level names (IANA's Special-Use Domain Names registry) that no public host is under. */
const SPECIAL_USE_SUFFIXES = ["test", "example", "invalid", "onion", "alt"];

/**
 * The one escape hatch (D-088): while on, names under `.test` (RFC 6761 §6.2, reserved for testing and never
 * delegated) pass, so the test suite can address its mock network (test/support/outbound.ts). Off unless a test
 * turns it on (test/support/test-hosts.ts, a setup file of the workers project); no module under src/ or scripts/
 * calls it (test/build/url-escape-hatch.test.ts), so no configuration, secret or request can open it. It admits
 * `.test` and nothing else: loopback, private addresses and every other refused name stay refused.
 */
let testTldAllowed = false;

/** Turns the `.test` escape hatch on or off in this isolate; for tests only (see `testTldAllowed`). */
export function allowTestTldForTests(on: boolean): void {
  testTldAllowed = on;
}

/**
 * Domains (and all their subdomains) of public wildcard-DNS and DNS-rebinding services, and of names that
 * resolve to loopback for everyone: a name under one of them can point anywhere, private addresses included.
 */
export const WILDCARD_DNS_SUFFIXES: readonly string[] = [
  "nip.io",
  "sslip.io",
  "xip.io",
  "localtest.me",
  "lvh.me",
  "vcap.me",
  "lacolhost.com",
  "traefik.me",
  "local.gd",
  "localdev.me",
  "localhost.direct",
  "localho.st",
  "fuf.me",
  "rbndr.us",
  "1u.ms",
];

/**
 * Parses and judges a URL for `http.get`. On success `url` is the normalised
 * URL without its fragment (never sent anyway) and `host` the normalised host:
 * lower-case, no trailing dot, IPv6 in brackets.
 */
export function checkUrl(raw: string): UrlCheck {
  if (raw.length > MAX_URL_LENGTH) return { ok: false, reason: "too_long" };
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: "invalid_url" };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { ok: false, reason: "scheme" };
  if (url.username !== "" || url.password !== "") return { ok: false, reason: "userinfo" };
  if (!ALLOWED_PORTS.has(url.port)) return { ok: false, reason: "port" };

  const host = canonicalHost(url.hostname);
  if (host === null) return { ok: false, reason: "invalid_url" };
  const verdict = judgeHost(host);
  if (verdict) return { ok: false, reason: verdict };
  url.hash = "";
  return { ok: true, url, host };
}

/**
 * The host without trailing dots, parsed again: `127.0.0.1..` is a "name" to
 * the URL parser, but without its dots it is the IPv4 address it looks like.
 */
function canonicalHost(hostname: string): string | null {
  if (hostname.startsWith("[")) return hostname;
  const stripped = hostname.replace(/\.+$/, "");
  if (stripped === "") return null;
  if (stripped === hostname) return hostname;
  try {
    const again = new URL(`http://${stripped}/`).hostname;
    return again.endsWith(".") ? null : again;
  } catch {
    return null;
  }
}

function judgeHost(host: string): UrlRefusal | null {
  if (host.startsWith("[")) {
    const v6 = parseIpv6(host.slice(1, -1));
    if (!v6) return "invalid_url";
    return ipv6IsPublic(v6) ? null : "private_address";
  }
  const v4 = parseIpv4(host);
  if (v4 !== null) return ipv4IsPublic(v4) ? null : "private_address";
  if (host.split(".").some((label) => label === "")) return "invalid_url";
  if (INTERNAL_NAMES.has(host)) return "internal_hostname";
  if (!host.includes(".")) return "internal_hostname";
  if (INTERNAL_SUFFIXES.some((suffix) => host === suffix || host.endsWith(`.${suffix}`))) return "internal_hostname";
  if (WILDCARD_DNS_SUFFIXES.some((suffix) => host === suffix || host.endsWith(`.${suffix}`))) return "wildcard_dns";
  if (embeddedIpv4(host).some((addr) => !ipv4IsPublic(addr))) return "wildcard_dns";
  const special = SPECIAL_USE_SUFFIXES.find((suffix) => host === suffix || host.endsWith(`.${suffix}`));
  if (special !== undefined && !(special === "test" && testTldAllowed)) return "special_use_name";
  return null;
}

/** What each refusal means for a URL the gateway sends to, as "<key>: <words>" (the admin's and the API's 400s). */
export const URL_RULES: Record<UrlRefusal, string> = {
  invalid_url: "is not a valid URL",
  too_long: `must be at most ${MAX_URL_LENGTH} characters`,
  scheme: "must be an https URL",
  userinfo: "must not carry credentials (user:password@)",
  port: "must use the default https port",
  private_address: "must not point at a private, loopback or link-local address",
  internal_hostname: "must not point at an internal host name",
  wildcard_dns: "must not use a wildcard-DNS name that maps to an address",
  special_use_name: "must not use a special-use domain name (.test, .example, .invalid, .onion, .alt)",
};

/**
 * `checkUrl`, then https only: the rule for every URL the gateway posts to or calls with a credential (completion
 * webhooks, channel API bases and reply URLs). A refusal is `URL_RULES`' words (checkUrl's order, https last).
 */
export function checkPublicHttpsUrl(raw: string): { ok: true; url: URL } | { ok: false; problem: string } {
  const checked = checkUrl(raw);
  if (!checked.ok) return { ok: false, problem: URL_RULES[checked.reason] };
  if (checked.url.protocol !== "https:") return { ok: false, problem: URL_RULES.scheme };
  return { ok: true, url: checked.url };
}

/**
 * The IPv4 addresses a name spells out, as wildcard DNS answers them: four numeric labels in a row
 * (`10.0.0.1.x.io`), a dashed quad inside a label (`app-10-0-0-1.x.io`), a label of eight hex digits (`0a000001`).
 */
export function embeddedIpv4(host: string): number[] {
  const labels = host.split(".");
  const found: number[] = [];
  for (let i = 0; i + 4 <= labels.length; i++) {
    const v4 = parseIpv4(labels.slice(i, i + 4).join("."));
    if (v4 !== null) found.push(v4);
  }
  for (const label of labels) {
    for (const m of label.matchAll(/(?<![0-9])(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?![0-9])/g)) {
      const v4 = parseIpv4(m.slice(1, 5).join("."));
      if (v4 !== null) found.push(v4);
    }
    if (/^[0-9a-f]{8}$/.test(label)) found.push(Number.parseInt(label, 16) >>> 0);
  }
  return found;
}

/** A dotted-quad (the only IPv4 form the URL parser emits) as a 32-bit number. */
function parseIpv4(host: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return null;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return null;
  return (((parts[0] ?? 0) << 24) | ((parts[1] ?? 0) << 16) | ((parts[2] ?? 0) << 8) | (parts[3] ?? 0)) >>> 0;
}

/** IPv4 special-purpose blocks (IANA), as [network, prefix length]. */
const IPV4_BLOCKED: readonly [string, number][] = [
  ["0.0.0.0", 8], // this network, incl. 0.0.0.0 (unspecified)
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // CGNAT shared address space
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local, incl. cloud metadata 169.254.169.254
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation TEST-NET-1
  ["192.31.196.0", 24], // AS112
  ["192.52.193.0", 24], // AMT
  ["192.88.99.0", 24], // 6to4 relay anycast
  ["192.168.0.0", 16], // private
  ["192.175.48.0", 24], // AS112 direct delegation
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation TEST-NET-2
  ["203.0.113.0", 24], // documentation TEST-NET-3
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, incl. 255.255.255.255 broadcast
];

const IPV4_BLOCKED_MASKS = IPV4_BLOCKED.map(([net, bits]) => {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return [(parseIpv4(net) ?? 0) & mask, mask] as const;
});

function ipv4IsPublic(addr: number): boolean {
  return !IPV4_BLOCKED_MASKS.some(([net, mask]) => (addr & mask) >>> 0 === net >>> 0);
}

/** The eight 16-bit groups of an IPv6 address in the URL parser's serialisation (hex groups, at most one `::`). */
function parseIpv6(text: string): number[] | null {
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const groups = (part: string | undefined) => (part ? part.split(":") : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  const out: number[] = [];
  for (const g of all) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
    out.push(Number.parseInt(g, 16));
  }
  return out;
}

function ipv6IsPublic(g: number[]): boolean {
  const [a = 0, b = 0] = g;
  // Global unicast 2000::/3 only: this refuses ::, ::1, ::ffff:0:0/96, ::a.b.c.d, 64:ff9b::/96,
  // 64:ff9b:1::/48, 100::/64, fc00::/7, fe80::/10, fec0::/10 and ff00::/8 in one rule.
  if ((a & 0xe000) !== 0x2000) return false;
  if (a === 0x2001 && b < 0x0200) return false; // 2001::/23 IETF protocol assignments, incl. Teredo 2001::/32
  if (a === 0x2001 && b === 0x0db8) return false; // documentation
  if (a === 0x2002) return false; // 6to4 (embeds an IPv4 address)
  if ((a & 0xfff0) === 0x3ff0) return false; // 3fff::/20 documentation
  return true;
}

/** Why a capability check failed: no `net*` capability covers the host, or only `net`, which the allowlist limits. */
export type CapabilityDecision = { allowed: true; via: string } | { allowed: false; reason: "no_capability" | "not_allowlisted" };

/**
 * S4 §4: `http.get` is allowed if the session holds `net` or `net:<domain>`;
 * with a global allowlist configured, `net` allows only allowlisted domains,
 * and `net:<domain>` overrides the allowlist.
 *
 * Matching (here and for allowlist entries): a domain covers itself and its
 * subdomains — `net:example.com` allows `example.com` and `api.example.com`,
 * never `badexample.com`. Domains are compared after the same normalisation as
 * hosts (lower case, IDNA/punycode, no trailing dot). IP literals match only
 * exactly (`net:93.184.216.34`, `net:[2606:2800::1]`).
 */
export function capabilityDecision(host: string, granted: readonly string[], allowlist: readonly string[] | null): CapabilityDecision {
  const target = host.replace(/\.+$/, "").toLowerCase();
  for (const cap of granted) {
    if (!cap.startsWith("net:")) continue;
    const domain = normaliseDomain(cap.slice("net:".length));
    if (domain && domainCovers(domain, target)) return { allowed: true, via: cap };
  }
  if (!granted.includes("net")) return { allowed: false, reason: "no_capability" };
  if (allowlist === null) return { allowed: true, via: "net" };
  const listed = allowlist.some((entry) => {
    const domain = normaliseDomain(entry);
    return domain !== null && domainCovers(domain, target);
  });
  return listed ? { allowed: true, via: "net" } : { allowed: false, reason: "not_allowlisted" };
}

/** Whether the granted capabilities allow fetching from `host` (see `capabilityDecision`). */
export function capabilityAllows(host: string, granted: readonly string[], allowlist: readonly string[] | null): boolean {
  return capabilityDecision(host, granted, allowlist).allowed;
}

/** A capability or allowlist domain in host form, or null when it is not a host (then it matches nothing). */
function normaliseDomain(raw: string): string | null {
  const trimmed = raw.trim().replace(/\.+$/, "");
  if (trimmed === "" || /[/?#@:\s]/.test(trimmed.replace(/^\[.*\]$/, ""))) return null;
  try {
    const url = new URL(`http://${trimmed}/`);
    return url.hostname.replace(/\.+$/, "");
  } catch {
    return null;
  }
}

function domainCovers(domain: string, host: string): boolean {
  if (host === domain) return true;
  // Subdomains only for names: an IP literal (v4 dotted quad or bracketed v6) covers just itself.
  if (domain.startsWith("[") || parseIpv4(domain) !== null) return false;
  return host.endsWith(`.${domain}`);
}
