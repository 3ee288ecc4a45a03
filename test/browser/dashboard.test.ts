/**
 * The admin dashboard (`/admin`) end to end, in Debian's Chromium driven by playwright-core, against the
 * local gateway (test/browser/gateway.ts: scripts/start.mjs on free ports in a throw-away copy of the
 * project, the offline model beside it, the development configuration posted as the config in force).
 *
 * One browser and one page for the file; the scenarios run in order and share the signed-in page. Each step
 * saves a full-page screenshot to test-results/screenshots/<scenario>-<step>.png. Throughout, the page must log
 * no console error (other than the browser's own line for the one 401 / 400 response a scenario provokes on
 * purpose), throw no uncaught error and cause no Content Security Policy violation, and the admin token must
 * never appear in a URL.
 *
 * The dashboard's selectors are a contract (issue 11): sign-in `form#signin input#token button#signin-submit
 * #signin-error`, `nav a[data-view]`, `button#signout`, `#status-model #status-provider`, `table#runs-table
 * tr[data-run-id] td.status`, `#run-detail ol#run-events > li[data-event-type]`, `table#approvals-table
 * tr[data-approval-id] td.tool button[data-action]`, `#approvals-empty`, `textarea#config-editor
 * button#config-save ul#config-errors > li #config-saved`, `table#env-requests-table tr[data-request-id][data-status]
 * form.env-values input[data-key] button[data-action=submit]`, `#env-requests-empty`; issue 25 §3: `form#runs-filters
 * select[name=status] input[name=agent_id|caller_id|from|to] button[data-action=filter|clear]`, `#runs-empty`, the run
 * row's `a.short-id td.message td.answer td.agent td.caller td.duration td.rounds td.tools`, `#run-detail h3
 * code.run-id dd.status`, `ol#run-events > li .offset .summary details pre.payload`, `table#run-tool-calls
 * tr[data-tool] td.gate td.approval td.result`, `#run-manifests table.manifest tr[data-layer] code.sha`,
 * `#run-approvals [data-approval-id] .tool button[data-action=approve|deny]`; the keys view (issue 25 §3, D-080):
 * `form#key-create input#key-caller input#key-create-label fieldset.key-create-agents input[name=agents_all]
 * input[name=agents][value=<agent>] input#key-create-expires input#key-create-rpm input#key-create-tpd
 * button#key-submit`, `#key-once[data-key-id] input#key-value button#key-copy #key-copied[data-copied]
 * button#key-dismiss`, `table#keys-table tr[data-key-id] td.status td.caller td.label td.agents td.limits
 * button[data-action=edit|rotate|revoke]`, `#keys-empty`, `form#key-edit[data-key-id] input#key-edit-label
 * input[name=agents] input#key-edit-rpm input#key-edit-tpd button[type=submit] button[data-action=cancel]`;
 * D-082: the run row's `td.tokens td.cost`,
 * `#run-detail dd.requests dd.tokens dd.cost`, `form#usage-filters input[name=from|to] select[name=group_by|metric]
 * button[data-action=apply]`, `dl#usage-totals dd[data-field][data-value]`, `table#usage-groups[data-group-by]
 * tr[data-key] td[data-field]`, `#usage-chart svg.chart[data-metric] g.day[data-day] rect`, `ul#usage-legend >
 * li[data-series]`, `table#usage-days`, `#usage-empty`, `#usage-uncosted`.
 */
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Locator, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { durationText, offsetText } from "../../src/dashboard/durations";
import { countText, usdText, usdTitle } from "../../src/dashboard/usage-format";
import { BROWSER_PRICING, chromiumLaunchOptions, chromiumPath, type Gateway, SCREENSHOTS, startGateway } from "./gateway";

/** The scenario under way, for the screenshot a failure leaves: test-results/screenshots/<scenario>-failed.png. */
let scenario = "start";

const VIEWS = ["runs", "usage", "sessions", "approvals", "jobs", "audit", "config", "secrets", "env", "keys"] as const;
/** The run statuses the runs table shows (RunSchema in src/http/run-schemas.ts). */
type RunStatus = "queued" | "running" | "awaiting_approval" | "completed" | "failed" | "cancelled";

let gateway: Gateway | undefined;
/** The run with a tool round the runs-list scenarios share (issue 25 §3). */
let listRunId: string | undefined;
let browser: Browser | undefined;
let context: BrowserContext;
let page: Page;

/** What the page did that it must not: console errors, uncaught errors, CSP violations; and every request URL. */
const consoleErrors: { phase: string; text: string; url: string }[] = [];
const pageErrors: string[] = [];
const requestUrls: string[] = [];
/** How much of each record there was when the scenario under way began. */
let marks = { console: 0, page: 0, csp: 0 };
/** The step under way: a console error is expected only in the steps that provoke a 401 or a 400 on purpose. */
let phase = "start";
const EXPECTED_CONSOLE_ERRORS: Record<string, RegExp> = {
  "signin-wrong-token": /^Failed to load resource: the server responded with a status of 401\b/,
  "config-invalid": /^Failed to load resource: the server responded with a status of 400\b/,
  "keys-invalid": /^Failed to load resource: the server responded with a status of 400\b/,
};

/**
 * Why the setup (Chromium, the gateway, the browser) failed, if it did. Each test then fails with this one line
 * rather than being skipped, so a machine without Chromium counts as failed tests, not as a pass.
 */
let setupError: Error | undefined;

function gw(): Gateway {
  if (setupError) throw setupError;
  if (!gateway) throw new Error("the gateway did not start (see beforeAll)");
  return gateway;
}

/** The first call in every test: names the scenario, throws the setup's failure if any, notes where its records begin. */
async function begin(name: string): Promise<void> {
  scenario = name;
  gw();
  if (!page) throw new Error("the browser page was not opened (see beforeAll)");
  marks = { console: consoleErrors.length, page: pageErrors.length, csp: (await cspViolations()).length };
}

async function shot(scenario: string, step: string): Promise<void> {
  await page.screenshot({ path: join(SCREENSHOTS, `${scenario}-${step}.png`), fullPage: true });
}

/** The trimmed text of the first element `locator` matches, or null while there is none (never waits). */
async function textOf(locator: Locator): Promise<string | null> {
  if ((await locator.count()) === 0) return null;
  return (
    (await locator
      .first()
      .textContent({ timeout: 1_000 })
      .catch(() => null)) ?? ""
  ).trim();
}

/** Waits until `locator` is visible. */
/**
 * Scrolls to an element for a screenshot in one step inside the page: the run view re-renders while it polls, so a
 * locator resolved a moment earlier may be detached by the time Playwright scrolls it.
 */
async function scrollTo(selector: string): Promise<void> {
  await page.evaluate(
    (sel) => (globalThis as unknown as PageGlobals).document.querySelector(sel)?.scrollIntoView({ block: "nearest" }),
    selector,
  );
}

async function visible(locator: Locator, what: string, timeout = 15_000): Promise<void> {
  await locator
    .first()
    .waitFor({ state: "visible", timeout })
    .catch(() => {
      throw new Error(`${what} did not become visible within ${timeout / 1000} s`);
    });
}

/**
 * The page's globals, typed here: this file is type-checked with the Worker's types (tsconfig.json), which have no DOM.
 * Functions passed to page.evaluate / addInitScript run in the page, so each casts globalThis itself.
 */
interface PageGlobals {
  sessionStorage: { [key: string]: string };
  localStorage: { [key: string]: string };
  document: {
    cookie: string;
    querySelector(selector: string): { scrollIntoView(o: { block: "nearest" }): void } | null;
    addEventListener(type: "securitypolicyviolation", listener: (e: CspViolation) => void): void;
  };
  __cspViolations?: string[];
}
interface CspViolation {
  violatedDirective: string;
  blockedURI: string;
  sourceFile: string;
  lineNumber: number;
}

/** The CSP violations the page reported (recorded by the init script). */
async function cspViolations(): Promise<string[]> {
  return page.evaluate(() => ((globalThis as unknown as PageGlobals).__cspViolations ?? []).slice());
}

/**
 * Nothing unexpected on the console, no uncaught error, no CSP violation — since the scenario began, or with
 * `all` since the page opened — and no admin token in any URL so far.
 */
async function expectCleanPage(all = false): Promise<void> {
  const from = all ? { console: 0, page: 0, csp: 0 } : marks;
  const unexpected = consoleErrors.slice(from.console).filter((e) => !EXPECTED_CONSOLE_ERRORS[e.phase]?.test(e.text));
  expect(unexpected, "console errors").toEqual([]);
  expect(pageErrors.slice(from.page), "uncaught errors in the page").toEqual([]);
  expect((await cspViolations()).slice(from.csp), "CSP violations").toEqual([]);
  const token = gw().adminToken;
  expect(page.url()).not.toContain(token);
  expect(requestUrls.filter((u) => u.includes(token) || u.includes(encodeURIComponent(token)))).toEqual([]);
}

async function signIn(): Promise<void> {
  await page.locator("input#token").fill(gw().adminToken);
  await page.locator("button#signin-submit").click();
  await visible(page.locator('nav a[data-view="runs"]'), "the navigation after signing in");
}

/** Signed in (signs in again if an earlier scenario left the page signed out). */
async function ensureSignedIn(): Promise<void> {
  if ((await page.locator("button#signout").count()) > 0 && (await page.locator("button#signout").isVisible())) return;
  if ((await page.locator("form#signin").count()) === 0) await page.goto(`${gw().url}/admin`);
  await visible(page.locator("form#signin"), "the sign-in form");
  await signIn();
}

async function openView(view: (typeof VIEWS)[number]): Promise<void> {
  await page.locator(`nav a[data-view="${view}"]`).click();
  await expect.poll(() => new URL(page.url()).hash, { message: `the hash route after opening ${view}` }).toBe(`#/${view}`);
}

/** The run's row in the runs view. */
function runRow(runId: string): Locator {
  return page.locator(`table#runs-table tr[data-run-id="${runId}"]`);
}

/** Waits (through the page's own polling) until the run's row shows `status`; returns the statuses it showed on the way. */
async function waitForRunStatus(runId: string, status: RunStatus, timeout = 60_000): Promise<string[]> {
  const seen: string[] = [];
  const cell = runRow(runId).locator("td.status");
  await expect
    .poll(
      async () => {
        const text = await textOf(cell);
        if (text !== null && seen.at(-1) !== text) seen.push(text);
        return text;
      },
      { timeout, interval: 250, message: `the status of run ${runId} in table#runs-table (seen: ${seen.join(" → ")})` },
    )
    .toBe(status);
  return seen;
}

/** Sends a chat message through the API (api scope) and returns the queued run's id. */
async function sendChat(room: string, message: string): Promise<string> {
  const res = await gw().api("/v1/chat/messages", {
    method: "POST",
    body: JSON.stringify({ user_id: "browser-test", room_id: room, agent_id: "main", message }),
  });
  const body = (await res.json()) as { id?: string; status?: string };
  expect(res.status, JSON.stringify(body)).toBe(202);
  expect(body.status).toBe("queued");
  expect(body.id).toMatch(/^run_/);
  return body.id as string;
}

/** The run's event types as the admin API has them. */
async function apiEventTypes(runId: string): Promise<string[]> {
  const res = await gw().admin(`/api/admin/runs/${runId}`);
  expect(res.status).toBe(200);
  const body = (await res.json()) as { events: { event_type: string }[] };
  return body.events.map((e) => e.event_type);
}

/** Opens the run's detail from its row and returns the event types `ol#run-events` lists. */
async function openRunDetail(runId: string, expected: string[]): Promise<string[]> {
  await runRow(runId).click();
  await visible(page.locator("#run-detail"), "#run-detail");
  const items = page.locator("ol#run-events > li[data-event-type]");
  const types = () => items.evaluateAll((lis) => lis.map((li) => li.getAttribute("data-event-type") ?? ""));
  await expect.poll(types, { timeout: 15_000, message: "the event types in ol#run-events" }).toEqual(expected);
  return types();
}

/** The key created in the keys scenario, for the next one (issue 25 §3). */
let createdKeyId: string | undefined;
let createdKey: string | undefined;

/** A key record's row in the keys view. */
function keyRow(keyId: string): Locator {
  return page.locator(`table#keys-table tr[data-key-id="${keyId}"]`);
}

/** Does `act` and returns the page's answer to `method path` (an admin keys call). */
async function keyCall(method: string, path: string, act: () => Promise<unknown>) {
  const answer = page.waitForResponse((r) => new URL(r.url()).pathname === path && r.request().method() === method);
  await act();
  return answer;
}

/** GET /v1/models with `key` as the bearer token: the status and the model ids (sorted). */
async function modelsWith(key: string): Promise<{ status: number; ids?: string[] }> {
  const res = await fetch(`${gw().url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  if (res.status !== 200) return { status: res.status };
  const body = (await res.json()) as { data: { id: string }[] };
  return { status: 200, ids: body.data.map((m) => m.id).sort() };
}

/** The key is in no request URL the page made, nor in its localStorage, sessionStorage or cookies. */
async function expectKeyNowhere(key: string): Promise<void> {
  expect(requestUrls.filter((u) => u.includes(key) || u.includes(encodeURIComponent(key)))).toEqual([]);
  expect(page.url()).not.toContain(key);
  const stored = await page.evaluate(() => {
    const w = globalThis as unknown as PageGlobals;
    return [...Object.values(w.localStorage), ...Object.values(w.sessionStorage), w.document.cookie];
  });
  expect(stored.filter((v) => v.includes(key))).toEqual([]);
}

/** How wide the page is (a phone's width must not scroll sideways). */
function pageWidth(): Promise<number> {
  return page.evaluate(
    () => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth,
  );
}

beforeAll(async () => {
  try {
    await setUp();
  } catch (err) {
    setupError = new Error((err as Error).message);
  }
}, 600_000);

async function setUp(): Promise<void> {
  const executablePath = chromiumPath();
  gateway = await startGateway();
  browser = await chromium.launch(chromiumLaunchOptions(executablePath));
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Runs before the page's own scripts and outside its CSP: records every violation the page reports.
  await context.addInitScript(() => {
    const w = globalThis as unknown as PageGlobals;
    const violations: string[] = [];
    w.__cspViolations = violations;
    w.document.addEventListener("securitypolicyviolation", (e) =>
      violations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${e.sourceFile}:${e.lineNumber})`),
    );
  });
  page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push({ phase, text: m.text(), url: m.location().url });
  });
  page.on("pageerror", (err) => pageErrors.push(String(err)));
  page.on("request", (r) => requestUrls.push(r.url()));
  // A confirm() before approving or saving is answered yes, as the operator would.
  page.on("dialog", (d) => void d.accept());
}

afterEach(async (ctx) => {
  if (ctx.task.result?.state === "fail" && page) await shot(scenario, "failed").catch(() => {});
});

afterAll(async () => {
  await browser?.close().catch(() => {});
  await gateway?.stop();
}, 60_000);

describe("admin dashboard in Chromium", () => {
  it("sign in: a wrong token is refused; the admin token shows the navigation and status, and stays out of URLs, in sessionStorage only", async () => {
    await begin("signin");
    const g = gw();
    phase = "signin-form";
    const response = await page.goto(`${g.url}/admin`);
    expect(response?.status()).toBe(200);
    await visible(page.locator("form#signin"), "form#signin");
    expect(await page.locator("input#token").getAttribute("type")).toBe("password");
    await shot("signin", "01-form");

    phase = "signin-wrong-token";
    await page.locator("input#token").fill("wrong-token-0123456789abcdef");
    await page.locator("button#signin-submit").click();
    await visible(page.locator("#signin-error"), "#signin-error after a wrong token");
    expect(await textOf(page.locator("#signin-error"))).not.toBe("");
    expect(await page.locator('nav a[data-view="runs"]').isVisible()).toBe(false);
    await shot("signin", "02-wrong-token");

    phase = "signin-admin-token";
    await signIn();
    for (const view of VIEWS) await visible(page.locator(`nav a[data-view="${view}"]`), `nav a[data-view="${view}"]`);
    await visible(page.locator("button#signout"), "button#signout");
    await visible(page.locator("#status-model"), "#status-model");
    await visible(page.locator("#status-provider"), "#status-provider");
    // The development configuration is in force: the offline model is the default.
    await expect.poll(() => textOf(page.locator("#status-model")), { message: "#status-model" }).toContain("sophie-local");
    expect(await textOf(page.locator("#status-provider"))).not.toBe("");
    await shot("signin", "03-signed-in");

    // Where the token is: sessionStorage, and nowhere else the browser keeps or sends as a URL.
    const session = await page.evaluate(() => Object.values((globalThis as unknown as PageGlobals).sessionStorage));
    expect(session.some((v) => v.includes(g.adminToken))).toBe(true);
    const local = await page.evaluate(() => Object.values((globalThis as unknown as PageGlobals).localStorage));
    expect(local.filter((v) => v.includes(g.adminToken))).toEqual([]);
    expect((await context.cookies()).filter((c) => c.value.includes(g.adminToken) || c.name.includes(g.adminToken))).toEqual([]);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).document.cookie)).not.toContain(g.adminToken);
    expect(page.url()).not.toContain(g.adminToken);
    expect(requestUrls.length).toBeGreaterThan(1);
    await expectCleanPage();
  });

  it("a chat message sent through the API shows as a run that reaches completed, with its events ending in run.completed", async () => {
    await begin("chat");
    await ensureSignedIn();
    phase = "chat";
    const runId = await sendChat("browser-chat", "Hello from the browser test");
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId} in table#runs-table`, 30_000);
    const seen = await waitForRunStatus(runId, "completed");
    expect(
      seen.every((s) => ["queued", "running", "completed"].includes(s)),
      `statuses shown: ${seen.join(" → ")}`,
    ).toBe(true);
    await shot("chat", "01-run-completed");

    const expected = await apiEventTypes(runId);
    expect(expected.at(-1)).toBe("run.completed");
    expect(expected).toEqual(["run.created", "run.started", "model.requested", "run.completed"]);
    const shown = await openRunDetail(runId, expected);
    expect(shown.at(-1)).toBe("run.completed");
    await shot("chat", "02-run-detail");

    const run = (await (await gw().api(`/v1/runs/${runId}`)).json()) as { status: string; output: string };
    expect(run.status).toBe("completed");
    expect(run.output).toBe(
      'Hello from the offline model (sophie-local). You said: "Hello from the browser test". Try: "list files", "remember …", or "fail".',
    );
    await expectCleanPage();
  });

  it("a side-effect tool call waits for approval; approving it in the page lets the run complete with the tool's result ok", async () => {
    await begin("approval");
    await ensureSignedIn();
    phase = "approval";
    const runId = await sendChat("browser-approval", "Please write a file for the browser test");
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId} in table#runs-table`, 30_000);
    await waitForRunStatus(runId, "awaiting_approval");
    await shot("approval", "01-run-awaiting-approval");

    // The pending approval of this run, as the admin API has it.
    const approvals = (await (await gw().admin("/api/admin/approvals?status=pending")).json()) as {
      approvals: { approval_id: string; run_id: string; tool: string }[];
    };
    const pending = approvals.approvals.find((a) => a.run_id === runId);
    expect(pending?.tool).toBe("fs.write_text");
    const approvalId = pending?.approval_id as string;

    await openView("approvals");
    const row = page.locator(`table#approvals-table tr[data-approval-id="${approvalId}"]`);
    await visible(row, `the row of approval ${approvalId} in table#approvals-table`);
    expect(await textOf(row.locator("td.tool"))).toBe("fs.write_text");
    await visible(row.locator('button[data-action="approve"]'), 'button[data-action="approve"]');
    await visible(row.locator('button[data-action="deny"]'), 'button[data-action="deny"]');
    await shot("approval", "02-approvals-listed");

    await row.locator('button[data-action="approve"]').click();
    await expect.poll(() => row.count(), { timeout: 15_000, message: "the approved row leaves table#approvals-table" }).toBe(0);
    await visible(page.locator("#approvals-empty"), "#approvals-empty once nothing is pending");
    await shot("approval", "03-approved");

    await openView("runs");
    await waitForRunStatus(runId, "completed");
    await shot("approval", "04-run-completed");
    const expected = await apiEventTypes(runId);
    expect(expected).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "approval.requested",
      "approval.decided",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    await openRunDetail(runId, expected);
    await shot("approval", "05-run-detail");

    // The tool ran after the approval, and its result was ok.
    const run = (await (await gw().api(`/v1/runs/${runId}`)).json()) as {
      status: string;
      output: string;
      tool_calls: number;
      trace: { tool_execution_results: { tool: string; summary: string; output: string; error: string }[] };
    };
    expect(run.status).toBe("completed");
    expect(run.tool_calls).toBe(1);
    expect(run.trace.tool_execution_results).toHaveLength(1);
    const [result] = run.trace.tool_execution_results;
    expect(result?.tool).toBe("fs.write_text");
    expect(result?.error).toBe("");
    expect(result?.summary).toBe("wrote 28 bytes to notes/browser-test.txt");
    expect(run.output).toBe(
      'The tool fs.write_text worked. Here is what it returned: {"path":"notes/browser-test.txt","bytes":28,"created":true}',
    );
    const approval = (await (await gw().admin(`/api/admin/approvals/${approvalId}`)).json()) as { status: string };
    expect(approval.status).toBe("approved");
    await expectCleanPage();
  });

  it("decided recently (issue 24 §2): an approval denied in the page is listed in table#decided-approvals-table with admin as its decider", async () => {
    await begin("decided-approvals");
    await ensureSignedIn();
    phase = "decided-approvals";
    const runId = await sendChat("browser-decided", "Please write a file that will be denied");
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId} in table#runs-table`, 30_000);
    await waitForRunStatus(runId, "awaiting_approval");
    const pending = (await (await gw().admin("/api/admin/approvals?status=pending")).json()) as {
      approvals: { approval_id: string; run_id: string }[];
    };
    const approvalId = pending.approvals.find((a) => a.run_id === runId)?.approval_id as string;
    expect(approvalId).toMatch(/^apr_/);

    await openView("approvals");
    const row = page.locator(`table#approvals-table tr[data-approval-id="${approvalId}"]`);
    await visible(row, `the row of approval ${approvalId} in table#approvals-table`);
    // Not decided yet: absent from the decided table.
    expect(await page.locator(`table#decided-approvals-table tr[data-approval-id="${approvalId}"]`).count()).toBe(0);
    await shot("decided-approvals", "01-pending");

    await row.locator('button[data-action="deny"]').click();
    await expect.poll(() => row.count(), { timeout: 15_000, message: "the denied row leaves table#approvals-table" }).toBe(0);
    // The decided table loads with the view and on its Refresh.
    const decided = page.locator(`table#decided-approvals-table tr[data-approval-id="${approvalId}"]`);
    const refresh = page.locator('#decided-approvals button[data-action="refresh"]');
    await expect
      .poll(
        async () => {
          if ((await decided.count()) === 0) await refresh.click();
          return decided.count();
        },
        { timeout: 15_000, interval: 500, message: `the row of approval ${approvalId} in table#decided-approvals-table` },
      )
      .toBe(1);
    await visible(decided, "the decided row");
    expect(await textOf(decided.locator("td.tool"))).toBe("fs.write_text");
    expect(await textOf(decided.locator("td.status"))).toBe("denied");
    expect(await decided.locator("td.status").getAttribute("data-status")).toBe("denied");
    expect(await textOf(decided.locator("td.decided-by"))).toBe("admin");
    expect(await textOf(decided.locator("td.decided-via"))).toBe("admin");
    expect(await page.locator("#decided-approvals-empty").isVisible()).toBe(false);
    await shot("decided-approvals", "02-decided-listed");

    const approval = (await (await gw().admin(`/api/admin/approvals/${approvalId}`)).json()) as { status: string; decided_by: string };
    expect([approval.status, approval.decided_by]).toEqual(["denied", "admin"]);
    await expectCleanPage();
  });

  it("runs list (issue 25 §3): a tool round's run shows its message and answer in short, caller, duration, rounds and tool calls, and its id by its tail", async () => {
    await begin("runs-list");
    await ensureSignedIn();
    phase = "runs-list";
    const runId = await sendChat("browser-runs-list", "Please list files for the runs list");
    listRunId = runId;
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId} in table#runs-table`, 30_000);
    await waitForRunStatus(runId, "completed");
    const row = runRow(runId);
    // The index row is written once the run has stopped: the page's polling brings its previews.
    await expect
      .poll(() => textOf(row.locator("td.answer")), { timeout: 15_000, message: "td.answer" })
      .toMatch(/^The tool fs\.list_dir worked/);
    const listed = (await (await gw().admin("/api/admin/runs?agent_id=main&limit=200")).json()) as { runs: Record<string, unknown>[] };
    const entry = listed.runs.find((r) => r.run_id === runId) as Record<string, unknown>;
    expect(entry).toMatchObject({
      message_preview: "Please list files for the runs list",
      rounds: 1,
      tool_calls: 1,
      caller_id: gw().apiCaller,
    });
    expect(String(entry.output_preview).length).toBeLessThanOrEqual(80);
    expect(await textOf(row.locator("td.message"))).toBe("Please list files for the runs list");
    expect(await textOf(row.locator("td.answer"))).toBe(entry.output_preview);
    expect(await textOf(row.locator("td.agent"))).toBe("main");
    expect(await textOf(row.locator("td.caller"))).toBe(gw().apiCaller);
    expect(await textOf(row.locator("td.rounds"))).toBe("1");
    expect(await textOf(row.locator("td.tools"))).toBe("1");
    expect(await textOf(row.locator("td.duration"))).toMatch(/^\d+ ms$|^\d+\.\d\d s$/);
    expect(await textOf(row.locator("td.duration"))).toBe(durationText(entry.duration_ms as number));
    // The ids share `run_` and the session object's 64 hex: the list shows the tail, the whole id is the title.
    const link = row.locator("a.short-id");
    expect(await textOf(link)).toBe(`…${runId.slice(-8)}`);
    expect(await link.getAttribute("title")).toBe(runId);
    await shot("runs", "01-list-previews");
    await expectCleanPage();
  });

  it("runs list filters narrow the list: status, agent, caller and a time range (sent as from/to)", async () => {
    await begin("runs-filters");
    await ensureSignedIn();
    phase = "runs-filters";
    const runId = listRunId as string;
    expect(runId).toBeTruthy();
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId}`);
    const form = page.locator("form#runs-filters");
    const listedAfter = async (act: () => Promise<unknown>, param: string) => {
      const answer = page.waitForResponse(
        (r) => new URL(r.url()).pathname === "/api/admin/runs" && new URL(r.url()).searchParams.has(param),
      );
      await act();
      const res = await answer;
      expect(res.status()).toBe(200);
      return new URL(res.url()).searchParams.get(param);
    };
    const gone = () => expect.poll(() => runRow(runId).count(), { message: `run ${runId} filtered out` }).toBe(0);
    const shown = () => visible(runRow(runId), `run ${runId} listed`);

    expect(await listedAfter(() => form.locator('select[name="status"]').selectOption("failed"), "status")).toBe("failed");
    await gone();
    const statuses = await page.locator("table#runs-table td.status").allTextContents();
    expect(statuses.filter((s) => s !== "failed")).toEqual([]);
    await shot("runs", "02-filter-status-failed");
    await listedAfter(() => form.locator('select[name="status"]').selectOption("completed"), "status");
    await shown();
    expect((await page.locator("table#runs-table td.status").allTextContents()).filter((s) => s !== "completed")).toEqual([]);

    await form.locator('input[name="agent_id"]').fill("no-such-agent");
    expect(await listedAfter(() => form.locator('button[data-action="filter"]').click(), "agent_id")).toBe("no-such-agent");
    await gone();
    await visible(page.locator("#runs-empty"), "#runs-empty");
    await shot("runs", "03-filter-agent-none");
    await form.locator('input[name="agent_id"]').fill("main");
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "agent_id");
    await shown();
    await form.locator('input[name="caller_id"]').fill("someone-else");
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "caller_id");
    await gone();
    await form.locator('input[name="caller_id"]').fill(gw().apiCaller);
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "caller_id");
    await shown();

    // datetime-local is the browser's local time; the page sends it as UTC ISO.
    const local = (offsetMs: number) =>
      page.evaluate((ms) => {
        const d = new Date(Date.now() + ms);
        const p = (n: number) => String(n).padStart(2, "0");
        return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
      }, offsetMs);
    await form.locator('input[name="from"]').fill(await local(3_600_000));
    const from = await listedAfter(() => form.locator('button[data-action="filter"]').click(), "from");
    expect(from).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
    expect(Math.abs(Date.parse(from as string) - Date.now() - 3_600_000)).toBeLessThan(120_000);
    await gone();
    await shot("runs", "04-filter-from-future");
    await form.locator('input[name="from"]').fill(await local(-3_600_000));
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "from");
    await shown();
    await form.locator('input[name="to"]').fill(await local(-1_800_000));
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "to");
    await gone();
    await form.locator('input[name="to"]').fill(await local(3_600_000));
    await listedAfter(() => form.locator('button[data-action="filter"]').click(), "to");
    await shown();
    await shot("runs", "05-filter-time-range");

    const cleared = page.waitForResponse(
      (r) => new URL(r.url()).pathname === "/api/admin/runs" && !new URL(r.url()).search.includes("from="),
    );
    await form.locator('button[data-action="clear"]').click();
    await cleared;
    await shown();
    expect(await form.locator('select[name="status"]').inputValue()).toBe("");
    await expectCleanPage();
  });

  it("run view: one timeline line per event with its offset and summary (JSON behind a disclosure), the manifest table, tool calls with their gate decisions", async () => {
    await begin("run-view");
    await ensureSignedIn();
    phase = "run-view";
    const runId = listRunId as string;
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId}`);
    const expected = await apiEventTypes(runId);
    expect(expected).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    await openRunDetail(runId, expected);
    const detail = (await (await gw().admin(`/api/admin/runs/${runId}`)).json()) as {
      events: { seq: number; ts: string; payload: Record<string, unknown> }[];
      manifests: { manifest: { stack: { layer: string; sha256: string }[] } }[];
    };
    expect(await textOf(page.locator("#run-detail h3"))).toBe(`Run …${runId.slice(-8)}`);
    expect(await textOf(page.locator("#run-detail code.run-id"))).toBe(runId);

    const lines = page.locator("ol#run-events > li[data-event-type]");
    const offsets = await lines.locator(".offset").allTextContents();
    const start = Date.parse(detail.events[0]?.ts as string);
    expect(offsets).toEqual(detail.events.map((e) => offsetText(Date.parse(e.ts) - start)));
    expect(offsets[0]).toBe("+0 ms");
    const summaries = await lines.locator(".summary").allTextContents();
    expect(summaries[0]).toBe("created (http) for local/sophie-local");
    expect(summaries[1]).toBe("started");
    expect(summaries[2]).toMatch(/^model call 1: \d+(?: ms|\.\d\d s), 1 tool call$/);
    expect(summaries[3]).toBe("tool fs.list_dir called (call_1)");
    expect(summaries[4]).toMatch(/^tool fs\.list_dir: allowed by policy \S+, ok in \d+ ms — /);
    expect(summaries[5]).toMatch(/^model call 2: \d+(?: ms|\.\d\d s), 0 tool calls$/);
    expect(summaries[6]).toBe("completed: 1 tool round, 1 tool call");
    // The JSON is behind the disclosure: closed, then the event's payload as the API has it.
    const first = lines.nth(2);
    expect(await first.locator("details").getAttribute("open")).toBeNull();
    await first.locator("details > summary").click();
    await visible(first.locator("details pre.payload"), "the payload of model.requested");
    expect(JSON.parse((await first.locator("details pre.payload").textContent()) ?? "null")).toEqual(detail.events[2]?.payload);
    await shot("run-view", "01-timeline");

    // Tool calls with their gate decision.
    const call = page.locator('table#run-tool-calls tr[data-tool="fs.list_dir"]');
    expect(await call.count()).toBe(1);
    expect(await textOf(call.locator("td.gate"))).toMatch(/^allowed by policy \S+$/);
    expect(await textOf(call.locator("td.result"))).toMatch(/^ok — /);
    // The manifest of each model call: a table of its layers with their hashes; the last call's open.
    const tables = page.locator("#run-manifests table.manifest");
    expect(await tables.count()).toBe(2);
    const last = tables.nth(1);
    await visible(last, "the last model call's manifest table");
    const layers = await last.locator("tr[data-layer]").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-layer")));
    expect(layers).toEqual(detail.manifests[1]?.manifest.stack.map((l) => l.layer));
    expect(layers[0]).toBe("L1");
    const shas = await last.locator("code.sha").evaluateAll((cs) => cs.map((c) => c.getAttribute("title")));
    expect(shas).toEqual(detail.manifests[1]?.manifest.stack.map((l) => l.sha256));
    await scrollTo("#run-manifests");
    await shot("run-view", "02-manifest-tool-calls");
    await expectCleanPage();
  });

  it("a waiting run's view has the approval inline: Approve resumes the run, which completes", async () => {
    await begin("run-approval");
    await ensureSignedIn();
    phase = "run-approval";
    const runId = await sendChat("browser-inline-approval", "Please write a file from the run view");
    await openView("runs");
    await visible(runRow(runId), `the row of run ${runId}`, 30_000);
    await waitForRunStatus(runId, "awaiting_approval");
    await runRow(runId).click();
    const approve = page.locator('#run-approvals [data-approval-id] button[data-action="approve"]');
    await visible(approve, "the inline Approve button");
    expect(await textOf(page.locator("#run-approvals .tool"))).toBe("fs.write_text");
    const summaries = () => page.locator("ol#run-events > li[data-event-type] .summary").allTextContents();
    expect((await summaries()).at(-1)).toMatch(/^approval asked: fs\.write_text/);
    await shot("run-approval", "01-waiting");
    await approve.click();
    await expect
      .poll(() => page.locator("#run-detail dd.status").getAttribute("data-status"), {
        timeout: 30_000,
        message: "the run's status in its view",
      })
      .toBe("completed");
    await expect.poll(() => page.locator("#run-approvals").count(), { message: "the approval controls leave" }).toBe(0);
    const after = await summaries();
    const events = (
      (await (await gw().admin(`/api/admin/runs/${runId}`)).json()) as { events: { event_type: string; payload: { reason?: string } }[] }
    ).events;
    const asked = events.find((e) => e.event_type === "approval.requested");
    expect(asked?.payload.reason).toBeTruthy();
    expect(after.find((s) => s.startsWith("approval "))).toBe(`approval asked: fs.write_text — ${asked?.payload.reason}`);
    expect(after.find((s) => /^approval approved/.test(s))).toMatch(/^approval approved by admin/);
    expect(after.at(-1)).toBe("completed: 1 tool round, 1 tool call");
    const call = page.locator('table#run-tool-calls tr[data-tool="fs.write_text"]');
    expect(await textOf(call.locator("td.approval"))).toMatch(/^approved by admin/);
    await shot("run-approval", "02-approved-completed");
    const run = (await (await gw().api(`/v1/runs/${runId}`)).json()) as { status: string };
    expect(run.status).toBe("completed");
    await expectCleanPage();
  });

  it("at a phone's width (390×844) the runs list and the run view fit: no sideways page scroll, the list as cards", async () => {
    await begin("phone");
    await ensureSignedIn();
    phase = "phone";
    const runId = listRunId as string;
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      await openView("runs");
      await visible(runRow(runId), `the row of run ${runId}`);
      const pageWidth = () =>
        page.evaluate(
          () => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth,
        );
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      expect(await page.locator("table#runs-table thead").isVisible()).toBe(false);
      const box = await runRow(runId).boundingBox();
      expect(box?.width).toBeLessThanOrEqual(390);
      expect(await runRow(runId).locator("td.message").isVisible()).toBe(true);
      await shot("phone", "01-runs-390x844");
      await runRow(runId).click();
      await visible(page.locator("ol#run-events > li[data-event-type]"), "the timeline");
      await visible(page.locator("#run-manifests table.manifest").last(), "the manifest table");
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      await scrollTo("#run-detail");
      await shot("phone", "02-run-view-390x844");
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
    await expectCleanPage();
  });

  it("runs list and run view (issue 25 §3, D-082): each run shows its tokens and cost, exactly as the admin API has them", async () => {
    await begin("runs-usage");
    await ensureSignedIn();
    phase = "runs-usage";
    const runId = listRunId as string;
    expect(runId).toBeTruthy();
    const listed = (await (await gw().admin("/api/admin/runs?agent_id=main&limit=200")).json()) as { runs: UsageRunEntry[] };
    const entry = listed.runs.find((r) => r.run_id === runId) as UsageRunEntry;
    // Two model calls of the priced offline model (a tool round and the answer): tokens reported, a cost known.
    expect(entry.tokens.total).toBeGreaterThan(0);
    expect(entry.tokens.total).toBe(entry.tokens.prompt + entry.tokens.completion);
    expect(entry.cost?.usd).toMatch(/^0\.\d+$/);
    const detail = (await (await gw().admin(`/api/admin/runs/${runId}`)).json()) as {
      usage: { requests: number; prompt_tokens: number; completion_tokens: number; cached_tokens: number; total_tokens: number };
      cost: { usd: string } | null;
    };
    expect(detail.cost).toEqual(entry.cost);
    expect(detail.usage).toMatchObject({ requests: 2, prompt_tokens: entry.tokens.prompt, completion_tokens: entry.tokens.completion });
    // The exact cost: the offline model's reported tokens at BROWSER_PRICING, in pico-USD.
    const pico =
      entry.tokens.prompt * BROWSER_PRICING.inputPerMillion * 1e6 + entry.tokens.completion * BROWSER_PRICING.outputPerMillion * 1e6;
    expect(Number(entry.cost?.usd)).toBeCloseTo(pico / 1e12, 12);

    await openView("runs");
    const row = runRow(runId);
    await visible(row, `the row of run ${runId}`);
    expect(await textOf(row.locator("td.tokens"))).toBe(countText(entry.tokens.total));
    expect(await textOf(row.locator("td.cost"))).toBe(usdText(entry.cost?.usd));
    expect(await row.locator("td.cost span").getAttribute("title")).toBe(usdTitle(entry.cost?.usd));
    await shot("runs-usage", "01-list-tokens-cost");

    await row.click();
    await visible(page.locator("#run-detail dd.cost"), "#run-detail dd.cost");
    expect(await textOf(page.locator("#run-detail dd.requests"))).toBe("2");
    expect(await textOf(page.locator("#run-detail dd.tokens"))).toBe(
      `${countText(detail.usage.total_tokens)} — prompt ${countText(detail.usage.prompt_tokens)} (cached ${countText(detail.usage.cached_tokens)}), completion ${countText(detail.usage.completion_tokens)}`,
    );
    expect(await textOf(page.locator("#run-detail dd.cost"))).toBe(usdText(detail.cost?.usd));
    expect(await page.locator("#run-detail dd.cost span").getAttribute("title")).toBe(usdTitle(detail.cost?.usd));
    await scrollTo("#run-detail dl.facts");
    await shot("runs-usage", "02-run-view-usage");
    await expectCleanPage();
  });

  it("usage view (issue 25 §3, D-082): totals equal the API's, group by changes the table, one bar group per day with usage, empty and bad ranges", async () => {
    await begin("usage");
    await ensureSignedIn();
    phase = "usage";
    // More callers, agents and models: a run of the unpriced markers agent, and an admin setup session (caller admin).
    const queued = await gw().api("/v1/runs", { method: "POST", body: JSON.stringify({ agent_id: "markers", message: "Hello markers" }) });
    const markersRun = ((await queued.json()) as { id: string }).id;
    expect(queued.status).toBe(202);
    const setup = await gw().admin("/api/admin/setup-sessions", {
      method: "POST",
      body: JSON.stringify({ agent_id: "main", message: "Hello from the usage view test" }),
    });
    expect(setup.status).toBe(202);
    const setupRun = ((await setup.json()) as { id: string }).id;
    const today = new Date().toISOString().slice(0, 10);
    const from = new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10);
    const usageApi = async (groupBy: string) =>
      (await (await gw().admin(`/api/admin/usage?from=${from}&to=${today}&group_by=${groupBy}&series=day`)).json()) as UsageAnswer;
    // Both runs ended and their usage shipped (within about a second of stopping).
    for (const id of [markersRun, setupRun])
      await expect
        .poll(async () => ((await (await gw().admin(`/api/admin/runs/${id}`)).json()) as { run: { status: string } }).run.status, {
          timeout: 60_000,
          message: `the status of run ${id}`,
        })
        .toBe("completed");
    await expect
      .poll(async () => (await usageApi("agent")).groups.map((g) => g.key), { timeout: 15_000, message: "usage per agent" })
      .toEqual(["main", "markers"]);
    await expect
      .poll(async () => (await usageApi("caller")).groups.map((g) => g.key), { timeout: 15_000, message: "usage per caller" })
      .toEqual(["admin", `api:${gw().apiCaller}`]);

    await page.locator('nav a[data-view="usage"]').click();
    await expect.poll(() => new URL(page.url()).hash, { message: "the hash route of the usage view" }).toBe("#/usage");
    const form = page.locator("form#usage-filters");
    expect(await form.locator('input[name="from"]').inputValue()).toBe(from);
    expect(await form.locator('input[name="to"]').inputValue()).toBe(today);
    await visible(page.locator("dl#usage-totals"), "dl#usage-totals");

    // The totals shown are the API's, figure by figure (exact in data-value, readable in the text).
    const byCaller = await usageApi("caller");
    await expectFigures(page.locator("dl#usage-totals"), "dd", byCaller.total);
    const uncosted = byCaller.total.uncosted_requests;
    expect(uncosted).toBeGreaterThan(0); // the markers run: its model has no price
    await visible(page.locator("#usage-uncosted"), "#usage-uncosted");
    expect(await textOf(page.locator("#usage-uncosted"))).toBe(
      `${countText(uncosted)} ${uncosted === 1 ? "model call has" : "model calls have"} no cost (model not priced, or usage not reported): not in the cost.`,
    );
    await expectGroups("caller", byCaller);

    // The chart: one bar group per day with usage, a segment per group there, a legend entry per series.
    const chart = page.locator("#usage-chart svg.chart");
    await visible(chart, "the usage chart");
    expect(await chart.getAttribute("role")).toBe("img");
    expect(await textOf(chart.locator("title#usage-chart-title"))).toBe("Usage per day: cost (USD)");
    expect(await chart.locator("desc#usage-chart-desc").count()).toBe(1);
    expect(await chart.locator("text.axis-title").allTextContents()).toEqual(["cost (USD)", "UTC day"]);
    const days = [...new Set(byCaller.series.map((s) => s.day))];
    expect(await chart.locator("g.day").evaluateAll((gs) => gs.map((g) => g.getAttribute("data-day")))).toEqual(days);
    expect(await chart.locator(`g.day[data-day="${today}"] rect`).count()).toBe(
      byCaller.series.filter((s) => s.day === today && Number(s.cost_usd ?? 0) > 0).length,
    );
    expect(await page.locator("ul#usage-legend > li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-series")))).toEqual(
      [...byCaller.groups].sort((a, b) => Number(b.cost_usd ?? 0) - Number(a.cost_usd ?? 0)).map((g) => g.key),
    );
    expect(await page.locator("table#usage-days tbody tr").count()).toBe(byCaller.series.length);
    await shot("usage", "01-by-caller");

    // Tokens instead of cost: the chart is drawn again from the same answer.
    await form.locator('select[name="metric"]').selectOption("tokens");
    await expect.poll(() => chart.getAttribute("data-metric"), { message: "the chart's metric" }).toBe("tokens");
    expect(await chart.locator(`g.day[data-day="${today}"] rect`).count()).toBe(byCaller.series.filter((s) => s.day === today).length);

    // Group by agent: the table changes to the API's per-agent figures.
    const answered = page.waitForResponse((r) => new URL(r.url()).pathname === "/api/admin/usage");
    await form.locator('select[name="group_by"]').selectOption("agent");
    expect(new URL((await answered).url()).searchParams.get("group_by")).toBe("agent");
    await visible(page.locator('table#usage-groups[data-group-by="agent"]'), "the per-agent table");
    await expectGroups("agent", await usageApi("agent"));
    expect(await textOf(page.locator('table#usage-groups tr[data-key="markers"] td.cost'))).toBe("—");
    await shot("usage", "02-by-agent-tokens");
    await form.locator('select[name="group_by"]').selectOption("model");
    await visible(page.locator('table#usage-groups[data-group-by="model"]'), "the per-model table");
    await expectGroups("model", await usageApi("model"));

    // A range with nothing in it: a clear empty state.
    await form.locator('input[name="from"]').fill("2001-01-01");
    await form.locator('input[name="to"]').fill("2001-01-31");
    await form.locator('button[data-action="apply"]').click();
    await visible(page.locator("#usage-empty"), "#usage-empty");
    expect(await page.locator("#usage-chart").count()).toBe(0);
    await shot("usage", "03-empty");

    // A range that ends before it starts: the gateway's 400, shown like every view's errors.
    EXPECTED_CONSOLE_ERRORS["usage-bad-range"] = /^Failed to load resource: the server responded with a status of 400\b/;
    phase = "usage-bad-range";
    await form.locator('input[name="from"]').fill("2001-02-01");
    await form.locator('button[data-action="apply"]').click();
    await visible(page.locator("main .error"), "the error of a backwards range");
    expect(await textOf(page.locator("main .error"))).toBe("to: must not be before from (2001-02-01)");
    await shot("usage", "04-bad-range");
    phase = "usage";
    await expectCleanPage();
  });

  it("usage view at a phone's width (390×844): no sideways page scroll, the chart scales to the width, the table scrolls in its box", async () => {
    await begin("usage-phone");
    await ensureSignedIn();
    phase = "usage-phone";
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      // Opened afresh at this width (a click on the link of the view showing rebuilds it with its default range).
      await page.locator('nav a[data-view="usage"]').click();
      await expect.poll(() => new URL(page.url()).hash).toBe("#/usage");
      const chart = page.locator("#usage-chart svg.chart");
      await visible(chart, "the usage chart");
      const pageWidth = () =>
        page.evaluate(
          () => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth,
        );
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      const box = await chart.boundingBox();
      expect(box?.width).toBeGreaterThan(250);
      expect((box?.x ?? 0) + (box?.width ?? 0)).toBeLessThanOrEqual(390);
      await visible(page.locator("table#usage-groups"), "table#usage-groups");
      // The per-group table is wider than the phone: it scrolls inside its own box, not the page.
      const scroller = await page
        .locator(".table-scroll:has(> table#usage-groups)")
        .evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth, right: el.getBoundingClientRect().right }));
      expect(scroller.scroll).toBeGreaterThan(scroller.client);
      expect(scroller.right).toBeLessThanOrEqual(390);
      await shot("usage-phone", "01-usage-390x844");
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
    await expectCleanPage();
  });

  it("a session's detail lists its key's generations: after /new the archived one and the current one, each with its status", async () => {
    await begin("generations");
    await ensureSignedIn();
    phase = "generations";
    const runId = await sendChat("browser-generations", "Hello before /new");
    await expect
      .poll(async () => ((await (await gw().api(`/v1/runs/${runId}`)).json()) as { status: string }).status, {
        timeout: 60_000,
        interval: 250,
        message: `the status of run ${runId}`,
      })
      .toBe("completed");

    // /new through the API (api scope): answered at once, naming the archived generation and the new one.
    const res = await gw().api("/v1/chat/messages", {
      method: "POST",
      body: JSON.stringify({ user_id: "browser-test", room_id: "browser-generations", agent_id: "main", message: "/new" }),
    });
    const answer = (await res.json()) as { response: string; session_id: string };
    expect(res.status, JSON.stringify(answer)).toBe(200);
    const archived = /\(([^)]+)\) is archived/.exec(answer.response)?.[1] as string;
    expect(archived).toBeTruthy();
    const current = answer.session_id;
    expect(current).not.toBe(archived);

    await openView("sessions");
    await page.evaluate(
      (hash) => {
        (globalThis as unknown as { location: { hash: string } }).location.hash = hash;
      },
      `#/sessions/${encodeURIComponent(archived)}`,
    );
    await visible(page.locator("#session-detail"), "#session-detail");
    const generations = page.locator("details#generations");
    await visible(generations, "details#generations");
    await generations.locator("summary").click();
    const items = generations.locator("li[data-session-id]");
    const listed = () =>
      items.evaluateAll((lis) => lis.map((li) => `${li.getAttribute("data-session-id")}:${li.getAttribute("data-status")}`));
    await expect
      .poll(listed, { timeout: 15_000, message: "the generations in details#generations" })
      .toEqual([`${current}:current`, `${archived}:archived`]);
    expect(await textOf(generations.locator(`li[data-session-id="${current}"]`))).toContain("current");
    expect(await textOf(generations.locator(`li[data-session-id="${archived}"]`))).toContain("archived");
    // The current generation links to its own transcript; the one shown is not a link.
    await visible(generations.locator(`li[data-session-id="${current}"] a`), "the link to the current generation");
    expect(await generations.locator(`li[data-session-id="${archived}"] a`).count()).toBe(0);
    await shot("generations", "01-session-generations");
    await expectCleanPage();
  });

  it("env requests: empty at first; a setup session's request_env_variables shows as open, and its form sends the value once, leaving the request fulfilled", async () => {
    await begin("env");
    await ensureSignedIn();
    phase = "env";
    const before = (await (await gw().admin("/api/admin/env-requests")).json()) as { env_requests: unknown[] };
    expect(before.env_requests).toEqual([]);
    await openView("env");
    await visible(page.locator("table#env-requests-table"), "table#env-requests-table");
    await visible(page.locator("#env-requests-empty"), "#env-requests-empty");
    expect(await page.locator("table#env-requests-table tr[data-request-id]").count()).toBe(0);
    await shot("env", "01-empty");

    // An admin setup session; the offline model answers "environment variable" with request_env_variables
    // (docs/local-model.md, row 2b), a draft_only tool, so the run completes without an approval.
    const started = await gw().admin("/api/admin/setup-sessions", {
      method: "POST",
      body: JSON.stringify({ agent_id: "main", message: "Ask me for an environment variable" }),
    });
    const setup = (await started.json()) as { id: string; session_id: string };
    expect(started.status, JSON.stringify(setup)).toBe(202);
    await expect
      .poll(async () => ((await (await gw().admin(`/api/admin/runs/${setup.id}`)).json()) as { run: { status: string } }).run.status, {
        timeout: 60_000,
        interval: 250,
        message: `the status of setup run ${setup.id}`,
      })
      .toBe("completed");
    const open = (await (await gw().admin("/api/admin/env-requests")).json()) as {
      env_requests: { request_id: string; session_id: string; run_id: string; status: string; keys: { key: string }[] }[];
    };
    expect(open.env_requests).toHaveLength(1);
    const request = open.env_requests[0] as (typeof open.env_requests)[number];
    expect(request).toMatchObject({ session_id: setup.session_id, run_id: setup.id, status: "open", keys: [{ key: "DEMO_API_KEY" }] });

    await page.locator('.bar button[data-action="refresh"]').click();
    const row = page.locator(`table#env-requests-table tr[data-request-id="${request.request_id}"]`);
    await visible(row, `the row of ${request.request_id}`, 15_000);
    expect(await row.getAttribute("data-status")).toBe("open");
    expect(await page.locator("#env-requests-empty").isVisible()).toBe(false);
    expect(await row.locator('ul.keys > li[data-key="DEMO_API_KEY"]').count()).toBe(1);
    await shot("env", "02-open");

    const value = "browser-test-value-8d1f";
    const input = row.locator('form.env-values input[data-key="DEMO_API_KEY"]');
    expect(await input.getAttribute("type")).toBe("password");
    await input.fill(value);
    const answer = page.waitForResponse(
      (r) => new URL(r.url()).pathname === `/api/admin/env-requests/${request.request_id}/values` && r.request().method() === "POST",
    );
    await row.locator('form.env-values button[data-action="submit"]').click();
    const response = await answer;
    expect(response.status()).toBe(200);
    const sent = JSON.parse(response.request().postData() ?? "null") as { values: { key: string; value: string }[] };
    expect(sent).toEqual({ values: [{ key: "DEMO_API_KEY", value }] });
    expect(await response.text()).not.toContain(value);

    const fulfilledRow = page.locator(`table#env-requests-table tr[data-request-id="${request.request_id}"][data-status="fulfilled"]`);
    await visible(fulfilledRow, `the fulfilled row of ${request.request_id}`);
    expect(await fulfilledRow.locator("td.status").textContent()).toBe("fulfilled");
    expect(await fulfilledRow.locator("form.env-values").count()).toBe(0);
    expect(await page.content()).not.toContain(value);
    await shot("env", "03-fulfilled");

    const after = (await (await gw().admin("/api/admin/env-requests")).json()) as {
      env_requests: { request_id: string; status: string }[];
    };
    expect(after.env_requests.map((r) => [r.request_id, r.status])).toEqual([[request.request_id, "fulfilled"]]);
    expect(JSON.stringify(after)).not.toContain(value);
    await expectCleanPage();
  });

  it("a config edit that breaks the schema is refused: the page lists the problem by path, and the config in force is unchanged", async () => {
    await begin("config");
    await ensureSignedIn();
    phase = "config";
    const before = await gw().admin("/api/admin/config");
    const beforeBody = await before.json();
    const beforeTag = before.headers.get("etag");
    expect((beforeBody as { models: { default: string } }).models.default).toBe("local:sophie-local");

    await openView("config");
    const editor = page.locator("textarea#config-editor");
    await visible(editor, "textarea#config-editor");
    await expect.poll(() => editor.inputValue(), { message: "the config in textarea#config-editor" }).toContain("local:sophie-local");
    await shot("config", "01-editor");

    // models.default names a model the config does not declare.
    const broken = structuredClone(gw().config);
    broken.models.default = "local:no-such-model";
    await editor.fill(JSON.stringify(broken, null, 2));
    phase = "config-invalid";
    const answer = page.waitForResponse((r) => new URL(r.url()).pathname === "/api/admin/config" && r.request().method() === "POST");
    await page.locator("button#config-save").click();
    const response = await answer;
    expect(response.status()).toBe(400);
    const refusal = (await response.json()) as { error: { code: string; message: string; issues: { path: unknown; message: string }[] } };
    expect(refusal.error.code).toBe("invalid.request");
    const issues = refusal.error.issues.map((i) => `${Array.isArray(i.path) ? i.path.join(".") : String(i.path)}: ${i.message}`);
    expect(issues).toContain('models.default: unknown model "no-such-model" for provider "local"');

    const items = page.locator("ul#config-errors > li");
    await visible(items, "ul#config-errors > li");
    expect(await items.allTextContents().then((texts) => texts.map((t) => t.trim()))).toEqual(issues);
    expect(await page.locator("#config-saved").isVisible()).toBe(false);
    await shot("config", "02-refused");
    phase = "config";

    const after = await gw().admin("/api/admin/config");
    expect(await after.json()).toEqual(beforeBody);
    expect(after.headers.get("etag")).toBe(beforeTag);
    await expectCleanPage();
  });

  it("keys (issue 25 §3): a 400 is shown naming the field; a key for one agent with limits is shown once, copied, works on /v1/models for that agent only, and is gone after a reload", async () => {
    await begin("keys");
    await ensureSignedIn();
    phase = "keys";
    const g = gw();
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: g.url });
    await openView("keys");
    const form = page.locator("form#key-create");
    await visible(form, "form#key-create");
    // The agents offered are the config in force's.
    const offered = await form.locator('input[name="agents"]').evaluateAll((inputs) => inputs.map((i) => i.getAttribute("value")));
    expect(offered).toEqual(Object.keys(g.config.agents).sort());
    expect(offered).toEqual(["main", "markers"]);
    await shot("keys", "01-empty");

    phase = "keys-invalid";
    await form.locator("input#key-caller").fill("bad caller!");
    await form.locator("input#key-create-label").fill("refused");
    const refused = await keyCall("POST", "/api/admin/keys", () => form.locator("button#key-submit").click());
    expect(refused.status()).toBe(400);
    await visible(page.locator("main .error"), "the view's .error");
    expect(await textOf(page.locator("main .error"))).toBe("caller_id: 1-64 letters, digits, _ . -");
    expect(await page.locator("#key-once").count()).toBe(0);
    await shot("keys", "02-refused-400");
    phase = "keys";

    await form.locator("input#key-caller").fill("browser-keys");
    await form.locator("input#key-create-label").fill("browser test key");
    await form.locator('input[name="agents"][value="main"]').check();
    expect(await form.locator('input[name="agents_all"]').isChecked()).toBe(false);
    await form.locator("input#key-create-rpm").fill("30");
    await form.locator("input#key-create-tpd").fill("100000");
    const created = await keyCall("POST", "/api/admin/keys", () => form.locator("button#key-submit").click());
    expect(created.status()).toBe(201);
    expect(JSON.parse(created.request().postData() ?? "null")).toEqual({
      caller_id: "browser-keys",
      label: "browser test key",
      agents: ["main"],
      limits: { requestsPerMinute: 30, tokensPerDay: 100000 },
    });
    const { key, key_id: keyId } = (await created.json()) as { key: string; key_id: string };
    expect(key).toMatch(new RegExp(`^sgw_${keyId}_`));
    createdKeyId = keyId;
    createdKey = key;
    expect(await page.locator("main .error").count()).toBe(0);

    // Shown once: in the read-only field, with the note; the row lists the record without it.
    const once = page.locator(`#key-once[data-key-id="${keyId}"]`);
    await visible(once, "#key-once");
    expect(await once.locator("input#key-value").inputValue()).toBe(key);
    expect(await once.locator("input#key-value").getAttribute("readonly")).toBe("");
    expect(await textOf(once)).toContain("will not be shown again");
    const row = keyRow(keyId);
    await visible(row, `the row of key ${keyId}`);
    expect(await textOf(row.locator("td.status"))).toBe("active");
    expect(await textOf(row.locator("td.caller"))).toBe("browser-keys");
    expect(await textOf(row.locator("td.label"))).toBe("browser test key");
    expect(await textOf(row.locator("td.agents"))).toBe("main");
    expect(await textOf(row.locator("td.limits"))).toBe("30 req/min · 100000 tokens/day");
    expect(await textOf(row)).not.toContain(key);
    // The key is a property of the field, not in the page's markup.
    expect(await page.content()).not.toContain(key);

    await once.locator("button#key-copy").click();
    await expect.poll(() => page.locator("#key-copied").getAttribute("data-copied"), { message: "#key-copied" }).toBe("clipboard");
    const clipboard = await page.evaluate(() =>
      (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText(),
    );
    expect(clipboard).toBe(key);
    await shot("keys", "03-created-shown-once");

    // The key works for its agent only: /v1/models lists `main`, where the environment's token lists both agents.
    expect(await modelsWith(key)).toEqual({ status: 200, ids: ["agent:main"] });
    expect(await modelsWith(g.apiToken)).toEqual({ status: 200, ids: ["agent:main", "agent:markers"] });
    await expectKeyNowhere(key);

    // Refresh reads the list again and keeps the key shown (only Dismiss or leaving the view takes it away).
    await keyCall("GET", "/api/admin/keys", () => page.locator('.bar button[data-action="refresh"]').click());
    await visible(row, `the row of key ${keyId} after Refresh`);
    expect(await once.locator("input#key-value").inputValue()).toBe(key);

    // Reloaded: the list is back, the key is not.
    await page.reload();
    await visible(keyRow(keyId), `the row of key ${keyId} after a reload`);
    expect(await page.locator("#key-once").count()).toBe(0);
    expect(await page.locator("input#key-value").count()).toBe(0);
    expect(await textOf(page.locator("main"))).not.toContain(key);
    await shot("keys", "04-reloaded-not-shown");
    await expectKeyNowhere(key);
    await expectCleanPage();
  });

  it("keys: editing agents and limits updates the row; rotate shows the new key once and the old one gets 401; revoke gets 401 and the row says revoked", async () => {
    await begin("keys-manage");
    await ensureSignedIn();
    phase = "keys-manage";
    const keyId = createdKeyId as string;
    const oldKey = createdKey as string;
    expect(keyId).toBeTruthy();
    await openView("keys");
    const row = keyRow(keyId);
    await visible(row, `the row of key ${keyId}`);

    await row.locator('button[data-action="edit"]').click();
    const edit = page.locator(`form#key-edit[data-key-id="${keyId}"]`);
    await visible(edit, "form#key-edit");
    expect(await edit.locator("input#key-edit-label").inputValue()).toBe("browser test key");
    expect(await edit.locator("input#key-edit-rpm").inputValue()).toBe("30");
    expect(await edit.locator('input[name="agents"][value="main"]').isChecked()).toBe(true);
    expect(await edit.locator('input[name="agents"][value="markers"]').isChecked()).toBe(false);
    await edit.locator('input[name="agents"][value="markers"]').check();
    await edit.locator("input#key-edit-rpm").fill("60");
    await edit.locator("input#key-edit-tpd").fill("");
    await edit.locator("input#key-edit-label").fill("browser test key (edited)");
    // datetime-local is the browser's local time; the page sends it as UTC ISO.
    const localIn = (offsetMs: number) =>
      page.evaluate((ms) => {
        const d = new Date(Date.now() + ms);
        const p = (n: number) => String(n).padStart(2, "0");
        const text = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
        return { text, iso: new Date(text).toISOString() };
      }, offsetMs);

    // An expiry in the past: the gateway's 400 names the field, the form stays with what was typed.
    phase = "keys-invalid";
    const past = await localIn(-3_600_000);
    await edit.locator("input#key-edit-expires").fill(past.text);
    const refused = await keyCall("PATCH", `/api/admin/keys/${keyId}`, () => edit.locator('button[type="submit"]').click());
    expect(refused.status()).toBe(400);
    expect(JSON.parse(refused.request().postData() ?? "null")).toMatchObject({ expires_at: past.iso });
    await visible(page.locator("main .error"), "the view's .error");
    expect(await textOf(page.locator("main .error"))).toBe("expires_at: must be in the future");
    expect(await edit.locator("input#key-edit-rpm").inputValue()).toBe("60");
    expect(await textOf(row.locator("td.limits"))).toBe("30 req/min · 100000 tokens/day");
    phase = "keys-manage";

    const future = await localIn(86_400_000);
    await edit.locator("input#key-edit-expires").fill(future.text);
    await shot("keys", "05-edit");
    const patched = await keyCall("PATCH", `/api/admin/keys/${keyId}`, () => edit.locator('button[type="submit"]').click());
    expect(patched.status()).toBe(200);
    expect(JSON.parse(patched.request().postData() ?? "null")).toEqual({
      label: "browser test key (edited)",
      agents: ["main", "markers"],
      limits: { requestsPerMinute: 60 },
      expires_at: future.iso,
    });
    expect(await page.locator("main .error").count()).toBe(0);
    await expect
      .poll(() => row.locator("td.expires time").getAttribute("datetime"), { message: "td.expires after the edit" })
      .toBe(future.iso);
    await expect.poll(() => textOf(row.locator("td.agents")), { message: "td.agents after the edit" }).toBe("main, markers");
    expect(await textOf(row.locator("td.limits"))).toBe("60 req/min");
    expect(await textOf(row.locator("td.label"))).toBe("browser test key (edited)");
    expect(await page.locator("form#key-edit").count()).toBe(0);
    await expect
      .poll(() => modelsWith(oldKey), { timeout: 15_000, message: "/v1/models after the edit" })
      .toEqual({
        status: 200,
        ids: ["agent:main", "agent:markers"],
      });
    await shot("keys", "06-edited");

    // Rotate (confirmed by the dialog handler): the new key once; the old one refused.
    const rotated = await keyCall("POST", `/api/admin/keys/${keyId}/rotate`, () => row.locator('button[data-action="rotate"]').click());
    expect(rotated.status()).toBe(200);
    const newKey = ((await rotated.json()) as { key: string }).key;
    expect(newKey).not.toBe(oldKey);
    const once = page.locator(`#key-once[data-key-id="${keyId}"]`);
    await visible(once, "#key-once after a rotation");
    expect(await once.locator("input#key-value").inputValue()).toBe(newKey);
    await shot("keys", "07-rotated-shown-once");
    await expect
      .poll(() => modelsWith(oldKey), { timeout: 15_000, message: "the old key after the rotation" })
      .toMatchObject({ status: 401 });
    expect(await modelsWith(newKey)).toEqual({ status: 200, ids: ["agent:main", "agent:markers"] });

    // Leaving the view takes the key out of the page (the field emptied too); coming back does not bring it.
    const field = await once.locator("input#key-value").elementHandle();
    await openView("runs");
    // The hash changes before the page swaps its view (on the hashchange event): wait for the swap, then check.
    await expect.poll(() => page.locator("input#key-value").count(), { message: "the key field after leaving the view" }).toBe(0);
    expect(await field?.evaluate((input) => [(input as unknown as { value: string }).value, input.isConnected])).toEqual(["", false]);
    await field?.dispose();
    await openView("keys");
    await visible(row, `the row of key ${keyId}`);
    expect(await page.locator("#key-once").count()).toBe(0);

    const revoked = await keyCall("DELETE", `/api/admin/keys/${keyId}`, () => row.locator('button[data-action="revoke"]').click());
    expect(revoked.status()).toBe(200);
    await expect.poll(() => textOf(row.locator("td.status")), { message: "td.status after revoking" }).toBe("revoked");
    expect(await row.locator("button[data-action]").count()).toBe(0);
    await expect.poll(() => modelsWith(newKey), { timeout: 15_000, message: "the key after revoking" }).toMatchObject({ status: 401 });
    await shot("keys", "08-revoked");
    await expectKeyNowhere(oldKey);
    await expectKeyNowhere(newKey);
    await expectCleanPage();
  });

  it("keys at a phone's width (390×844): the form, the key shown once and the list fit with no sideways page scroll", async () => {
    await begin("keys-phone");
    await ensureSignedIn();
    phase = "keys-phone";
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      await openView("keys");
      const form = page.locator("form#key-create");
      await visible(form, "form#key-create");
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      await shot("keys-phone", "01-form-390x844");
      await form.locator("input#key-caller").fill("browser-phone");
      await form.locator("input#key-create-label").fill("a key made on a phone");
      const created = await keyCall("POST", "/api/admin/keys", () => form.locator("button#key-submit").click());
      expect(created.status()).toBe(201);
      const { key, key_id: keyId } = (await created.json()) as { key: string; key_id: string };
      await visible(page.locator("#key-once input#key-value"), "#key-once");
      expect(await page.locator("#key-once input#key-value").inputValue()).toBe(key);
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      const copy = await page.locator("button#key-copy").boundingBox();
      expect((copy?.x ?? 0) + (copy?.width ?? 0)).toBeLessThanOrEqual(390);
      // Where the page may not write to the clipboard, Copy selects the key for the operator to copy.
      await page.evaluate(() =>
        Object.defineProperty((globalThis as unknown as { navigator: object }).navigator, "clipboard", {
          value: undefined,
          configurable: true,
        }),
      );
      await page.locator("button#key-copy").click();
      await expect.poll(() => page.locator("#key-copied").getAttribute("data-copied"), { message: "#key-copied" }).toBe("selected");
      const selected = await page.locator("input#key-value").evaluate((input) => {
        const i = input as unknown as { value: string; selectionStart: number; selectionEnd: number };
        return i.value.slice(i.selectionStart, i.selectionEnd);
      });
      expect(selected).toBe(key);
      await shot("keys-phone", "02-shown-once-390x844");
      await page.locator("button#key-dismiss").click();
      expect(await page.locator("#key-once").count()).toBe(0);
      expect(await textOf(keyRow(keyId).locator("td.agents"))).toBe("all");
      expect(await page.locator("table#keys-table thead").isVisible()).toBe(false);
      const box = await keyRow(keyId).boundingBox();
      expect(box?.width).toBeLessThanOrEqual(390);
      expect(await pageWidth()).toBeLessThanOrEqual(390);
      await keyRow(keyId).scrollIntoViewIfNeeded();
      await shot("keys-phone", "03-list-390x844");
      await expectKeyNowhere(key);
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
    await expectCleanPage();
  });

  it("signing out forgets the token; the page logged no console error and no CSP violation throughout", async () => {
    await begin("signout");
    await ensureSignedIn();
    phase = "signout";
    await page.locator("button#signout").click();
    await visible(page.locator("form#signin"), "form#signin after signing out");
    const session = await page.evaluate(() => Object.values((globalThis as unknown as PageGlobals).sessionStorage));
    expect(session.filter((v) => v.includes(gw().adminToken))).toEqual([]);
    await shot("signout", "01-signed-out");
    await expectCleanPage(true);
  });
});

/** A run of GET /api/admin/runs as the usage scenarios read it (D-082). */
interface UsageRunEntry {
  run_id: string;
  tokens: { prompt: number; completion: number; cached: number; total: number };
  cost: { usd: string } | null;
}
/** The figures of GET /api/admin/usage (a group's, a day's or the total). */
interface UsageFigures {
  requests: number;
  runs: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  total_tokens: number;
  cost_usd: string | null;
}
interface UsageAnswer {
  groups: (UsageFigures & { key: string | null })[];
  total: UsageFigures;
  series: (UsageFigures & { day: string; key: string | null })[];
}

/** The usage view's figure cells (`data-field`) under `scope` show exactly `f`: the value in data-value, readable in the text. */
async function expectFigures(scope: Locator, tag: "dd" | "td", f: UsageFigures): Promise<void> {
  const expected: Record<string, [string, string]> = {
    requests: [String(f.requests), countText(f.requests)],
    runs: [String(f.runs), countText(f.runs)],
    prompt: [String(f.prompt_tokens), countText(f.prompt_tokens)],
    completion: [String(f.completion_tokens), countText(f.completion_tokens)],
    cached: [String(f.cached_tokens), countText(f.cached_tokens)],
    total: [String(f.total_tokens), countText(f.total_tokens)],
    cost: [f.cost_usd ?? "", usdText(f.cost_usd)],
  };
  const shown = await scope
    .locator(`${tag}[data-field]`)
    .evaluateAll((cells) => cells.map((c) => [c.getAttribute("data-field"), c.getAttribute("data-value"), (c.textContent ?? "").trim()]));
  expect(Object.fromEntries(shown.map(([k, v, t]) => [k, [v, t]]))).toEqual(expected);
}

/** The usage view's table per group shows the API's groups, in its order, each with its figures. */
async function expectGroups(groupBy: string, answer: UsageAnswer): Promise<void> {
  const rows = page.locator(`table#usage-groups[data-group-by="${groupBy}"] tbody tr`);
  await expect
    .poll(() => rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key"))), { message: `the rows per ${groupBy}` })
    .toEqual(answer.groups.map((g) => g.key ?? ""));
  for (const g of answer.groups) await expectFigures(page.locator(`table#usage-groups tr[data-key="${g.key ?? ""}"]`), "td", g);
}
