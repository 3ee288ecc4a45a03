/**
 * The HTML shells of /admin and /docs: static markup with one same-origin script and one stylesheet each (pinned
 * by Subresource Integrity), no inline script or style, and no data — every value the pages show is fetched by
 * the script with the operator's token and written with DOM text APIs.
 */
import type { FC, PropsWithChildren } from "hono/jsx";
import type { DashboardAsset } from "./types";

/** The views of the dashboard, in navigation order (`#/runs` …). */
export const ADMIN_VIEWS = ["runs", "usage", "sessions", "approvals", "jobs", "audit", "config", "secrets", "env", "keys"] as const;

interface Assets {
  base: "/admin" | "/docs";
  script: DashboardAsset;
  style: DashboardAsset;
}

const Shell: FC<PropsWithChildren<Assets & { title: string }>> = ({ base, script, style, title, children }) => (
  <html lang="en">
    <head>
      <meta charset="utf-8" />
      <meta name="viewport" content="width=device-width, initial-scale=1" />
      <meta name="referrer" content="no-referrer" />
      <title>{title}</title>
      <link rel="icon" href="data:," />
      <link rel="stylesheet" href={`${base}/assets/${style.file}`} integrity={style.integrity} />
      <script src={`${base}/assets/${script.file}`} integrity={script.integrity} defer />
    </head>
    <body>
      <noscript>
        <p class="error">This page needs JavaScript.</p>
      </noscript>
      {children}
    </body>
  </html>
);

/** The operator dashboard: a sign-in form, then the status header, the navigation and the current view. */
export const AdminPage: FC<Omit<Assets, "base">> = (assets) => (
  <Shell base="/admin" title="Sophie Gateway — admin" {...assets}>
    <section id="signin-view">
      <h1>Sophie Gateway</h1>
      <form id="signin" autocomplete="off">
        <label for="token">Admin token</label>
        <input id="token" name="token" type="password" required autocomplete="off" spellcheck={false} />
        <button id="signin-submit" type="submit">
          Sign in
        </button>
        <p id="signin-error" role="alert" hidden />
        <p class="hint">The token stays in this tab (sessionStorage) and is sent only as a bearer token to this gateway.</p>
      </form>
    </section>
    <div id="dashboard" hidden>
      <header class="top">
        <strong class="brand">Sophie Gateway</strong>
        <span class="status">
          model <code id="status-model">…</code>
        </span>
        <span class="status">
          provider <code id="status-provider">…</code>
        </span>
        <button id="signout" type="button">
          Sign out
        </button>
      </header>
      <nav>
        {ADMIN_VIEWS.map((v) => (
          <a href={`#/${v}`} data-view={v}>
            {v}
          </a>
        ))}
      </nav>
      <main id="view" />
    </div>
  </Shell>
);

/** The API reference: built in the browser from /openapi.json. */
export const DocsPage: FC<Omit<Assets, "base">> = (assets) => (
  <Shell base="/docs" title="Sophie Gateway — API reference" {...assets}>
    <header class="top">
      <strong class="brand">Sophie Gateway API</strong>
      <a href="/openapi.json">openapi.json</a>
      <label for="docs-token">Bearer token for “try it”</label>
      <input id="docs-token" type="password" autocomplete="off" spellcheck={false} />
      <button id="docs-token-clear" type="button">
        Forget token
      </button>
    </header>
    <main id="reference">
      <p id="loading">Loading /openapi.json…</p>
    </main>
  </Shell>
);
