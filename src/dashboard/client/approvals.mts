/** Approvals: tool calls waiting for a human, each approved or denied here (the run resumes either way). */
import { ADMIN_API } from "../api-routes.ts";
import { decideApproval } from "./approval-decision.mts";
import { decidedApprovalsSection } from "./decided-approvals.mts";
import { h, time } from "./dom.mts";
import { pairingsSection } from "./pairings.mts";
import { heading, Pager, poll, table, type ViewFactory } from "./view.mts";

interface ApprovalRow {
  approval_id: string;
  agent_id: string;
  run_id: string;
  tool: string;
  status: string;
  created_at: string;
  expires_at: string;
}

/** New requests show up without a reload. */
const POLL_MS = 5000;

export const approvalsView: ViewFactory = (ctx) => {
  const { table: approvalsTable, body } = table("approvals-table", [
    "approval",
    "agent",
    "run",
    "tool",
    "requested",
    "expires",
    "status",
    "decision",
  ]);
  const empty = h("p", { id: "approvals-empty", hidden: true }, "No approvals pending.");
  const last = h("p", { id: "approvals-last", class: "muted", hidden: true });
  /** Decided here: a poll that still lists one (the index lags a moment) must not bring it back. */
  const decided = new Set<string>();
  const rows = new Map<string, HTMLTableRowElement>();

  function refreshEmpty(): void {
    const pending = rows.size > 0;
    empty.hidden = pending;
    approvalsTable.hidden = rows.size === 0;
  }

  /** A decided (or expired) approval leaves the pending list; the line above the table says what became of it. */
  function setStatus(id: string, tr: HTMLTableRowElement, status: string, by: string | null = null): void {
    if (status === "pending") return;
    if (tr.nextElementSibling?.classList.contains("args")) tr.nextElementSibling.remove();
    tr.remove();
    rows.delete(id);
    last.textContent = by ? `${id}: ${status} by ${by}` : `${id}: ${status}`;
    last.setAttribute("data-status", status);
    last.hidden = false;
    refreshEmpty();
  }

  async function decide(a: ApprovalRow, decision: "approve" | "deny", tr: HTMLTableRowElement, reason: HTMLInputElement): Promise<void> {
    const buttons = tr.querySelectorAll<HTMLButtonElement>("td.decision button");
    for (const b of buttons) b.disabled = true;
    const result = await decideApproval(ctx, a.approval_id, decision, reason.value);
    if (!ctx.alive()) return;
    // Decided here, elsewhere (409) or expired (410): a status other than pending takes the row out of the list.
    if (result && result.status !== "pending") decided.add(a.approval_id);
    if (result) setStatus(a.approval_id, tr, result.status, result.decided_by);
    if (!result || result.status === "pending") for (const b of buttons) b.disabled = false;
  }

  async function inspect(id: string, tr: HTMLTableRowElement, button: HTMLButtonElement): Promise<void> {
    const next = tr.nextElementSibling;
    if (next?.classList.contains("args")) {
      next.remove();
      button.textContent = "Arguments";
      return;
    }
    try {
      const res = await ctx.call<{ args: unknown; reason: string; requester: string; channel: string }>(ADMIN_API.approval, {
        params: { approval_id: id },
      });
      if (!ctx.alive()) return;
      const a = res.body;
      const cell = h(
        "td",
        { colspan: 8 },
        h("p", { class: "muted" }, `requested by ${a.requester} on ${a.channel}${a.reason ? `: ${a.reason}` : ""}`),
        h("pre", { class: "payload" }, JSON.stringify(a.args, null, 2)),
      );
      tr.after(h("tr", { class: "args" }, cell));
      button.textContent = "Hide arguments";
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    }
  }

  function add(a: ApprovalRow, where: "top" | "bottom"): void {
    if (rows.has(a.approval_id) || decided.has(a.approval_id) || a.status !== "pending") return;
    const reason = h("input", { type: "text", class: "reason", placeholder: "reason (optional)", maxlength: 500, "aria-label": "reason" });
    const approve = h("button", { type: "button", "data-action": "approve" }, "Approve");
    const deny = h("button", { type: "button", "data-action": "deny", class: "danger" }, "Deny");
    const args = h("button", { type: "button", "data-action": "inspect" }, "Arguments");
    const tr = h(
      "tr",
      { "data-approval-id": a.approval_id },
      h("td", {}, h("code", { class: "id", title: a.approval_id }, a.approval_id)),
      h("td", {}, a.agent_id),
      h("td", {}, h("a", { class: "id", title: a.run_id, href: `#/runs/${encodeURIComponent(a.run_id)}` }, a.run_id)),
      h("td", { class: "tool" }, a.tool),
      h("td", {}, time(a.created_at)),
      h("td", {}, time(a.expires_at)),
      h("td", { class: "status", "data-status": a.status }, a.status),
      h("td", { class: "decision" }, reason, approve, deny),
    );
    tr.querySelector("td")?.append(" ", args);
    approve.addEventListener("click", () => void decide(a, "approve", tr, reason));
    deny.addEventListener("click", () => void decide(a, "deny", tr, reason));
    args.addEventListener("click", () => void inspect(a.approval_id, tr, args));
    rows.set(a.approval_id, tr);
    if (where === "top") body.prepend(tr);
    else body.append(tr);
  }

  const query = () => ({ status: "pending", limit: 50 });
  const pager = new Pager<ApprovalRow>(ctx, ADMIN_API.approvals, "approvals", query, (items, first) => {
    if (first) {
      body.replaceChildren();
      rows.clear();
    }
    for (const a of items) add(a, "bottom");
    refreshEmpty();
    watcher.kick(POLL_MS);
  });

  const watcher = poll(ctx, async () => {
    const items = await pager.peek();
    if (!items) return null;
    for (const a of [...items].reverse()) add(a, "top");
    refreshEmpty();
    return POLL_MS;
  });

  approvalsTable.hidden = true;
  ctx.root.append(
    heading("Approvals", () => void pager.first()),
    last,
    empty,
    approvalsTable,
    pager.button,
    decidedApprovalsSection(ctx),
    pairingsSection(ctx),
  );
  void pager.first();
  return undefined;
};
