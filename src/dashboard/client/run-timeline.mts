/**
 * A run's lifecycle events as a readable timeline: each event one line with its offset from the run's first event
 * and a one-line summary per event type; the event's JSON stays one click away (a `<details>` disclosure).
 */

import { durationText, offsetText } from "../durations.ts";
import { h, show } from "./dom.mts";

/** One S3 §2 lifecycle event as the admin API returns it. */
export interface RunEvent {
  event_type: string;
  seq: number;
  ts: string;
  payload: Record<string, unknown>;
}

const str = (v: unknown): string => (typeof v === "string" ? v : v === undefined || v === null ? "" : show(v));
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** How the tool gate decided a call (a tool.result's `gate`): "allowed by policy p1", "denied by policy p1: why". */
export function gateText(gate: unknown): string {
  if (typeof gate !== "object" || gate === null) return "no gate decision";
  const g = gate as Record<string, unknown>;
  const policy = str(g.policy_id) ? ` by policy ${str(g.policy_id)}` : "";
  const outcome = str(g.outcome);
  if (outcome === "allowed") return `allowed${policy}`;
  if (outcome === "requires_approval") return `approval required${policy}`;
  return `${outcome || "decided"}${policy}${str(g.reason) ? `: ${str(g.reason)}` : ""}`;
}

/** The tool calls a round's model answer asked for (their `tool.call` events). */
function callsInRound(events: readonly RunEvent[], round: unknown): number {
  return events.filter((e) => e.event_type === "tool.call" && e.payload.round === round).length;
}

/** The one-line summary of `events[i]`; the events around it give a model call its duration and its tool calls. */
export function summarize(events: readonly RunEvent[], i: number): string {
  const e = events[i] as RunEvent;
  const p = e.payload;
  const next = events[i + 1];
  switch (e.event_type) {
    case "run.created":
      return `created (${str(p.source) || "?"})${str(p.model) ? ` for ${str(p.provider)}/${str(p.model)}` : ""}${str(p.job_id) ? `, job ${str(p.job_id)}` : ""}`;
    case "run.started":
      return "started";
    case "model.requested": {
      const head = `model call ${str(p.round) || "?"}`;
      if (!next) return `${head}: waiting for the model`;
      const ms = Date.parse(next.ts) - Date.parse(e.ts);
      return `${head}: ${durationText(ms)}, ${plural(callsInRound(events, p.round), "tool call")}`;
    }
    case "tool.call":
      return `tool ${str(p.tool)} called (${str(p.tool_call_id)})`;
    case "approval.requested":
      return `approval asked: ${str(p.tool)}${str(p.reason) ? ` — ${str(p.reason)}` : ""}`;
    case "approval.decided":
      return `approval ${str(p.decision)}${str(p.decided_by) ? ` by ${str(p.decided_by)}` : ""}${str(p.reason) ? `: ${str(p.reason)}` : ""}`;
    case "tool.result":
      return toolResultText(p);
    case "run.completed":
      return `completed: ${plural(num(p.rounds) ?? 0, "tool round")}, ${plural(num(p.tool_calls) ?? 0, "tool call")}`;
    case "run.failed":
      return `failed: ${str(p.code)}${str(p.message) ? ` — ${str(p.message)}` : ""}`;
    case "run.cancelled":
      return `cancelled${str(p.reason) ? `: ${str(p.reason)}` : ""}`;
    default:
      return e.event_type;
  }
}

/** "tool fs.list_dir: allowed by policy default, ok in 3 ms — listed 4 entries". */
function toolResultText(p: Record<string, unknown>): string {
  const error = p.error as { code?: unknown } | null | undefined;
  const result = p.ok === true ? "ok" : `failed${error && str(error.code) ? ` (${str(error.code)})` : ""}`;
  const gate = p.gate === undefined ? "" : `${gateText(p.gate)}, `;
  const ms = num(p.duration_ms);
  return `tool ${str(p.tool)}: ${gate}${result}${ms === null ? "" : ` in ${ms} ms`}${str(p.summary) ? ` — ${str(p.summary)}` : ""}`;
}

/**
 * The timeline `ol#run-events`, kept across polls: each event's line is made once (an opened disclosure stays open)
 * and every summary is written again, since a model call's line learns its duration from the event after it.
 */
export class Timeline {
  readonly el = h("ol", { id: "run-events", class: "timeline" });
  readonly #lines = new Map<number, HTMLLIElement>();

  /** Shows `events` (all of the run's, in order). */
  update(events: readonly RunEvent[]): void {
    const start = events[0] ? Date.parse(events[0].ts) : 0;
    events.forEach((e, i) => {
      let li = this.#lines.get(e.seq);
      if (!li) {
        li = h(
          "li",
          { "data-event-type": e.event_type, "data-seq": e.seq },
          h("span", { class: "offset", title: e.ts }, offsetText(Date.parse(e.ts) - start)),
          " ",
          h("span", { class: "summary" }),
          h(
            "details",
            {},
            h("summary", {}, `#${e.seq} ${e.event_type}`),
            h("pre", { class: "payload" }, JSON.stringify(e.payload, null, 2)),
          ),
        );
        this.#lines.set(e.seq, li);
        this.el.append(li);
      }
      const summary = li.querySelector(".summary");
      if (summary) summary.textContent = summarize(events, i);
    });
  }
}
