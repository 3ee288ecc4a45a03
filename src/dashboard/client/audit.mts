/** Audit: one agent's audit events of one (UTC) day, and whether that day's hash chains verify. */
import { ADMIN_API } from "../api-routes.ts";
import { h, time, todayUtc } from "./dom.mts";
import { heading, type ViewFactory } from "./view.mts";

interface Verify {
  ok: boolean;
  segments?: number;
  events?: number;
  streams?: number;
  first_problem?: { stream: string; key: string | null; problem: string };
}

interface AuditEvent {
  event_type?: string;
  ts?: string;
  actor?: string;
  run_id?: string;
  payload?: unknown;
}

/** The chain status in words: starts with "ok" or "broken". */
function chainText(v: Verify): string {
  if (v.ok) return `ok — ${v.segments ?? 0} segments, ${v.events ?? 0} events, ${v.streams ?? 0} streams`;
  const p = v.first_problem;
  return p ? `broken — ${p.problem} (stream ${p.stream}${p.key ? `, ${p.key}` : ""})` : "broken";
}

export const auditView: ViewFactory = (ctx) => {
  const agent = h("input", { id: "audit-agent", name: "agent_id", required: true, placeholder: "main", autocomplete: "off" });
  const date = h("input", { id: "audit-date", name: "date", type: "date", required: true, value: todayUtc() });
  const submit = h("button", { type: "submit" }, "Show");
  const form = h(
    "form",
    { id: "audit-form", class: "inline" },
    h("label", { for: "audit-agent" }, "agent"),
    agent,
    h("label", { for: "audit-date" }, "day (UTC)"),
    date,
    submit,
  );
  const chain = h("p", { id: "audit-chain", hidden: true });
  const events = h("ol", { id: "audit-events" });
  const empty = h("p", { id: "audit-empty", class: "muted", hidden: true }, "No audit events that day.");

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    ctx.clearError();
    submit.disabled = true;
    chain.hidden = true;
    empty.hidden = true;
    events.replaceChildren();
    const query = { agent_id: agent.value.trim(), date: date.value };
    try {
      const [verify, log] = await Promise.all([
        ctx.call<Verify>(ADMIN_API.auditVerify, { query }),
        ctx.call<unknown>(ADMIN_API.audit, { query, headers: { Accept: "application/x-ndjson" } }),
      ]);
      if (!ctx.alive()) return;
      chain.textContent = chainText(verify.body);
      chain.setAttribute("data-ok", String(verify.body.ok));
      chain.hidden = false;
      for (const line of log.text.split("\n")) {
        if (line.trim() === "") continue;
        let event: AuditEvent | null = null;
        try {
          event = JSON.parse(line) as AuditEvent;
        } catch {
          /* shown raw below */
        }
        events.append(
          event
            ? h(
                "li",
                { "data-event-type": event.event_type ?? "" },
                h("strong", {}, event.event_type ?? "?"),
                " ",
                time(event.ts),
                event.actor ? h("span", { class: "muted" }, ` by ${event.actor}`) : null,
                event.run_id ? h("a", { class: "run-link", href: `#/runs/${encodeURIComponent(event.run_id)}` }, event.run_id) : null,
                h("pre", { class: "payload" }, JSON.stringify(event.payload ?? {}, null, 2)),
              )
            : h("li", { class: "unparsed" }, h("pre", {}, line)),
        );
      }
      empty.hidden = events.childElementCount > 0;
    } catch (err) {
      if (ctx.alive()) ctx.fail(err);
    } finally {
      submit.disabled = false;
    }
  });

  ctx.root.append(heading("Audit log"), form, chain, empty, events);
  return undefined;
};
