/**
 * The operator dashboard (/admin). The page is a static shell; this script signs the operator in, then renders
 * one view per `#/<view>` from the admin API.
 *
 * Safety by construction:
 * - the admin token is typed into a password field and kept in sessionStorage (this tab only) — never in a URL, a
 *   cookie or the page; it leaves only as `Authorization: Bearer` on same-origin fetches (api.mts), so there is no
 *   ambient credential another site could ride (no CSRF);
 * - a 401 on any call forgets the token and returns to sign-in; signing out forgets it and empties the page;
 * - everything the gateway returns is written as text through DOM APIs (dom.mts), never parsed as HTML.
 */
import { ADMIN_API, TOKEN_KEYS } from "../api-routes.ts";
import { ApiError, createCaller, messageOf } from "./api.mts";
import { approvalsView } from "./approvals.mts";
import { auditView } from "./audit.mts";
import { configView } from "./config.mts";
import { byId } from "./dom.mts";
import { envView } from "./env.mts";
import { jobsView } from "./jobs.mts";
import { keysView } from "./keys.mts";
import { runsView } from "./runs.mts";
import { secretsView } from "./secrets.mts";
import { sessionsView } from "./sessions.mts";
import { usageView } from "./usage.mts";
import { errorSlot, VIEW_LEAVE_EVENT, type View, type ViewContext, type ViewFactory } from "./view.mts";

/** Each view, and the id of its error element when the page promises one. */
const VIEWS: Record<string, { factory: ViewFactory; errorId?: string }> = {
  runs: { factory: runsView },
  usage: { factory: usageView },
  sessions: { factory: sessionsView },
  approvals: { factory: approvalsView },
  jobs: { factory: jobsView },
  audit: { factory: auditView },
  config: { factory: configView },
  secrets: { factory: secretsView, errorId: "secret-error" },
  env: { factory: envView },
  keys: { factory: keysView },
};

const token = {
  get: (): string | null => sessionStorage.getItem(TOKEN_KEYS.admin),
  set: (value: string) => sessionStorage.setItem(TOKEN_KEYS.admin, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEYS.admin),
};

const signinView = byId("signin-view");
const signinForm = byId<HTMLFormElement>("signin");
const tokenInput = byId<HTMLInputElement>("token");
const signinSubmit = byId<HTMLButtonElement>("signin-submit");
const signinError = byId("signin-error");
const dashboard = byId("dashboard");
const main = byId("view");

const call = createCaller(token.get, (message) => signOut(`token refused: ${message}`));

/** Bumped on every view change and sign-out: what an older view started no longer touches the page. */
let generation = 0;
let current: { name: string; view: View | undefined } | null = null;

function setSigninError(message: string | null): void {
  signinError.textContent = message ?? "";
  signinError.hidden = message === null;
  signinError.classList.toggle("error", message !== null);
}

/** Tells the view showing that it is going (the keys view empties a key still shown, key-once.mts). */
function leaveView(): void {
  window.dispatchEvent(new Event(VIEW_LEAVE_EVENT));
}

function signOut(message: string | null = null): void {
  token.clear();
  generation++;
  current = null;
  leaveView();
  main.replaceChildren();
  for (const id of ["status-model", "status-provider"]) byId(id).textContent = "…";
  dashboard.hidden = true;
  signinView.hidden = false;
  setSigninError(message);
  tokenInput.focus();
}

function signedIn(): void {
  setSigninError(null);
  signinView.hidden = true;
  dashboard.hidden = false;
  route();
}

interface Status {
  model: { ref: string; provider: string; api_model_id: string; local: boolean };
  provider_status: { mode: string; status: string; reason?: string; message?: string };
}

/** The header: the default model and its provider's readiness. */
async function refreshStatus(): Promise<void> {
  const model = byId("status-model");
  const provider = byId("status-provider");
  try {
    const { body } = await call<Status>(ADMIN_API.status);
    model.textContent = body.model.ref;
    model.title = `${body.model.provider} / ${body.model.api_model_id}${body.model.local ? " (local)" : ""}`;
    provider.textContent = body.provider_status.status;
    provider.setAttribute("data-status", body.provider_status.status);
    provider.title = [`mode ${body.provider_status.mode}`, body.provider_status.reason, body.provider_status.message]
      .filter(Boolean)
      .join(" — ");
  } catch (err) {
    provider.textContent = "unknown";
    provider.title = messageOf(err);
  }
}

/** `#/<view>[/<arg>]` → the view and its argument (a run or session id). */
function parseHash(): { name: string; arg: string | undefined } {
  const m = /^#\/([a-z]+)(?:\/(.+))?$/.exec(location.hash);
  const name = m?.[1] && m[1] in VIEWS ? m[1] : "runs";
  let arg: string | undefined;
  try {
    arg = m?.[2] ? decodeURIComponent(m[2]) : undefined;
  } catch {
    arg = undefined;
  }
  return { name, arg };
}

/** Renders the view the hash names; `fresh` rebuilds it even when it is already showing. */
function route(fresh = false): void {
  if (!token.get()) {
    signOut();
    return;
  }
  const { name, arg } = parseHash();
  for (const a of document.querySelectorAll("nav a[data-view]")) {
    if (a.getAttribute("data-view") === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!fresh && current?.name === name && current.view?.show) {
    current.view.show(arg);
    return;
  }
  const mine = ++generation;
  const { factory, errorId } = VIEWS[name] as (typeof VIEWS)[string];
  const errors = errorSlot(errorId);
  leaveView();
  main.replaceChildren(errors.el);
  const ctx: ViewContext = {
    root: main,
    call,
    alive: () => generation === mine,
    fail: (err) => {
      if (generation === mine) errors.fail(err);
    },
    clearError: () => errors.clear(),
    navigate: (hash) => {
      location.hash = hash;
    },
  };
  current = { name, view: undefined };
  current.view = factory(ctx, arg);
  void refreshStatus();
}

signinForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  const candidate = tokenInput.value.trim();
  tokenInput.value = "";
  if (!candidate) return setSigninError("enter the admin token");
  signinSubmit.disabled = true;
  try {
    // The token is checked before it is kept: a refused one is never stored.
    await call(ADMIN_API.status, { token: candidate });
    token.set(candidate);
    signedIn();
  } catch (err) {
    const refused = err instanceof ApiError && (err.status === 401 || err.status === 403);
    setSigninError(`${refused ? "token refused" : "sign-in failed"}: ${messageOf(err)}`);
  } finally {
    signinSubmit.disabled = false;
  }
});

byId("signout").addEventListener("click", () => signOut());
// Clicking the link of the view already showing changes no hash: rebuild the view (fresh data) instead.
for (const a of document.querySelectorAll<HTMLAnchorElement>("nav a[data-view]")) {
  a.addEventListener("click", (e) => {
    if (a.getAttribute("href") !== location.hash) return;
    e.preventDefault();
    route(true);
  });
}
window.addEventListener("hashchange", () => {
  if (token.get()) route();
});

if (token.get()) signedIn();
else signOut();
