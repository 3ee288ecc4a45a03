/**
 * Usage (`#/usage`, issue 25 §3, D-082): totals and a chart per UTC day over a date range (default: the last 30 days),
 * grouped by caller, agent, model or job — one call to GET /api/admin/usage?series=day, which reads the D1 rollups.
 * A totals list, a table per group, a stacked-bar chart (usage-chart.mts) with its legend, and the chart's figures as
 * a table.
 */
import { ADMIN_API } from "../api-routes.ts";
import { countText, usdText, usdTitle } from "../usage-format.ts";
import { h } from "./dom.mts";
import { scrollBox } from "./run-detail.mts";
import { chartLegend, type DayFigure, type Metric, usageChart } from "./usage-chart.mts";
import { heading, type ViewFactory } from "./view.mts";

/** The figures of a group, of a day's group and of the whole range (GET /api/admin/usage). */
interface Figures {
  requests: number;
  runs: number;
  unreported_requests: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  total_tokens: number;
  cost_usd: string | null;
}
interface Usage {
  from: string;
  to: string;
  group_by: string;
  groups: (Figures & { key: string | null })[];
  total: Figures;
  series?: (Figures & DayFigure)[];
}

const GROUPS = ["caller", "agent", "model", "job"] as const;
/** Groups drawn as their own series; the rest are added up as "other". */
const TOP_SERIES = 6;
const DEFAULT_DAYS = 30;
const DAY_MS = 86_400_000;

/** A UTC day `n` days before today, as YYYY-MM-DD. */
const utcDay = (daysAgo: number) => new Date(Date.now() - daysAgo * DAY_MS).toISOString().slice(0, 10);

/** Every UTC day from..to (both included), or none when the range is not two dates in order. */
function daysOf(from: string, to: string): string[] {
  const a = Date.parse(`${from}T00:00:00Z`);
  const b = Date.parse(`${to}T00:00:00Z`);
  if (!(b >= a) || (b - a) / DAY_MS > 400) return [];
  const days: string[] = [];
  for (let t = a; t <= b; t += DAY_MS) days.push(new Date(t).toISOString().slice(0, 10));
  return days;
}

/** How a group's key reads: a job group of runs no job started has key null; a missing caller is "". */
const keyLabel = (key: string | null) => (key === null ? "(no job)" : key === "" ? "(none)" : key);

/** The figure columns of the totals and of each group, with the class each cell carries. */
const COLUMNS: { label: string; cls: string; text: (f: Figures) => string; raw: (f: Figures) => string }[] = [
  { label: "requests", cls: "requests", text: (f) => countText(f.requests), raw: (f) => String(f.requests) },
  { label: "runs", cls: "runs", text: (f) => countText(f.runs), raw: (f) => String(f.runs) },
  { label: "prompt tokens", cls: "prompt", text: (f) => countText(f.prompt_tokens), raw: (f) => String(f.prompt_tokens) },
  {
    label: "completion tokens",
    cls: "completion",
    text: (f) => countText(f.completion_tokens),
    raw: (f) => String(f.completion_tokens),
  },
  { label: "cached tokens", cls: "cached", text: (f) => countText(f.cached_tokens), raw: (f) => String(f.cached_tokens) },
  { label: "total tokens", cls: "total", text: (f) => countText(f.total_tokens), raw: (f) => String(f.total_tokens) },
  { label: "cost", cls: "cost", text: (f) => usdText(f.cost_usd), raw: (f) => f.cost_usd ?? "" },
];

/** A figure cell: the readable text, the exact value in `data-value` (and the exact cost in the title). */
function cell(tag: "td" | "dd", c: (typeof COLUMNS)[number], f: Figures): HTMLElement {
  const title = c.cls === "cost" ? usdTitle(f.cost_usd) : null;
  return h(tag, { class: `${c.cls} num`, "data-field": c.cls, "data-value": c.raw(f), title }, c.text(f));
}

function totalsList(total: Figures): HTMLElement {
  const dl = h("dl", { id: "usage-totals", class: "totals" });
  for (const c of COLUMNS) dl.append(h("div", {}, h("dt", {}, c.label), cell("dd", c, total)));
  return dl;
}

function groupsTable(u: Usage): HTMLElement {
  const head = h("tr", {}, h("th", { scope: "col" }, u.group_by), ...COLUMNS.map((c) => h("th", { scope: "col", class: "num" }, c.label)));
  const body = h("tbody");
  for (const g of u.groups)
    body.append(
      h(
        "tr",
        { "data-key": g.key ?? "" },
        h("th", { scope: "row", class: "key" }, keyLabel(g.key)),
        ...COLUMNS.map((c) => cell("td", c, g)),
      ),
    );
  return scrollBox(h("table", { id: "usage-groups", "data-group-by": u.group_by }, h("thead", {}, head), body));
}

/** The chart's figures as a table: one row per day and group. */
function daysTable(u: Usage): HTMLElement {
  const cols = ["day", u.group_by, "requests", "tokens", "cost"];
  const body = h("tbody");
  for (const f of u.series ?? [])
    body.append(
      h(
        "tr",
        { "data-day": f.day, "data-key": f.key ?? "" },
        h("td", {}, f.day),
        h("td", {}, keyLabel(f.key)),
        h("td", { class: "num" }, countText(f.requests)),
        h("td", { class: "num" }, countText(f.total_tokens)),
        h("td", { class: "num", title: usdTitle(f.cost_usd) }, usdText(f.cost_usd)),
      ),
    );
  const table = h("table", { id: "usage-days" }, h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { scope: "col" }, c)))), body);
  return h("details", { class: "usage-days" }, h("summary", {}, "The chart's figures, per day"), scrollBox(table));
}

/** The top groups by the metric over the range, then "other" when more groups are left. */
function seriesFor(u: Usage, metric: Metric) {
  const value = (g: Figures) => (metric === "cost" ? Number(g.cost_usd ?? 0) : g.total_tokens);
  const ranked = [...u.groups].sort((a, b) => value(b) - value(a));
  const top = ranked.slice(0, ranked.length > TOP_SERIES ? TOP_SERIES - 1 : TOP_SERIES);
  const named = new Set(top.map((g) => g.key ?? ""));
  const series = top.map((g) => ({ key: g.key ?? "", label: keyLabel(g.key) }));
  if (ranked.length > top.length) series.push({ key: "\u0000other", label: `other (${ranked.length - top.length})` });
  return { series, seriesOf: (key: string | null) => (named.has(key ?? "") ? (key ?? "") : "\u0000other") };
}

/** The range and grouping form: dates (UTC days), group by, and what the chart shows. */
function rangeForm(apply: () => void, redraw: () => void) {
  const from = h("input", { type: "date", name: "from", "aria-label": "from", value: utcDay(DEFAULT_DAYS - 1), required: true });
  const to = h("input", { type: "date", name: "to", "aria-label": "to", value: utcDay(0), required: true });
  const groupBy = h("select", { name: "group_by", "aria-label": "group by" }, ...GROUPS.map((g) => h("option", { value: g }, g)));
  const metric = h(
    "select",
    { name: "metric", "aria-label": "chart shows" },
    h("option", { value: "cost" }, "cost"),
    h("option", { value: "tokens" }, "tokens"),
  );
  const field = (label: string, input: HTMLElement) =>
    h("label", { class: `field ${label.replace(/\s/g, "-")}` }, h("span", {}, label), input);
  const form = h(
    "form",
    { id: "usage-filters", class: "filters", autocomplete: "off" },
    field("from", from),
    field("to", to),
    field("group by", groupBy),
    field("chart", metric),
    h("div", { class: "actions" }, h("button", { type: "submit", "data-action": "apply" }, "Show")),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    apply();
  });
  groupBy.addEventListener("change", apply);
  metric.addEventListener("change", redraw);
  return {
    form,
    query: () => ({ from: from.value, to: to.value, group_by: groupBy.value, series: "day" }),
    metric: () => metric.value as Metric,
  };
}

export const usageView: ViewFactory = (ctx) => {
  const out = h("section", { id: "usage" });
  let shown: Usage | null = null;
  const form = rangeForm(
    () => void load(),
    () => shown && render(shown),
  );

  function render(u: Usage): void {
    if (u.groups.length === 0) {
      out.replaceChildren(h("p", { id: "usage-empty", class: "muted" }, `No model calls recorded from ${u.from} to ${u.to} (UTC days).`));
      return;
    }
    const metric = form.metric();
    const { series, seriesOf } = seriesFor(u, metric);
    const figure = h("figure", { id: "usage-chart" });
    const uncosted =
      u.total.uncosted_requests > 0
        ? h(
            "p",
            { class: "muted", id: "usage-uncosted" },
            `${countText(u.total.uncosted_requests)} ${u.total.uncosted_requests === 1 ? "model call has" : "model calls have"} no cost (model not priced, or usage not reported): not in the cost.`,
          )
        : null;
    out.replaceChildren(totalsList(u.total), uncosted ?? "", figure, h("h3", {}, `Per ${u.group_by}`), groupsTable(u), daysTable(u));
    // Drawn once the figure is in the page, at the width of its box (a phone's narrow one included).
    const width = Math.max(300, Math.min(960, Math.round(figure.clientWidth || 720)));
    figure.append(
      usageChart({ days: daysOf(u.from, u.to), series, figures: u.series ?? [], metric, seriesOf }, width),
      chartLegend(series),
    );
  }

  // Only the latest request's answer is drawn: switching group by twice quickly must not leave the first answer shown.
  let latest = 0;
  async function load(): Promise<void> {
    ctx.clearError();
    const mine = ++latest;
    try {
      const res = await ctx.call<Usage>(ADMIN_API.usage, { query: form.query() });
      if (!ctx.alive() || mine !== latest) return;
      shown = res.body;
      render(res.body);
    } catch (err) {
      if (!ctx.alive() || mine !== latest) return;
      shown = null;
      out.replaceChildren();
      ctx.fail(err);
    }
  }

  ctx.root.append(
    heading("Usage", () => void load()),
    form.form,
    out,
  );
  void load();
  return undefined;
};
