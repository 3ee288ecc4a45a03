/**
 * Channel pairings (issue 24 §3), shown under the approvals: senders who asked to talk to an agent on a channel
 * whose policy is `pairing`, each approved here by its code (the sender should have given you the same code).
 */
import { ADMIN_API } from "../api-routes.ts";
import { ApiError } from "./api.mts";
import { h, time } from "./dom.mts";
import { heading, table, type ViewContext } from "./view.mts";

interface PairingRow {
  code: string;
  agent_id: string;
  channel: string;
  sender: string;
  created_at: string;
  expires_at: string;
}

/** The pending pairing codes with an Approve button each; loads once, again on Refresh. */
export function pairingsSection(ctx: ViewContext): HTMLElement {
  const { table: pairingsTable, body } = table("pairings-table", ["code", "agent", "channel", "sender", "asked", "expires", ""]);
  const empty = h("p", { id: "pairings-empty", hidden: true }, "No pairing codes pending.");
  const last = h("p", { id: "pairings-last", class: "muted", hidden: true });

  async function approve(p: PairingRow, tr: HTMLTableRowElement, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    ctx.clearError();
    try {
      await ctx.call(ADMIN_API.approvePairing, { params: { code: p.code } });
      if (!ctx.alive()) return;
      tr.remove();
      last.textContent = `${p.code}: approved — ${p.sender} may talk to ${p.agent_id} on ${p.channel}`;
      last.hidden = false;
      refreshEmpty();
    } catch (err) {
      if (!ctx.alive()) return;
      ctx.fail(err);
      // Used (409) or expired (410) meanwhile: it is no longer pending.
      if (err instanceof ApiError && (err.status === 409 || err.status === 410)) tr.remove();
      else button.disabled = false;
      refreshEmpty();
    }
  }

  function refreshEmpty(): void {
    empty.hidden = body.childElementCount > 0;
    pairingsTable.hidden = body.childElementCount === 0;
  }

  async function load(): Promise<void> {
    try {
      const res = await ctx.call<{ pairings: PairingRow[] }>(ADMIN_API.pairings, { query: { limit: 100 } });
      if (!ctx.alive()) return;
      body.replaceChildren();
      for (const p of res.body.pairings) {
        const button = h("button", { type: "button", "data-action": "approve-pairing" }, "Approve");
        const tr = h(
          "tr",
          { "data-pairing-code": p.code },
          h("td", {}, h("code", {}, p.code)),
          h("td", {}, p.agent_id),
          h("td", {}, p.channel),
          h("td", {}, h("code", {}, p.sender)),
          h("td", {}, time(p.created_at)),
          h("td", {}, time(p.expires_at)),
          h("td", { class: "decision" }, button),
        );
        button.addEventListener("click", () => void approve(p, tr, button));
        body.append(tr);
      }
      refreshEmpty();
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    }
  }

  pairingsTable.hidden = true;
  void load();
  return h(
    "section",
    { id: "pairings" },
    heading("Channel pairings", () => void load()),
    last,
    empty,
    pairingsTable,
  );
}
