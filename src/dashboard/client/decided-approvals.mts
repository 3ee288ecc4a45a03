/**
 * Recently decided approvals (issue 24 §2), shown under the pending ones: what became of each and who decided it —
 * `admin` (here or through the admin API), or `telegram:<user id>` / `slack:<user id>` for a chat's button.
 */
import { ADMIN_API } from "../api-routes.ts";
import { h, time } from "./dom.mts";
import { heading, table, type ViewContext } from "./view.mts";

interface DecidedRow {
  approval_id: string;
  agent_id: string;
  tool: string;
  status: string;
  decided_at: string | null;
  decided_by: string | null;
  decided_via: string | null;
}

/** The newest approvals that are no longer pending, with their decider; loads once, again on Refresh. */
export function decidedApprovalsSection(ctx: ViewContext): HTMLElement {
  const { table: decidedTable, body } = table("decided-approvals-table", ["approval", "agent", "tool", "status", "decided", "by", "via"]);
  const empty = h("p", { id: "decided-approvals-empty", hidden: true }, "No approvals decided yet.");

  async function load(): Promise<void> {
    try {
      const res = await ctx.call<{ approvals: DecidedRow[] }>(ADMIN_API.approvals, { query: { limit: 50 } });
      if (!ctx.alive()) return;
      body.replaceChildren();
      for (const a of res.body.approvals.filter((x) => x.status !== "pending").slice(0, 20)) {
        body.append(
          h(
            "tr",
            { "data-approval-id": a.approval_id },
            h("td", {}, h("code", { class: "id", title: a.approval_id }, a.approval_id)),
            h("td", {}, a.agent_id),
            h("td", { class: "tool" }, a.tool),
            h("td", { class: "status", "data-status": a.status }, a.status),
            h("td", {}, a.decided_at ? time(a.decided_at) : "—"),
            h("td", { class: "decided-by" }, a.decided_by ?? "—"),
            h("td", { class: "decided-via" }, a.decided_via ?? "—"),
          ),
        );
      }
      empty.hidden = body.childElementCount > 0;
      decidedTable.hidden = body.childElementCount === 0;
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    }
  }

  decidedTable.hidden = true;
  void load();
  return h(
    "section",
    { id: "decided-approvals" },
    heading("Decided recently", () => void load()),
    empty,
    decidedTable,
  );
}
