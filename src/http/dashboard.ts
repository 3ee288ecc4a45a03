/**
 * The pages the Worker serves itself (DESIGN §3 `GET /admin`, `GET /docs`): the operator dashboard and the API
 * reference, each an HTML shell plus one script and one stylesheet bundled at build time (scripts/build.mjs):
 * their bytes are Workers Static Assets (src/generated/assets/, the ASSETS binding), their names and digests are
 * in src/generated/dashboard-assets.ts. Pages, not API: plain Hono routes, absent from /openapi.json.
 *
 * The shells carry no data and need no token — every data call the scripts make carries the admin token as a
 * bearer header (see docs/dashboard.md). Each HTML answer has a strict CSP (only same-origin script, style and
 * fetch; no inline code; no framing; no form posts) and is never cached; assets are named by content hash and
 * cached for a year.
 */
import { Hono } from "hono";
import { AdminPage, DocsPage } from "../dashboard/pages";
import type { DashboardAsset } from "../dashboard/types";
import { GatewayError } from "../errors";
import { DASHBOARD_ASSETS } from "../generated/dashboard-assets";
import type { AppEnv } from "./router";

/** The Content-Security-Policy of both pages. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

const PAGE_HEADERS = {
  "Content-Type": "text/html; charset=utf-8",
  "Content-Security-Policy": CSP,
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "X-Frame-Options": "DENY",
  "Cache-Control": "no-store",
};

/** A content-hashed name never changes meaning, so browsers may keep it for a year without asking again. */
const ASSET_CACHE = "public, max-age=31536000, immutable";

const PAGES = {
  "/admin": { script: DASHBOARD_ASSETS["admin.js"], style: DASHBOARD_ASSETS["admin.css"], Page: AdminPage },
  "/docs": { script: DASHBOARD_ASSETS["docs.js"], style: DASHBOARD_ASSETS["docs.css"], Page: DocsPage },
} as const;

/** The pages' HTML, rendered once per isolate (it depends only on the bundled assets). */
const html = new Map<string, string>();

function renderPage(base: keyof typeof PAGES): string {
  let body = html.get(base);
  if (body === undefined) {
    const { script, style, Page } = PAGES[base];
    body = `<!doctype html>${String(Page({ script, style }))}`;
    html.set(base, body);
  }
  return body;
}

/**
 * Answers an asset by its hashed name, with a strong ETag (its sha256) and a 304 when the browser has it. The
 * bytes come from the static-assets binding (wrangler.toml `run_worker_first` sends these paths here first,
 * so that the headers and the S3-shaped 404 stay the Worker's).
 */
async function serveAsset(
  assets: Fetcher,
  url: string,
  asset: DashboardAsset | undefined,
  file: string,
  ifNoneMatch: string | undefined,
): Promise<Response> {
  if (!asset || asset.file !== file) throw new GatewayError("resource.not_found", `no asset ${file.slice(0, 200)}`);
  const etag = `"${asset.sha256}"`;
  const headers = { ETag: etag, "Cache-Control": ASSET_CACHE, "X-Content-Type-Options": "nosniff" };
  if (ifNoneMatch?.split(",").some((t) => t.trim() === etag || t.trim() === `W/${etag}`))
    return new Response(null, { status: 304, headers });
  const stored = await assets.fetch(new Request(url, { method: "GET" }));
  if (stored.status !== 200) {
    await stored.body?.cancel();
    // Named by the build but not among the deployed assets: a deploy without its build output.
    throw new GatewayError("resource.not_found", `no asset ${file.slice(0, 200)}`);
  }
  return new Response(stored.body, { status: 200, headers: { ...headers, "Content-Type": asset.contentType } });
}

/** `GET /admin`, `GET /docs` and their assets. */
export function dashboardRoutes(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  for (const base of ["/admin", "/docs"] as const) {
    const { script, style } = PAGES[base];
    app.get(base, () => new Response(renderPage(base), { status: 200, headers: PAGE_HEADERS }));
    app.get(`${base}/`, (c) => c.redirect(base, 301));
    app.get(`${base}/assets/:file`, (c) => {
      const file = c.req.param("file");
      const asset = [script, style].find((a) => a.file === file);
      return serveAsset(c.env.ASSETS, c.req.url, asset, file, c.req.header("If-None-Match"));
    });
  }
  return app;
}
