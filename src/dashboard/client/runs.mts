/** Runs: the D1 run index with live status, and one run's detail with its lifecycle events. */
import { ADMIN_API } from "../api-routes.ts";
import { h, show, time } from "./dom.mts";
import { heading, Pager, poll, table, type ViewFactory } from "./view.mts";

interface RunRow {
  run_id: string;
  agent_id: string;
  source: string;
  status: string;
  caller_id: string | null;
  created_at: string;
  updated_at: string;
}

interface RunEvent {
  event_type: string;
  seq: number;
  ts: string;
  payload: unknown;
}

interface RunDetail {
  run: {
    id: string;
    status: string;
    output: string;
    provider: string;
    model: string;
    duration_ms: number;
    tool_calls: number;
    source: string;
  };
  events: RunEvent[];
}

/** Ended runs; any other status (queued, running, awaiting_approval) keeps the page polling. */
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
/** How often a page with unfinished runs asks again; with none, new runs still show up within IDLE_MS. */
const POLL_MS = 1500;
const IDLE_MS = 10_000;

export const runsView: ViewFactory = (ctx, arg) => {
  const { table: runsTable, body } = table("runs-table", ["run", "agent", "source", "status", "caller", "created", "updated"]);
  const rows = new Map<string, HTMLTableRowElement>();
  const detail = h("section", { id: "run-detail", hidden: true });

  const statusCell = (status: string) => h("td", { class: "status", "data-status": status }, status);

  function upsert(run: RunRow, where: "top" | "bottom"): void {
    const existing = rows.get(run.run_id);
    if (existing) {
      existing.querySelector("td.status")?.replaceWith(statusCell(run.status));
      existing.querySelector("td.updated")?.replaceChildren(time(run.updated_at));
      return;
    }
    const link = h("a", { class: "id", title: run.run_id, href: `#/runs/${encodeURIComponent(run.run_id)}` }, run.run_id);
    const tr = h(
      "tr",
      { "data-run-id": run.run_id, class: "clickable" },
      h("td", {}, link),
      h("td", {}, run.agent_id),
      h("td", {}, run.source),
      statusCell(run.status),
      h("td", {}, run.caller_id ?? "—"),
      h("td", {}, time(run.created_at)),
      h("td", { class: "updated" }, time(run.updated_at)),
    );
    tr.addEventListener("click", (e) => {
      if (!(e.target instanceof HTMLAnchorElement)) ctx.navigate(`#/runs/${encodeURIComponent(run.run_id)}`);
    });
    rows.set(run.run_id, tr);
    if (where === "top") body.prepend(tr);
    else body.append(tr);
  }

  const unfinished = () => [...rows.values()].some((tr) => !TERMINAL.has(tr.querySelector("td.status")?.textContent ?? ""));

  const pager = new Pager<RunRow>(
    ctx,
    ADMIN_API.runs,
    "runs",
    () => ({ limit: 50 }),
    (runs, first) => {
      if (first) {
        body.replaceChildren();
        rows.clear();
      }
      for (const run of runs) upsert(run, "bottom");
      listPoll.kick(unfinished() ? POLL_MS : IDLE_MS);
    },
  );

  /** The first page again: statuses change in place, new runs go on top. False when it failed (already shown). */
  async function refreshList(): Promise<boolean> {
    const runs = await pager.peek();
    if (!runs) return false;
    for (const run of [...runs].reverse()) upsert(run, "top");
    return true;
  }

  // Every 1.5 s while a run is unfinished, else every 10 s.
  const listPoll = poll(ctx, async () => ((await refreshList()) ? (unfinished() ? POLL_MS : IDLE_MS) : null));

  let shown: string | undefined;
  let seen = new Set<number>();

  async function loadDetail(runId: string): Promise<boolean> {
    try {
      const res = await ctx.call<RunDetail>(ADMIN_API.run, { params: { run_id: runId } });
      if (!ctx.alive() || shown !== runId) return false;
      renderDetail(res.body);
      return !TERMINAL.has(res.body.run.status);
    } catch (err) {
      if (ctx.alive() && shown === runId) ctx.fail(err);
      return false;
    }
  }

  const detailPoll = poll(ctx, async () => (shown && (await loadDetail(shown)) ? POLL_MS : null));

  function renderDetail(d: RunDetail): void {
    const r = d.run;
    let events = detail.querySelector<HTMLOListElement>("ol#run-events");
    if (!events || detail.getAttribute("data-run-id") !== r.id) {
      events = h("ol", { id: "run-events" });
      seen = new Set();
      detail.setAttribute("data-run-id", r.id);
    }
    const facts = h(
      "dl",
      { class: "facts" },
      h("dt", {}, "status"),
      h("dd", { class: "status", "data-status": r.status }, r.status),
      h("dt", {}, "source"),
      h("dd", {}, r.source),
      h("dt", {}, "model"),
      h("dd", {}, `${r.provider} / ${r.model}`),
      h("dt", {}, "duration"),
      h("dd", {}, `${r.duration_ms} ms`),
      h("dt", {}, "tool calls"),
      h("dd", {}, r.tool_calls),
    );
    for (const e of d.events) {
      if (seen.has(e.seq)) continue;
      seen.add(e.seq);
      events.append(
        h(
          "li",
          { "data-event-type": e.event_type },
          h("span", { class: "seq" }, `#${e.seq}`),
          " ",
          h("strong", {}, e.event_type),
          " ",
          time(e.ts),
          h("pre", { class: "payload" }, show(e.payload)),
        ),
      );
    }
    detail.replaceChildren(
      h("div", { class: "bar" }, h("h3", {}, `Run ${r.id}`), closeButton()),
      facts,
      h("h4", {}, "Output"),
      h("pre", { class: "output" }, r.output || "—"),
      h("h4", {}, "Events"),
      events,
    );
    detail.hidden = false;
  }

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
      return;
    }
    ctx.clearError();
    void loadDetail(runId).then((going) => {
      if (going) detailPoll.kick(POLL_MS);
    });
  }

  ctx.root.append(
    heading("Runs", () => void pager.first()),
    runsTable,
    pager.button,
    detail,
  );
  void pager.first().then(() => {
    if (shown) rows.get(shown)?.classList.add("selected");
  });
  show_(arg, false);
  return { show: (next) => show_(next) };
};
