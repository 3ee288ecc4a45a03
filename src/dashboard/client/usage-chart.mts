/**
 * The usage view's chart (issue 25 §3, D-082): stacked bars per UTC day, one segment per group (the top groups and
 * "other"), drawn as inline SVG with DOM APIs by the page's own code — no library, no CDN, no inline style: colours
 * and fonts come from admin.css classes (`series-0` …), so the strict CSP holds. Its width follows the box it is drawn
 * in (the viewBox scales it afterwards), a title and a description name it for screen readers, and the same figures
 * are in the data table the view shows beside it.
 */
import { countText, usdText } from "../usage-format.ts";
import { h } from "./dom.mts";

const SVG = "http://www.w3.org/2000/svg";

type SvgAttrs = Record<string, string | number>;

/** An SVG element with attributes and children (strings as text nodes): never markup from data. */
function s(tag: string, attrs: SvgAttrs = {}, ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

/** One group's figures on one day, as GET /api/admin/usage?series=day has them. */
export interface DayFigure {
  day: string;
  key: string | null;
  total_tokens: number;
  cost_usd: string | null;
}

export type Metric = "cost" | "tokens";

/** What the chart draws: the days of the range in order, the series (top groups, then "other") and the figures. */
export interface ChartInput {
  days: string[];
  series: { key: string; label: string }[];
  figures: DayFigure[];
  metric: Metric;
  /** Maps a figure's group key to its series key (a group outside the top ones → "other"). */
  seriesOf: (key: string | null) => string;
}

/** A figure's value in the metric (cost as a float for drawing only; the tables keep the exact strings). */
const metricValue = (f: DayFigure, metric: Metric) => (metric === "cost" ? Number(f.cost_usd ?? 0) : f.total_tokens);
const metricText = (v: number, metric: Metric) => (metric === "cost" ? usdText(String(v)) : countText(Math.round(v)));

/** A round top for the axis: 1, 2 or 5 × a power of ten at or above `max`. */
function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

/** The chart as an `svg.chart` `width` units wide; one `g.day[data-day]` per day with data. */
export function usageChart(input: ChartInput, width: number): SVGElement {
  const { days, series, figures, metric } = input;
  const height = 240;
  const pad = { left: 64, right: 8, top: 22, bottom: 34 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / Math.max(1, days.length);
  const barW = Math.max(1, Math.min(28, slot * 0.7));
  const index = new Map(series.map((x, i) => [x.key, i]));

  // Each day's stack: the value of each series, in series order.
  const stacks = new Map<string, number[]>();
  for (const f of figures) {
    const stack = stacks.get(f.day) ?? series.map(() => 0);
    const i = index.get(input.seriesOf(f.key)) ?? series.length - 1;
    stack[i] = (stack[i] ?? 0) + metricValue(f, metric);
    stacks.set(f.day, stack);
  }
  const top = niceMax(Math.max(0, ...[...stacks.values()].map((st) => st.reduce((a, b) => a + b, 0))));
  const y = (v: number) => pad.top + plotH - (v / top) * plotH;

  const what = metric === "cost" ? "cost (USD)" : "tokens";
  const title = s("title", { id: "usage-chart-title" }, `Usage per day: ${what}`);
  const desc = s(
    "desc",
    { id: "usage-chart-desc" },
    `Stacked bars, one per UTC day from ${days[0] ?? ""} to ${days.at(-1) ?? ""} with usage, one segment per group: ${series.map((x) => x.label).join(", ")}. The same figures are in the table below.`,
  );
  const svg = s("svg", {
    class: "chart",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-labelledby": "usage-chart-title usage-chart-desc",
    "data-metric": metric,
  });
  svg.append(title, desc);

  // The y axis: 0, ¼, ½, ¾ and the top, as grid lines with their values.
  const axis = s("g", { class: "axis y" });
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    axis.append(
      s("line", { class: "grid", x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v) }),
      s("text", { x: pad.left - 6, y: y(v) + 4, "text-anchor": "end" }, metricText(v, metric)),
    );
  }
  // Axis titles: what the bars measure (above the y axis) and that the days are UTC (under the x axis, at its end).
  axis.append(s("text", { class: "axis-title", x: 4, y: 10 }, what));
  svg.append(axis);

  // The x axis: at most about one label per 70 units, the first and every step-th day (MM-DD).
  const xAxis = s("g", { class: "axis x" });
  const step = Math.max(1, Math.ceil(days.length / Math.max(1, Math.floor(plotW / 70))));
  days.forEach((day, i) => {
    if (i % step !== 0) return;
    const cx = pad.left + slot * (i + 0.5);
    xAxis.append(
      s("line", { class: "tick", x1: cx, x2: cx, y1: pad.top + plotH, y2: pad.top + plotH + 4 }),
      s("text", { x: cx, y: height - pad.bottom + 18, "text-anchor": "middle" }, day.slice(5)),
    );
  });
  xAxis.append(s("text", { class: "axis-title", x: width - pad.right, y: height - 2, "text-anchor": "end" }, "UTC day"));
  xAxis.append(s("line", { class: "base", x1: pad.left, x2: width - pad.right, y1: pad.top + plotH, y2: pad.top + plotH }));
  svg.append(xAxis);

  const bars = s("g", { class: "bars" });
  days.forEach((day, i) => {
    const stack = stacks.get(day);
    if (!stack) return;
    const g = s("g", { class: "day", "data-day": day });
    const x = pad.left + slot * (i + 0.5) - barW / 2;
    let base = 0;
    stack.forEach((v, si) => {
      if (v <= 0) return;
      const label = series[si]?.label ?? "";
      g.append(
        s(
          "rect",
          { class: `series-${si}`, x, y: y(base + v), width: barW, height: Math.max(0.5, y(base) - y(base + v)), "data-series": label },
          s("title", {}, `${day} · ${label}: ${metricText(v, metric)}`),
        ),
      );
      base += v;
    });
    // A day whose figures are all zero in this metric still gets its (empty) group: it had usage.
    bars.append(g);
  });
  svg.append(bars);
  return svg;
}

/** The chart's legend: one `li[data-series]` per series (its label) with its colour. */
export function chartLegend(series: { key: string; label: string }[]): HTMLElement {
  return h(
    "ul",
    { class: "legend", id: "usage-legend" },
    ...series.map((x, i) =>
      h("li", { "data-series": x.label }, h("span", { class: `swatch series-${i}`, "aria-hidden": "true" }), x.label),
    ),
  );
}
