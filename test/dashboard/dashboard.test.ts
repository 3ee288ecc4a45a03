/**
 * The operator dashboard at /admin and the API reference at /docs (DESIGN §3; issue 11 items 2–3): pages the Worker
 * serves itself — a static HTML shell under a strict CSP, one script and one stylesheet each, content-hashed and
 * served from the Worker, no data and no token in the page, and only documented API routes called by the script.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ADMIN_API, DOCS_API } from "../../src/dashboard/api-routes";
import { DASHBOARD_ASSETS } from "../../src/generated/dashboard-assets";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";

const app = createApp({ logger: createLogger("error") });
const ADMIN = "test-admin-token-0123456789abcdef";

const get = (path: string, headers: Record<string, string> = {}) => app.request(`https://gateway.test${path}`, { headers }, env);

/** A bundled asset's text as the Worker serves it (its bytes are Workers Static Assets, read through ASSETS). */
async function served(name: keyof typeof DASHBOARD_ASSETS): Promise<string> {
  const res = await get(`/${name.slice(0, name.indexOf("."))}/assets/${DASHBOARD_ASSETS[name].file}`);
  expect(res.status).toBe(200);
  return res.text();
}

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

const PAGES = [
  { path: "/admin", script: DASHBOARD_ASSETS["admin.js"], style: DASHBOARD_ASSETS["admin.css"] },
  { path: "/docs", script: DASHBOARD_ASSETS["docs.js"], style: DASHBOARD_ASSETS["docs.css"] },
] as const;

async function sha256Hex(bytes: ArrayBuffer): Promise<string> {
  return [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function sha256Base64(bytes: ArrayBuffer): Promise<string> {
  return btoa(String.fromCharCode(...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))));
}

describe("GET /admin and GET /docs: static shells under a strict CSP", () => {
  for (const { path } of PAGES) {
    it(`${path} answers 200 text/html with exactly the CSP, nosniff, no-referrer, DENY and no-store`, async () => {
      const res = await get(path);
      expect(res.status).toBe(200);
      expect(res.headers.get("Content-Type")).toBe("text/html; charset=utf-8");
      expect(res.headers.get("Content-Security-Policy")).toBe(CSP);
      expect(res.headers.get("X-Content-Type-Options")).toBe("nosniff");
      expect(res.headers.get("Referrer-Policy")).toBe("no-referrer");
      expect(res.headers.get("X-Frame-Options")).toBe("DENY");
      expect(res.headers.get("Cache-Control")).toBe("no-store");
      expect(res.headers.get("Set-Cookie")).toBeNull();
      expect((await res.text()).startsWith('<!doctype html><html lang="en">')).toBe(true);
    });
  }

  for (const { path, script, style } of PAGES) {
    it(`${path} has no inline script, style or handler, and loads exactly its one script and one stylesheet, same-origin and SRI-pinned`, async () => {
      const page = await (await get(path)).text();
      // Every <script> has a src and an empty body; no <style> element, no style= attribute, no on…= handler, no javascript: URL.
      const scripts = [...page.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)];
      expect(scripts.map((m) => [m[1], m[2]])).toEqual([
        [` src="${path}/assets/${script.file}" integrity="${script.integrity}" defer=""`, ""],
      ]);
      expect(page).not.toMatch(/<style\b/i);
      expect(page).not.toMatch(/\sstyle\s*=/i);
      expect(page).not.toMatch(/\son[a-z]+\s*=/i);
      expect(page).not.toMatch(/javascript:/i);
      const stylesheets = [...page.matchAll(/<link rel="stylesheet" href="([^"]+)" integrity="([^"]+)"/g)].map((m) => [m[1], m[2]]);
      expect(stylesheets).toEqual([[`${path}/assets/${style.file}`, style.integrity]]);
      // Every URL the page names is on this origin (the icon is an empty data: URL, allowed by img-src).
      const urls = [...page.matchAll(/\s(?:src|href|action)="([^"]*)"/g)].map((m) => m[1] as string);
      for (const url of urls) expect(url, url).toMatch(/^(\/(?!\/)|#|data:,$)/);
    });
  }

  it("/admin has the sign-in form, the status header, the navigation and the view container the browser tests drive", async () => {
    const page = await (await get("/admin")).text();
    expect(page).toContain('<form id="signin" autocomplete="off">');
    expect(page).toContain('<input id="token" name="token" type="password" required="" autocomplete="off" spellcheck="false"/>');
    expect(page).toContain('<button id="signin-submit" type="submit">');
    expect(page).toContain('<p id="signin-error" role="alert" hidden=""></p>');
    expect(page).toContain('<code id="status-model">');
    expect(page).toContain('<code id="status-provider">');
    expect(page).toContain('<button id="signout" type="button">');
    expect([...page.matchAll(/<a href="([^"]+)" data-view="([^"]+)">/g)].map((m) => [m[1], m[2]])).toEqual(
      ["runs", "usage", "sessions", "approvals", "jobs", "audit", "config", "secrets", "env", "keys"].map((v) => [`#/${v}`, v]),
    );
    expect(page).toContain('<main id="view"></main>');
  });

  it("the pages need no token, and carry none: with a bearer token, a cookie and a token in the query the bytes are the same", async () => {
    for (const { path } of PAGES) {
      const bare = await (await get(path)).text();
      const res = await get(`${path}?token=${ADMIN}`, { Authorization: `Bearer ${ADMIN}`, Cookie: `session=${ADMIN}` });
      expect(res.status).toBe(200);
      const page = await res.text();
      expect(page).toBe(bare);
      for (const value of Object.values(env as unknown as Record<string, unknown>)) {
        if (typeof value === "string" && value.length >= 16) expect(page.includes(value), "a configured secret in the page").toBe(false);
      }
    }
  });

  it("/admin/ and /docs/ redirect to the page (301)", async () => {
    for (const { path } of PAGES) {
      const res = await get(`${path}/`);
      expect(res.status).toBe(301);
      expect(res.headers.get("Location")).toBe(path);
    }
  });
});

describe("/admin/assets and /docs/assets: content-hashed, served by the Worker", () => {
  for (const { path, script, style } of PAGES) {
    for (const asset of [script, style]) {
      it(`${path}/assets/${asset.file.replace(/\.[0-9a-f]{16}\./, ".<hash>.")}: its content type, ETag = sha256 of the bytes, a year-long immutable cache`, async () => {
        const res = await get(`${path}/assets/${asset.file}`);
        expect(res.status).toBe(200);
        const bytes = await res.arrayBuffer();
        const hex = await sha256Hex(bytes);
        expect(res.headers.get("Content-Type")).toBe(
          asset.file.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8",
        );
        expect(res.headers.get("ETag")).toBe(`"${hex}"`);
        expect(hex).toBe(asset.sha256);
        expect(asset.file).toBe(`${asset.file.split(".")[0]}.${hex.slice(0, 16)}.${asset.file.split(".")[2]}`);
        expect(`sha256-${await sha256Base64(bytes)}`).toBe(asset.integrity);
        expect(bytes.byteLength).toBe(asset.bytes);
        expect(res.headers.get("Cache-Control")).toBe("public, max-age=31536000, immutable");
        expect(res.headers.get("X-Content-Type-Options")).toBe("nosniff");

        const again = await get(`${path}/assets/${asset.file}`, { "If-None-Match": `"${hex}"` });
        expect(again.status).toBe(304);
        expect(again.headers.get("ETag")).toBe(`"${hex}"`);
        expect(await again.text()).toBe("");
      });
    }
  }

  it("the Worker bundle carries only the assets' names and digests; the bytes are Workers Static Assets (ASSETS)", async () => {
    for (const [name, asset] of Object.entries(DASHBOARD_ASSETS)) {
      expect(Object.keys(asset).sort(), name).toEqual(["bytes", "contentType", "file", "integrity", "sha256"]);
      const page = name.slice(0, name.indexOf("."));
      const stored = await env.ASSETS.fetch(`https://gateway.test/${page}/assets/${asset.file}`);
      expect(stored.status, name).toBe(200);
      expect(await sha256Hex(await stored.arrayBuffer())).toBe(asset.sha256);
    }
  });

  it("an unknown asset, a stale hash or the other page's asset is 404 in the S3 envelope", async () => {
    const stale = DASHBOARD_ASSETS["admin.js"].file.replace(/\.[0-9a-f]{16}\./, ".0000000000000000.");
    const cases = [
      ["/admin/assets/nothing.js", "no asset nothing.js"],
      [`/admin/assets/${stale}`, `no asset ${stale}`],
      [`/docs/assets/${DASHBOARD_ASSETS["admin.js"].file}`, `no asset ${DASHBOARD_ASSETS["admin.js"].file}`],
      [`/admin/assets/${DASHBOARD_ASSETS["docs.css"].file}`, `no asset ${DASHBOARD_ASSETS["docs.css"].file}`],
    ];
    for (const [path, message] of cases) {
      const res = await get(path as string);
      expect(res.status, path).toBe(404);
      expect(await res.json()).toEqual({ error: { code: "resource.not_found", message } });
    }
  });

  it("the scripts never turn data into markup or code: no innerHTML, outerHTML, insertAdjacentHTML, document.write, eval or Function", async () => {
    for (const body of [await served("admin.js"), await served("docs.js")]) {
      expect(body).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(/);
    }
  });

  it("the token lives in sessionStorage and travels only as a bearer header: no cookies, no localStorage, fetches without credentials", async () => {
    for (const body of [await served("admin.js"), await served("docs.js")]) {
      expect(body).toContain("sessionStorage");
      expect(body).not.toMatch(/localStorage|document\.cookie|indexedDB/);
      expect(body).toContain('credentials:"omit"');
      expect(body).toContain("Bearer ${");
    }
  });
});

describe("the routes the scripts call", () => {
  it("every API route the dashboard and the reference call is in /openapi.json with that method", async () => {
    const doc = (await (await get("/openapi.json")).json()) as { paths: Record<string, Record<string, unknown>> };
    const missing = [...Object.values(ADMIN_API), ...Object.values(DOCS_API)]
      .filter((r) => r.path !== "/openapi.json")
      .filter((r) => doc.paths[r.path]?.[r.method.toLowerCase()] === undefined)
      .map((r) => `${r.method} ${r.path}`);
    expect(missing).toEqual([]);
    expect((await get(DOCS_API.openapi.path)).status).toBe(200);
  });

  it("the bundled dashboard script names no /api/ path outside that list, and the reference script none at all", async () => {
    const listed = new Set<string>(Object.values(ADMIN_API).map((r) => r.path));
    const named = (body: string) => [...new Set(body.match(/\/api\/[A-Za-z0-9_{}/.-]*/g) ?? [])];
    const admin = await served("admin.js");
    expect(named(admin).filter((p) => !listed.has(p))).toEqual([]);
    expect(named(admin).sort()).toEqual([...listed].sort());
    expect(named(await served("docs.js"))).toEqual([]);
  });
});
