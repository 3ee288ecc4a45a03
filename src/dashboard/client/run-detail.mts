/**
 * One run in full (`#/runs/<run_id>`): its facts, the approval controls when it waits for a human, its answer, the
 * timeline of its events, its tool calls with their gate decisions, and the prompt manifest of each model call.
 */

import { durationText } from "../durations.ts";
import { countText, usdText, usdTitle } from "../usage-format.ts";
import { decideApproval } from "./approval-decision.mts";
import { h, time } from "./dom.mts";
import { shortId } from "./run-columns.mts";
import { gateText, type RunEvent, type Timeline } from "./run-timeline.mts";
import type { ViewContext } from "./view.mts";

/** GET /api/admin/runs/{run_id}, as far as this page reads it. */
export interface RunDetail {
  run: {
    id: string;
    agent_id: string;
    status: string;
    output: string;
    provider: string;
    model: string;
    duration_ms: number;
    tool_calls: number;
    source: string;
  };
  events: RunEvent[];
  manifests: { turn_id: string; created_at: string; manifest: Manifest }[];
  /** Issue 25 §2 (D-078): provider-reported usage and the exact cost (null: not priced, or a call reported no usage). */
  usage?: {
    requests: number;
    unreported_requests: number;
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    total_tokens: number;
  };
  cost?: { usd: string } | null;
}

interface Manifest {
  version?: string;
  stack_sha256?: string;
  stack?: { layer: string; id: string; file: string; sha256: string; bytes: number; tokens_est: number; source: string }[];
  notes?: string[];
}

const str = (v: unknown): string => (typeof v === "string" ? v : v === undefined || v === null ? "" : String(v));

/** A table in a box of its own that scrolls sideways on a narrow screen (the page itself never does). */
export const scrollBox = (table: HTMLTableElement) => h("div", { class: "table-scroll" }, table);

/** The configuration a run was accepted under (`run.created`'s `config`): "v3 (admin) 3d78b1414edd…". */
function configText(config: unknown): string {
  if (typeof config !== "object" || config === null) return str(config);
  const c = config as Record<string, unknown>;
  const sha = str(c.sha256);
  return [c.version === undefined ? "" : `v${str(c.version)}`, c.source ? `(${str(c.source)})` : "", sha ? `${sha.slice(0, 12)}…` : ""]
    .filter(Boolean)
    .join(" ");
}

/** The classes of the usage facts (selectors: `dd.requests`, `dd.tokens`, `dd.cost`). */
const FACT_CLASS: Record<string, string> = { "model calls": "requests", tokens: "tokens", cost: "cost" };

/** D-082: the run's model calls, tokens (prompt / completion / cached) and cost, with the exact cost in a title. */
function usageFacts(d: RunDetail): [string, Node | string][] {
  const u = d.usage;
  if (!u) return [];
  const unreported = u.unreported_requests > 0 ? ` (${u.unreported_requests} without usage reported)` : "";
  const usd = d.cost?.usd ?? null;
  return [
    ["model calls", `${u.requests}${unreported}`],
    [
      "tokens",
      `${countText(u.total_tokens)} — prompt ${countText(u.prompt_tokens)} (cached ${countText(u.cached_tokens)}), completion ${countText(u.completion_tokens)}`,
    ],
    ["cost", h("span", { title: usdTitle(usd) }, usdText(usd))],
  ];
}

function facts(d: RunDetail): HTMLElement {
  const r = d.run;
  const created = d.events.find((e) => e.event_type === "run.created");
  const completed = d.events.find((e) => e.event_type === "run.completed");
  const pairs: [string, Node | string][] = [
    ["run", h("code", { class: "run-id" }, r.id)],
    ["status", h("span", { class: "status", "data-status": r.status }, r.status)],
    ["agent", r.agent_id],
    ["source", r.source],
    ["model", `${r.provider} / ${r.model}`],
    ["created", time(created?.ts)],
    ["duration", durationText(r.duration_ms)],
    ["tool rounds", completed ? str(completed.payload.rounds) : "—"],
    ["tool calls", String(r.tool_calls)],
  ];
  pairs.push(...usageFacts(d));
  const config = created?.payload.config;
  if (config !== undefined) pairs.push(["config", configText(config)]);
  const dl = h("dl", { class: "facts" });
  for (const [k, v] of pairs)
    dl.append(
      h("dt", {}, k),
      h("dd", { class: k === "status" ? "status" : FACT_CLASS[k], "data-status": k === "status" ? r.status : null }, v),
    );
  return dl;
}

/** Approvals this run asked for that no `approval.decided` answered yet. */
function pendingApprovals(events: readonly RunEvent[]): RunEvent[] {
  const decided = new Set(events.filter((e) => e.event_type === "approval.decided").map((e) => e.payload.approval_id));
  return events.filter((e) => e.event_type === "approval.requested" && !decided.has(e.payload.approval_id));
}

/**
 * Approve / Deny for each approval the waiting run asked for; `onDecided` reads the run again. Each approval's
 * controls are made once and kept in `kept` across polls, so a reason being typed survives the next read.
 */
function approvalControls(
  ctx: ViewContext,
  events: readonly RunEvent[],
  kept: Map<string, HTMLElement>,
  onDecided: () => void,
): HTMLElement | null {
  const pending = pendingApprovals(events);
  if (pending.length === 0) return null;
  const box = h("section", { id: "run-approvals" }, h("h4", {}, "Waiting for approval"));
  for (const e of pending) {
    const id = str(e.payload.approval_id);
    const existing = kept.get(id);
    if (existing) {
      box.append(existing);
      continue;
    }
    const reason = h("input", { type: "text", class: "reason", placeholder: "reason (optional)", maxlength: 500, "aria-label": "reason" });
    const approve = h("button", { type: "button", "data-action": "approve" }, "Approve");
    const deny = h("button", { type: "button", "data-action": "deny", class: "danger" }, "Deny");
    const status = h("span", { class: "decision-status muted" });
    const decide = async (decision: "approve" | "deny") => {
      approve.disabled = deny.disabled = true;
      const result = await decideApproval(ctx, id, decision, reason.value);
      if (!ctx.alive()) return;
      if (result) {
        status.textContent = result.status;
        status.setAttribute("data-status", result.status);
      }
      if (!result || result.status === "pending") approve.disabled = deny.disabled = false;
      onDecided();
    };
    approve.addEventListener("click", () => void decide("approve"));
    deny.addEventListener("click", () => void decide("deny"));
    const el = h(
      "div",
      { class: "approval", "data-approval-id": id },
      h(
        "p",
        {},
        h("strong", { class: "tool" }, str(e.payload.tool)),
        ` — ${str(e.payload.reason)} (expires `,
        time(str(e.payload.expires_at)),
        ")",
      ),
      h("div", { class: "decision" }, reason, approve, deny, status),
    );
    kept.set(id, el);
    box.append(el);
  }
  return box;
}

interface CallRow {
  round: string;
  tool: string;
  id: string;
  gate: string;
  approval: string;
  result: string;
  ok: boolean | null;
  ms: string;
}

/** Each tool call of the run with its gate decision, approval and result, from the events. */
function toolCalls(events: readonly RunEvent[]): CallRow[] {
  const calls = new Map<string, CallRow>();
  /** The latest call of each tool call id (an approval names the id, not the round). */
  const byId = new Map<string, CallRow>();
  const approvals = new Map<string, CallRow>();
  const key = (p: Record<string, unknown>) => `${str(p.round)}:${str(p.tool_call_id)}`;
  for (const { event_type: type, payload: p } of events) {
    if (type === "tool.call") {
      const row: CallRow = {
        round: str(p.round),
        tool: str(p.tool),
        id: str(p.tool_call_id),
        gate: "—",
        approval: "—",
        result: "pending",
        ok: null,
        ms: "—",
      };
      calls.set(key(p), row);
      byId.set(row.id, row);
    }
    const call = byId.get(str(p.tool_call_id));
    if (type === "approval.requested" && call) {
      call.approval = "asked";
      approvals.set(str(p.approval_id), call);
    }
    const asked = approvals.get(str(p.approval_id));
    if (type === "approval.decided" && asked) asked.approval = `${str(p.decision)}${str(p.decided_by) ? ` by ${str(p.decided_by)}` : ""}`;
    const done = calls.get(key(p));
    if (type === "tool.result" && done) {
      if (p.gate !== undefined) done.gate = gateText(p.gate);
      done.ok = p.ok === true;
      done.result = `${p.ok === true ? "ok" : "failed"}${str(p.summary) ? ` — ${str(p.summary)}` : ""}`;
      done.ms = typeof p.duration_ms === "number" ? `${p.duration_ms} ms` : "—";
    }
  }
  return [...calls.values()];
}

function toolCallsTable(events: readonly RunEvent[]): HTMLElement {
  const rows = toolCalls(events);
  if (rows.length === 0) return h("p", { id: "run-tool-calls-none", class: "muted" }, "No tool calls.");
  const body = h("tbody");
  for (const c of rows)
    body.append(
      h(
        "tr",
        { "data-tool-call-id": c.id, "data-tool": c.tool },
        h("td", {}, c.round),
        h("td", { class: "tool" }, c.tool),
        h("td", {}, h("code", { title: c.id }, c.id)),
        h("td", { class: "gate" }, c.gate),
        h("td", { class: "approval" }, c.approval),
        h("td", { class: "result", "data-status": c.ok === null ? "pending" : c.ok ? "ok" : "failed" }, c.result),
        h("td", {}, c.ms),
      ),
    );
  const head = ["round", "tool", "call", "gate", "approval", "result", "took"].map((c) => h("th", { scope: "col" }, c));
  return scrollBox(h("table", { id: "run-tool-calls" }, h("thead", {}, h("tr", {}, ...head)), body));
}

/** The prompt manifest of each model call: a table of its layers (id, file, source, size, hash); the last one open. */
function manifests(d: RunDetail): HTMLElement {
  const box = h("div", { id: "run-manifests" });
  if (d.manifests.length === 0) box.append(h("p", { class: "muted" }, "No model call yet."));
  d.manifests.forEach((m, i) => {
    const round = m.turn_id.split(":")[1] ?? "?";
    const sha = str(m.manifest.stack_sha256);
    const body = h("tbody");
    for (const l of m.manifest.stack ?? [])
      body.append(
        h(
          "tr",
          { "data-layer": l.layer },
          h("td", { class: "layer" }, l.layer),
          h("td", {}, l.id),
          h("td", {}, l.file),
          h("td", {}, l.source),
          h("td", { class: "num" }, l.bytes),
          h("td", { class: "num" }, l.tokens_est),
          h("td", {}, h("code", { class: "sha", title: l.sha256 }, `${l.sha256.slice(0, 12)}…`)),
        ),
      );
    const head = ["layer", "id", "file", "source", "bytes", "tokens (est.)", "sha256"].map((c) => h("th", { scope: "col" }, c));
    const table = h("table", { class: "manifest", "data-turn-id": m.turn_id }, h("thead", {}, h("tr", {}, ...head)), body);
    const notes =
      (m.manifest.notes ?? []).length > 0 ? h("ul", { class: "muted" }, ...(m.manifest.notes ?? []).map((n) => h("li", {}, n))) : null;
    box.append(
      h(
        "details",
        { open: i === d.manifests.length - 1 },
        h(
          "summary",
          {},
          `model call ${round} · manifest v${str(m.manifest.version)} · stack `,
          h("code", { title: sha }, `${sha.slice(0, 12)}…`),
        ),
        scrollBox(table),
        notes,
      ),
    );
  });
  return box;
}

/** What one run's panel keeps across polls: its timeline's lines and its approval controls. */
export interface RunPanel {
  runId: string;
  timeline: Timeline;
  approvals: Map<string, HTMLElement>;
}

/** The run's detail, in `detail`; `panel` is the same object for every read of the same run. */
export function renderRunDetail(
  ctx: ViewContext,
  detail: HTMLElement,
  d: RunDetail,
  panel: RunPanel,
  controls: { close: HTMLButtonElement; onDecided: () => void },
): void {
  const { timeline } = panel;
  timeline.update(d.events);
  const r = d.run;
  detail.replaceChildren(
    h("div", { class: "bar" }, h("h3", { title: r.id }, `Run ${shortId(r.id)}`), controls.close),
    facts(d),
    (r.status === "awaiting_approval" ? approvalControls(ctx, d.events, panel.approvals, controls.onDecided) : null) ?? "",
    h("h4", {}, "Answer"),
    h("pre", { class: "output" }, r.output || "—"),
    h("h4", {}, "Timeline"),
    timeline.el,
    h("h4", {}, "Tool calls"),
    toolCallsTable(d.events),
    h("h4", {}, "Prompt manifest"),
    manifests(d),
  );
  const first = detail.hidden || detail.getAttribute("data-run-id") !== r.id;
  detail.setAttribute("data-run-id", r.id);
  detail.hidden = false;
  // A run just opened: bring it into view (on a phone it is below the whole list).
  if (first) detail.scrollIntoView({ block: "start" });
}
