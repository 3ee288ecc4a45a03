/**
 * Runs: the D1 run index with live status — each run's message and answer in short, who asked, how long it took,
 * its rounds and tool calls — narrowed by agent, caller, status and time; and one run in full (run-detail.mts).
 */
import { ADMIN_API } from "../api-routes.ts";
import { h } from "./dom.mts";
import { RUN_COLUMNS, type RunRow, runCells } from "./run-columns.mts";
import { type RunDetail, type RunPanel, renderRunDetail } from "./run-detail.mts";
import { Timeline } from "./run-timeline.mts";
import { heading, Pager, poll, type ViewFactory } from "./view.mts";

/** Ended runs; any other status (queued, running, awaiting_approval) keeps the page polling. */
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const STATUSES = ["queued", "running", "awaiting_approval", "completed", "failed", "cancelled"];
/** How often a page with unfinished runs asks again; with none, new runs still show up within IDLE_MS. */
const POLL_MS = 1500;
const IDLE_MS = 10_000;

/** The filter form: agent, caller, status and a time range (the browser's local time, sent as UTC ISO). */
function filterForm(apply: () => void) {
  const agent = h("input", { type: "text", name: "agent_id", placeholder: "any agent", "aria-label": "agent", autocomplete: "off" });
  const caller = h("input", { type: "text", name: "caller_id", placeholder: "any caller", "aria-label": "caller", autocomplete: "off" });
  const status = h("select", { name: "status", "aria-label": "status" }, h("option", { value: "" }, "any status"));
  for (const s of STATUSES) status.append(h("option", { value: s }, s));
  const from = h("input", { type: "datetime-local", name: "from", "aria-label": "from", step: 1 });
  const to = h("input", { type: "datetime-local", name: "to", "aria-label": "to", step: 1 });
  const field = (label: string, input: HTMLElement) => h("label", { class: `field ${label}` }, h("span", {}, label), input);
  const clear = h("button", { type: "button", "data-action": "clear" }, "Clear");
  const form = h(
    "form",
    { id: "runs-filters", class: "filters", autocomplete: "off" },
    field("agent", agent),
    field("caller", caller),
    field("status", status),
    field("from", from),
    field("to", to),
    h("div", { class: "actions" }, h("button", { type: "submit", "data-action": "filter" }, "Filter"), clear),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    apply();
  });
  clear.addEventListener("click", () => {
    form.reset();
    apply();
  });
  status.addEventListener("change", apply);
  const iso = (v: string) => (v ? new Date(v).toISOString() : undefined);
  const query = (): Record<string, string | undefined> => ({
    agent_id: agent.value.trim() || undefined,
    caller_id: caller.value.trim() || undefined,
    status: status.value || undefined,
    from: iso(from.value),
    to: iso(to.value),
  });
  return { form, query };
}

export const runsView: ViewFactory = (ctx, arg) => {
  const body = h("tbody");
  const head = h("thead", {}, h("tr", {}, ...RUN_COLUMNS.map((c) => h("th", { scope: "col" }, c.label))));
  const runsTable = h("table", { id: "runs-table", class: "cards" }, head, body);
  const empty = h("p", { id: "runs-empty", class: "muted", hidden: true }, "No runs match.");
  const rows = new Map<string, HTMLTableRowElement>();
  const detail = h("section", { id: "run-detail", hidden: true });
  const filters = filterForm(() => void pager.first());

  function upsert(run: RunRow, where: "top" | "bottom"): void {
    const existing = rows.get(run.run_id);
    if (existing) {
      existing.replaceChildren(...runCells(run));
      return;
    }
    const tr = h("tr", { "data-run-id": run.run_id, class: "clickable" }, ...runCells(run));
    tr.addEventListener("click", (e) => {
      if (!(e.target instanceof HTMLAnchorElement)) ctx.navigate(`#/runs/${encodeURIComponent(run.run_id)}`);
    });
    tr.classList.toggle("selected", run.run_id === shown);
    rows.set(run.run_id, tr);
    if (where === "top") body.prepend(tr);
    else body.append(tr);
  }

  const unfinished = () => [...rows.values()].some((tr) => !TERMINAL.has(tr.querySelector("td.status")?.textContent ?? ""));
  const showEmpty = () => {
    empty.hidden = rows.size > 0;
  };

  const pager = new Pager<RunRow>(
    ctx,
    ADMIN_API.runs,
    "runs",
    () => ({ ...filters.query(), limit: 50 }),
    (runs, first) => {
      if (first) {
        body.replaceChildren();
        rows.clear();
      }
      for (const run of runs) upsert(run, "bottom");
      showEmpty();
      listPoll.kick(unfinished() ? POLL_MS : IDLE_MS);
    },
  );

  /** The first page again: statuses change in place, new runs go on top. False when it failed (already shown). */
  async function refreshList(): Promise<boolean> {
    const runs = await pager.peek();
    if (!runs) return false;
    for (const run of [...runs].reverse()) upsert(run, "top");
    showEmpty();
    return true;
  }

  // Every 1.5 s while a run is unfinished, else every 10 s.
  const listPoll = poll(ctx, async () => ((await refreshList()) ? (unfinished() ? POLL_MS : IDLE_MS) : null));

  let shown: string | undefined;
  let panel: RunPanel | undefined;

  async function loadDetail(runId: string): Promise<boolean> {
    try {
      const res = await ctx.call<RunDetail>(ADMIN_API.run, { params: { run_id: runId } });
      if (!ctx.alive() || shown !== runId) return false;
      if (panel?.runId !== runId) panel = { runId, timeline: new Timeline(), approvals: new Map() };
      renderRunDetail(ctx, detail, res.body, panel, { close: closeButton(), onDecided: () => void reload(runId) });
      return !TERMINAL.has(res.body.run.status);
    } catch (err) {
      if (ctx.alive() && shown === runId) ctx.fail(err);
      return false;
    }
  }

  /** After a decision: the run again now, then polled while it goes on; the list follows. */
  async function reload(runId: string): Promise<void> {
    if (await loadDetail(runId)) detailPoll.kick(POLL_MS);
    listPoll.kick(POLL_MS);
  }

  const detailPoll = poll(ctx, async () => (shown && (await loadDetail(shown)) ? POLL_MS : null));

  function closeButton(): HTMLButtonElement {
    const b = h("button", { type: "button", "data-action": "close" }, "Close");
    b.addEventListener("click", () => ctx.navigate("#/runs"));
    return b;
  }

  /** Shows a run's detail (or none); the list is read again either way, so coming back to #/runs is current. */
  function show_(runId: string | undefined, refresh = true): void {
    shown = runId;
    if (refresh) void refreshList().then((ok) => ok && listPoll.kick(unfinished() ? POLL_MS : IDLE_MS));
    for (const [id, tr] of rows) tr.classList.toggle("selected", id === runId);
    if (!runId) {
      detail.hidden = true;
      detail.replaceChildren();
      detail.removeAttribute("data-run-id");
      panel = undefined;
      return;
    }
    ctx.clearError();
    void loadDetail(runId).then((going) => {
      if (going) detailPoll.kick(POLL_MS);
    });
  }

  ctx.root.append(
    heading("Runs", () => void pager.first()),
    filters.form,
    h("div", { class: "table-scroll runs" }, runsTable),
    empty,
    pager.button,
    detail,
  );
  void pager.first();
  show_(arg, false);
  return { show: (next) => show_(next) };
};
